"""A real browser for the web view's tests: Debian's chromium, headless, driven by
selenium through Debian's chromedriver (nothing downloads a browser of its own:
.ci/chromium-up.sh installs both). Without them the browser tests skip on a developer's
machine and fail under CI=true.

Screenshots are kept as test artefacts: in $HTGRID_TEST_ARTEFACTS/web when set (CI can
keep that directory), else under the test's pytest tmp path, in `screenshots/`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: What keeps chromium from reaching out (and hanging on a closed network).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
)


def spki_hash(cert_file: Path) -> str:
    """base64(sha256(SubjectPublicKeyInfo)) of a certificate: what chromium's
    --ignore-certificate-errors-spki-list pins (this certificate's key, no other)."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def _need_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        why = f"no browser to test the web view with: {', '.join(missing)} missing (.ci/chromium-up.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


class Shots:
    """Where a test's screenshots go, numbered in the order taken."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.count = 0

    def take(self, driver: Any, name: str) -> Path:
        self.where.mkdir(parents=True, exist_ok=True)
        self.count += 1
        path = self.where / f"{self.count:02d}-{name}.png"
        driver.save_screenshot(str(path))
        return path


@pytest.fixture
def shots(request: pytest.FixtureRequest, tmp_path: Path) -> Shots:
    base = os.environ.get("HTGRID_TEST_ARTEFACTS")
    name = re.sub(r"[^\w.-]+", "_", request.node.name)
    where = Path(base) / "web" / name if base else tmp_path / "screenshots"
    return Shots(where)


@pytest.fixture
def browser() -> Iterator[Callable[..., Any]]:
    """Makes headless chromium sessions (each with a fresh profile); `pin` names a
    certificate whose key the session accepts for TLS. All are quit at the end."""
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    made: list[tuple[Any, str]] = []

    def make(pin: Path | None = None) -> Any:
        profile = tempfile.mkdtemp(prefix="htgrid-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in (*FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        if pin is not None:
            options.add_argument(f"--ignore-certificate-errors-spki-list={spki_hash(pin)}")
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        driver.set_page_load_timeout(60)
        made.append((driver, profile))
        return driver

    yield make
    for driver, profile in made:
        try:
            driver.quit()
        finally:
            shutil.rmtree(profile, ignore_errors=True)

"""MAX_TRANSFER_INPUT_MB and MAX_TRANSFER_OUTPUT_MB: a sandbox over the limit is refused
(413, naming the knob) and leaves nothing behind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from htgrid.net import Jobs, ScheddClient
from htgrid.net._errors import SandboxTooLarge
from htgrid.net.security import SecurityConfig, client_ssl_context
from htgrid.pool import PoolError
from htgrid.queue import JobId
from htgrid.schedd import ScheddConfig
from htgrid.testing import PersonalPool, wait_for

from ._support import LOCAL, SPOOLING, submit, tar_of, untar
from .conftest import DOMAIN

MIB = 1 << 20


@pytest.fixture(scope="module")
def small(
    shared_tmp_factory: Callable[[str], Path], test_users: tuple[str, ...]
) -> Iterator[PersonalPool]:
    config = {"TRUST_DOMAIN": DOMAIN, "MAX_TRANSFER_INPUT_MB": 1, "MAX_TRANSFER_OUTPUT_MB": 1}
    home = shared_tmp_factory("small") / "home"
    with PersonalPool(home, periodic_interval=0.5, fsync=False, config=config) as pool:
        yield pool


@pytest.fixture
def alice(small: PersonalPool) -> ScheddClient:
    return small.remote(small.token(f"alice@{DOMAIN}"))


def _untouched(alice: ScheddClient, job: JobId) -> None:
    """The job still waits for its input, and nothing was written for it."""
    ad = alice.get(job)
    assert (ad["JobStatus"], ad["HoldReasonCode"]) == (5, 16)
    assert "StageInFinish" not in ad
    sandbox = Path(ad["Iwd"])
    assert list(sandbox.iterdir()) == []
    assert list(sandbox.parent.iterdir()) == [sandbox]  # no temporary file left either


def test_an_upload_over_the_limit_is_refused_by_its_declared_length(
    alice: ScheddClient,
) -> None:
    archive = tar_of({"big.dat": b"x" * (2 * MIB)})
    with alice:
        job = submit(alice, **SPOOLING)
        with pytest.raises(SandboxTooLarge) as refused:
            alice.put_input(job, archive)
        assert str(refused.value) == (
            f"the input sandbox of job {job} is {len(archive)} bytes, over the limit of "
            f"MAX_TRANSFER_INPUT_MB = 1 MiB ({MIB} bytes)"
        )
        _untouched(alice, job)
        small = tar_of({"small.dat": b"x" * (MIB // 2)})
        assert alice.put_input(job, small) == [job]  # under the limit: taken
        assert alice.get(job)["JobStatus"] == 1


def test_a_chunked_upload_is_cut_off_once_it_passes_the_limit(small: PersonalPool) -> None:
    token = small.token(f"alice@{DOMAIN}")
    with small.remote(token) as alice:
        job = submit(alice, **SPOOLING)
    archive = tar_of({"big.dat": b"y" * (3 * MIB)})

    def body() -> Iterator[bytes]:  # no Content-Length: the daemon must count
        for start in range(0, len(archive), 64 * 1024):
            yield archive[start : start + 64 * 1024]

    context = client_ssl_context([SecurityConfig.load(small.home).ca_dir / "ca.crt"])
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-tar"}
    with httpx.Client(base_url=small.url, verify=context, headers=headers) as raw:
        response = raw.put(f"/v1/jobs/{job}/input", content=body())
    assert response.status_code == 413
    problem = response.json()
    assert problem["error"] == "SandboxTooLarge"
    assert problem["detail"].startswith(f"the input sandbox of job {job} is at least ")
    assert problem["detail"].endswith(
        f"over the limit of MAX_TRANSFER_INPUT_MB = 1 MiB ({MIB} bytes)"
    )
    with small.remote(token) as alice:
        _untouched(alice, job)


def test_output_over_the_limit_is_refused_before_it_is_sent(alice: ScheddClient) -> None:
    script = b"#!/bin/sh\nhead -c 1500000 /dev/zero > big.dat\necho small > small.txt\n"
    with alice:
        job = submit(alice, Cmd="job.sh", JobUniverse=LOCAL, LeaveJobInQueue=True, **SPOOLING)
        alice.put_input(job, tar_of({"job.sh": script}, mode=0o755))
        wait_for(lambda: alice.get(job)["JobStatus"] == 4, what=f"job {job} to complete")
        with pytest.raises(SandboxTooLarge) as refused:
            alice.get_output(job)
        assert str(refused.value) == (
            f"the output of job {job} is 1500006 bytes, over the limit of "
            f"MAX_TRANSFER_OUTPUT_MB = 1 MiB ({MIB} bytes)"
        )
        assert "StageOutFinish" not in alice.get(job)
        # Once the job's output is small enough, it is handed out.
        alice.edit(Jobs.of([job]), {"TransferOutput": '"small.txt"'})
        assert untar(alice.get_output(job)) == {"small.txt": b"small\n"}


@pytest.mark.parametrize(
    ("text", "megabytes"), [("-1", None), ("0", 0), ("250", 250), (None, 10240)]
)
def test_the_limits_knobs(tmp_path: Path, text: str | None, megabytes: int | None) -> None:
    if text is not None:
        (tmp_path / "htgrid.conf").write_text(f"MAX_TRANSFER_OUTPUT_MB = {text}\n")
    config = ScheddConfig.load(tmp_path)
    assert (config.max_transfer_output_mb, config.max_transfer_input_mb) == (megabytes, 10240)


def test_a_limit_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    (tmp_path / "htgrid.conf").write_text("# limits\nMAX_TRANSFER_INPUT_MB = 10G\n")
    with pytest.raises(PoolError, match=r"htgrid.conf:2: MAX_TRANSFER_INPUT_MB must be a whole"):
        ScheddConfig.load(tmp_path)

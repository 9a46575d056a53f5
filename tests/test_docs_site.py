"""The documentation site builds with `mkdocs build --strict`: every page in the nav, every
link and anchor found, and the pages made from the code (the API, the knobs, the
commands' help) rendered from this checkout."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_with_the_pages_made_from_the_code(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mkdocs and mkdocs-material are not installed (pip install -e '.[test]')")
        pytest.skip("mkdocs and mkdocs-material are not installed")
    site = tmp_path / "site"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (site / "api" / "index.html").read_text()
    assert "/v1/jobs/{job_id}/output" in api and 'id="schema-problem"' in api
    commands = (site / "reference" / "commands" / "index.html").read_text()
    assert "htgrid ce trace" in commands and "examples:" in commands
    knobs = (site / "coming-from-htcondor" / "index.html").read_text()
    assert "GRIDMANAGER_JOB_PROBE_INTERVAL" in knobs and "htgrid:knobs" not in knobs
    assert "CEDAR against HTTPS" in (site / "bench" / "index.html").read_text()


def _code_blocks(text: str) -> Iterator[list[str]]:
    """The lines of each code block: fenced, or indented by four spaces."""
    yield from (b.splitlines() for b in re.findall(r"^```.*?\n(.*?)^```$", text, re.M | re.S))
    text = re.sub(r"^```.*?^```$", "", text, flags=re.M | re.S)
    for block in re.findall(r"(?:^    .*\n)+", text, flags=re.M):
        yield [line[4:] for line in block.splitlines()]


def documented_commands() -> Iterator[tuple[str, list[str]]]:
    """Each `htgrid ...` command line the README and the docs show, as argv after `htgrid`
    (a console block's commands are its `$ ` lines; the rest of it is output)."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for lines in _code_blocks(path.read_text()):
            text = "\n".join(lines).replace("\\\n", " ")
            prompted = re.findall(r"^\S*\$ (.*)$", text, flags=re.M)
            for line in prompted or text.splitlines():
                line = re.sub(r"\$\([^)]*\)", "X", re.split(r"\s+#", line)[0])
                for part in line.split(" | "):
                    if not re.match(r"\s*([A-Z_]+=\S+\s+)*htgrid\s", part):
                        continue  # a file's text, an ad, another program
                    words = shlex.split(part)
                    while words and re.match(r"[A-Z_]+=", words[0]):
                        words.pop(0)  # HTGRID_HOME=... before the command
                    if len(words) > 1:
                        yield path.relative_to(ROOT).as_posix(), words[1:]


def test_every_documented_command_line_is_one_htgrid_takes() -> None:
    from htgrid.cli import build_parser

    shown = list(documented_commands())
    assert len(shown) > 50  # the README's tour, the guides' examples
    wrong = []
    for where, argv in shown:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                build_parser(argv[0]).parse_args(argv)
            except SystemExit as exit:
                if exit.code:
                    wrong.append(f"{where}: htgrid {shlex.join(argv)}: {err.getvalue()}")
    assert not wrong, "\n".join(wrong)


def test_each_knob_the_htcondor_page_tables_is_one_htgrid_conf_takes() -> None:
    from htgrid.pool import KNOBS

    page = (ROOT / "docs" / "coming-from-htcondor.md").read_text()
    table = page[page.index("| knob | default | what differs |") : page.index("<!-- htgrid:knobs")]
    names = [
        name
        for row in table.splitlines()[2:]
        if row.startswith("| ")
        for name in re.findall(r"`([A-Z_*]+)`", row.split("|")[1])
    ]
    assert len(names) > 30
    not_knobs = {"QUEUE_SUPER_USERS"}  # the table says so: fixed, not a knob
    for name in names:
        pattern = re.compile(re.escape(name).replace(r"\*", ".*") + "$")
        assert name in not_knobs or any(pattern.match(knob) for knob in KNOBS), name

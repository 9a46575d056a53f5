"""The README's commands, run as written: its console blocks against a fresh personal pool.

Each `$ command` line of a ```console block runs in a scratch directory with HTGRID_HOME
a fresh pool's home (`htgrid` is this checkout's, `python -m htgrid`), and must print the
lines the README shows after it. What differs from one run to the next is set aside on
both sides: dates and run times, pids, ports, the home's path, the user's and host's
names, image sizes, column widths (spaces), and the order of rows (jobs that end in the
same second). `$ cat FILE` writes FILE when no earlier command made it, and checks it
when one did (a job's output). `htgrid q`, `status` and `history` show a moment of the
jobs' lives (a job's end is in its log a moment before it is in the history): each is
asked again until it shows the README's moment or a deadline passes.

The two set-up commands at the top are not run here: the first is
tests/test_main_job.py's, the second is CI itself.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import subprocess
import sys
from functools import partial
from pathlib import Path

from htgrid.testing import wait_for

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SETUP = ["sh examples/grid/run.sh --install", "bash .ci/run"]

#: What varies between runs, and what it becomes on both sides.
_VARYING = [
    (re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d"), "DATE"),
    (re.compile(r"\d\d/\d\d \d\d:\d\d"), "DATE"),
    (re.compile(r"\d+\+\d\d:\d\d:\d\d"), "DURATION"),
    (re.compile(r"\(pid \d+\)"), "(pid N)"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT"),
    (re.compile(r"htgrid@\S+ :"), "htgrid@HOST :"),
    (re.compile(r"trust domain: \S+"), "trust domain: HOST"),
    (re.compile(r"(?<=[ R] )\s*\d+\s+\d+\.\d(?= )"), " PRI SIZE"),  # q's PRI and SIZE
]
_README_HOME = "/home/alice/.htgrid"
_README_USER = "alice"


def console_blocks(text: str) -> list[list[tuple[str, list[str]]]]:
    """Each ```console block's commands, with the lines shown after each."""
    blocks = []
    for block in re.findall(r"^```console\n(.*?)^```$", text, flags=re.M | re.S):
        steps = [step.splitlines() for step in re.split(r"^\$ ", block, flags=re.M)[1:]]
        blocks.append([(lines[0], lines[1:]) for lines in steps])
    return blocks


def normalized(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        for pattern, replacement in _VARYING:
            line = pattern.sub(replacement, line)
        out.append(" ".join(line.split()))
    return out


def alike(shown: list[str], printed: list[str]) -> bool:
    want, got = normalized(shown), normalized(printed)
    return want == got or sorted(want) == sorted(got)


def _ours(text: str, home: Path) -> list[str]:
    """What a command printed, in the README's terms: its home, its user."""
    text = text.replace(str(home), _README_HOME)
    text = re.sub(rf"\b{re.escape(getpass.getuser())}\b", _README_USER, text)
    return text.splitlines()


def test_the_readme_starts_with_the_two_set_up_commands() -> None:
    text = README.read_text()
    first = re.match(r"# htgrid\n\n```sh\n(.*?)```\n", text, flags=re.S)
    assert first is not None, "README.md must open with its set-up commands"
    assert first.group(1).splitlines() == SETUP


def test_every_readme_console_command_prints_what_the_readme_shows(tmp_path: Path) -> None:
    blocks = console_blocks(README.read_text())
    assert blocks, "README.md shows no console block"
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    knobs = ["COLLECTOR_HOST = 127.0.0.1:0", "QUEUE_FSYNC = false"]
    knobs.append("GRIDMANAGER_JOB_PROBE_INTERVAL = 1")  # quicker, and it shows nowhere
    if os.geteuid() == 0:  # CI: root's jobs run, as examples/grid/run.sh lets them
        knobs.append("ALLOW_ROOT_JOBS = true")
    (home / "htgrid.conf").write_text("\n".join(knobs) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HTGRID_TRUST_DOMAIN",)}
    env.update(HTGRID_HOME=str(home), PYTHONPATH=str(ROOT / "src"))
    runs: list[str] = []  # what the last look printed, for the failure message

    def run(command: str, words: list[str], shown: list[str]) -> bool:
        done = subprocess.run(
            [sys.executable, "-m", "htgrid", *words[1:]],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        printed = _ours(done.stdout, home)
        runs[:] = [f"$ {command}", f"exit {done.returncode}", "README:", *shown]
        runs.extend(["printed:", *printed, "stderr:", done.stderr])
        return done.returncode == 0 and alike(shown, printed)

    try:
        for steps in blocks:
            for command, shown in steps:
                words = shlex.split(command)
                if words[0] == "cat":
                    path = work / words[1]
                    if path.exists():  # made by an earlier command: what it must hold
                        assert path.read_text().splitlines() == shown, command
                    else:
                        path.write_text("\n".join(shown) + "\n")
                    continue
                assert words[0] == "htgrid", f"README runs {command!r}: no test knows how"
                if words[1] in ("q", "status", "history"):  # a moment of a changing state
                    try:
                        wait_for(partial(run, command, words, shown), timeout=60, interval=0.2)
                    except TimeoutError:
                        raise AssertionError("\n".join(runs)) from None
                else:
                    assert run(command, words, shown), "\n".join(runs)
    finally:
        subprocess.run(
            [sys.executable, "-m", "htgrid", "down"], env=env, capture_output=True, timeout=120
        )

"""The pool guide's grid matchmaking example (once the README's), run as written against a
pool of real daemons.

The example is read from docs/guide/pool.md (the console block after the comment naming
this file), so the two cannot drift: each `$ cat FILE` writes FILE when the example has not
made it yet and checks it when it has (a job's output); each `$ htgrid ...` runs and
must print what the guide shows, the cluster number aside. Only the timing knobs
differ from a fresh pool's (quicker cycles, passes and polls).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.testing import PersonalPool, run_cli

from .conftest import FAST

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "pool.md"
MARKER = "tests/pool/test_readme_matchmaking.py"


def example() -> list[tuple[str, list[str]]]:
    """The example's commands, each with the lines the guide shows after it."""
    text = PAGE.read_text()
    after = text[text.index(MARKER) :]
    block = after[after.index("```console\n") + len("```console\n") :]
    block = block[: block.index("```")]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[PersonalPool]:
    knobs = {**FAST, "GRIDMANAGER_JOB_PROBE_INTERVAL": 1}
    daemons = ("MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR", "GRIDMANAGER")
    with PersonalPool(
        tmp_path / "home", periodic_interval=0.5, fsync=False, daemons=daemons, config=knobs
    ) as running:
        yield running


def test_the_readme_matchmaking_example_runs_as_written(pool: PersonalPool, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    steps = example()
    assert [command.split()[:2] for command, _ in steps] == [
        ["cat", "sites.ad"],
        ["htgrid", "advertise"],
        ["cat", "grid.sub"],
        ["htgrid", "submit"],
        ["htgrid", "wait"],
        ["cat", "grid.out"],
        ["htgrid", "history"],
    ]
    clusters: dict[str, str] = {}  # the guide's cluster number -> this pool's
    cwd = os.getcwd()
    os.chdir(work)
    try:
        for command, shown in steps:
            words = [clusters.get(word, word) for word in shlex.split(command)]
            if words[0] == "cat":
                path = work / words[1]
                if path.exists():  # made by the example: what it must hold
                    assert path.read_text().splitlines() == shown, command
                else:
                    path.write_text("\n".join(shown) + "\n")
                continue
            assert words[0] == "htgrid"
            argv = words[1:]
            if argv[0] == "wait":
                argv = [*argv, "-wait", "90"]  # a bound for the test, not in the guide
            rc, out, err = run_cli(pool.home, *argv)
            assert rc == 0, (command, err)
            if argv[0] == "submit":
                readme = re.search(r"cluster (\d+)\.", shown[-1])
                ours = re.search(r"cluster (\d+)\.", out)
                assert readme and ours, (shown, out)
                clusters[readme.group(1)] = ours.group(1)
                shown = [line.replace(readme.group(0), ours.group(0)) for line in shown]
            assert out.splitlines() == shown, command
    finally:
        os.chdir(cwd)

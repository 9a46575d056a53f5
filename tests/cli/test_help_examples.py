"""`htgrid --help` lists every command, and each command's help ends with an example."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Iterator

import pytest

from htgrid.cli import _MODULES, build_parser, main
from htgrid.cli._examples import EXAMPLES


def _commands(parser: object, words: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, sub in parser.subcommands().items():  # type: ignore[attr-defined]
        yield (*words, name)
        yield from _commands(sub, (*words, name))


COMMANDS = sorted(_commands(build_parser()))


def _help(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return out.getvalue()


def test_the_top_help_lists_every_command() -> None:
    text = _help()
    listed = {line.split()[0] for line in text.splitlines() if line.startswith("    ")}
    assert set(_MODULES) <= listed, set(_MODULES) - listed
    assert "examples:\n  htgrid up" in text


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_each_command_help_shows_an_example_of_itself(words: tuple[str, ...]) -> None:
    text = _help(*words)
    assert "example" in text, text
    example = text[text.index("example") :]
    assert f"htgrid {' '.join(words)}" in example, example


def _example_commands(text: str) -> Iterator[list[str]]:
    """The htgrid command lines of an example: comments, pipes' other ends, variables and
    `$(...)` set aside."""
    text = text.replace("\\\n", " ")
    for line in text.splitlines():
        line = re.sub(r"\$\([^)]*\)", "X", line.split("  #")[0])
        for part in line.split(" | "):
            words = shlex.split(part)
            while words and "=" in words[0] and words[0] != "htgrid":
                words.pop(0)  # HTGRID_HOME=... before the command
            if words and words[0] == "htgrid":
                yield words[1:]


@pytest.mark.parametrize("words", sorted(EXAMPLES), ids=lambda words: words or "htgrid")
def test_each_example_parses_as_the_command_line_it_shows(words: str) -> None:
    commands = list(_example_commands(EXAMPLES[words]))
    assert commands, EXAMPLES[words]
    for argv in commands:
        if "--help" in argv:
            continue  # the pointer to the commands' own help
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                args = build_parser(argv[0]).parse_args(argv)
            except SystemExit:
                pytest.fail(f"htgrid {shlex.join(argv)}: {err.getvalue()}")
        assert getattr(args, "handler", None) is not None, argv

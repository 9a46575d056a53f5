"""`htgrid --help` lists every command, and each command's help ends with an example."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import pytest

from htgrid.cli import _MODULES, build_parser, main


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


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_each_command_help_shows_an_example_of_itself(words: tuple[str, ...]) -> None:
    text = _help(*words)
    assert "example" in text, text
    example = text[text.index("example") :]
    assert f"htgrid {' '.join(words)}" in example, example

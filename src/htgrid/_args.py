"""Command lines read as HTCondor's tools read them: a flag is taken only as written.

argparse takes an unknown flag for any longer flag it begins (`-p` for `-pool`), and a
one-letter flag with text after it for that flag and a value (`-annex` for `-a nnex`).
`allow_abbrev=False` does not stop either: before Python 3.12 it leaves single-dash
flags matched by prefix (cpython#104860), and never stops the second. HTCondor's tools
accept short forms too, but only those each tool spells out (`condor_q -nob`): `flag()`
registers them with the flag, from the shortest form the tool's own parser takes, and
nothing else is guessed. Anything else that looks like a flag is a usage error naming
it (and only it: other arguments' values are never echoed).

Every parser of htgrid's command lines is an `ArgumentParser` from here; sub-parsers
made by `add_subparsers().add_parser()` are too (argparse makes them of the parent's
class).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["ArgumentParser", "flag"]

# What argparse reads as a negative number (a positional), not a flag.
_NUMBER: Final = re.compile(r"-\d+$|-\d*\.\d+$")


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser without guessing: flags are exact, or an error that names them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Filled before argparse's own __init__, which adds -h through add_argument.
        self._exact: set[str] = set()
        self._commands: list[Any] = []  # the add_subparsers actions
        #: A word more for some unknown flags: {"-annex": "condor_submit has none; ..."}.
        self.hints: dict[str, str] = {}
        self._built = False
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self._built = True  # argparse's own groups (positionals, options) are made by now

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self._exact.update(action.option_strings)
        return action

    def knows(self, option: str) -> bool:
        """Whether `option` is one of this parser's flags, as written."""
        return option in self._exact

    def flags(self) -> list[str]:
        """Every flag this parser takes, as written (HTCondor's short forms included)."""
        return sorted(self._exact)

    def subcommands(self) -> dict[str, ArgumentParser]:
        """The parser of each sub-command word."""
        return {name: sub for action in self._commands for name, sub in action.choices.items()}

    def add_mutually_exclusive_group(self, **kwargs: Any) -> Any:
        return _Group(self, super().add_mutually_exclusive_group(**kwargs))

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        group = super().add_argument_group(*args, **kwargs)
        return _Group(self, group) if self._built else group

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        self._commands.append(action)
        return action

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        words = list(sys.argv[1:] if args is None else args)
        self._refuse_guesses(words)
        return super().parse_known_args(words, namespace)

    def _refuse_guesses(self, words: list[str]) -> None:
        """A usage error for the first word argparse would guess a flag for."""
        commands = {name for action in self._commands for name in action.choices or ()}
        for word in words:
            if word == "--" or word in commands:
                return  # positionals from here; a sub-command's parser checks its own words
            if len(word) < 2 or word[0] != "-":
                continue
            name = word.partition("=")[0]
            if word in self._exact or name in self._exact:
                continue
            if name in self.hints:
                self.error(f"unknown option {name}: {self.hints[name]}")
            longer = sorted(f for f in self._exact if f.startswith(word))
            if longer:
                self.error(f"unknown option {name} (did you mean {' or '.join(longer[:3])}?)")
            if word[:2] in self._exact and not word.startswith("--"):
                self.error(f"unknown option {name}")  # not {word[:2]} with a value glued on
            if _NUMBER.match(word) or " " in word:
                continue  # a negative number or a phrase: argparse reads it as a value
            self.error(f"unknown option {name}")


class _Group:
    """A group whose flags the parser knows as its own (argparse's groups add flags to the
    parser without its add_argument)."""

    def __init__(self, parser: ArgumentParser, group: Any) -> None:
        self._parser = parser
        self._group = group

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action: argparse.Action = self._group.add_argument(*args, **kwargs)
        self._parser._exact.update(action.option_strings)
        return action

    def knows(self, option: str) -> bool:
        return self._parser.knows(option)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)


def flag(parser: Any, name: str, shortest: int, *more: str, **kwargs: Any) -> argparse.Action:
    """`-NAME`, `--NAME` and `more`, with HTCondor's short forms of -NAME.

    HTCondor's tools take `-NAME` cut to any length from `shortest` letters on
    (`is_dash_arg_prefix(arg, "nobatch", 3)`: -nob, -noba...); `--NAME` only whole. Those
    forms are added here, hidden from --help, and act as the flag itself. `parser` may be
    a parser or a group of one.
    """
    action: argparse.Action = parser.add_argument(f"-{name}", f"--{name}", *more, **kwargs)
    taken = set(action.option_strings)
    forms = [f"-{name[:n]}" for n in range(max(shortest, 1), len(name))]
    # A form another spelling has already (-better-analy... of -better-analyse) is its.
    forms = [form for form in forms if form not in taken and not parser.knows(form)]
    if forms:
        alias = dict(kwargs)
        alias.update(dest=action.dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        alias.pop("required", None)
        parser.add_argument(*forms, **alias)
    return action

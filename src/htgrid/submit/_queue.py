"""Queue statements: `queue [N] [vars] in|from|matching [slice] items`, and
the item data they produce (condor_utils/submit_utils.cpp, SubmitForeachArgs).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import overload

from htgrid.submit._errors import SubmitError
from htgrid.submit._values import string_is_long

__all__ = [
    "FileItems",
    "ForEach",
    "ProcSlot",
    "QueueArgs",
    "Slice",
    "iterate_procs",
    "load_items",
    "parse_queue_args",
    "split_item",
]


class ForEach(Enum):
    """How the items of a queue statement are produced."""

    NOT = "not"
    IN = "in"
    FROM = "from"
    MATCHING = "matching"
    MATCHING_FILES = "matching files"
    MATCHING_DIRS = "matching dirs"
    MATCHING_ANY = "matching any"


@dataclass(frozen=True, slots=True)
class Slice:
    """A Python-style `[start:stop:step]` over the item list (no negative step)."""

    start: int | None = None
    stop: int | None = None
    step: int | None = None

    def selected(self, index: int, length: int) -> bool:
        """Whether item `index` of a list of `length` items is selected."""
        lo = 0 if self.start is None else (self.start + length if self.start < 0 else self.start)
        hi = length if self.stop is None else (self.stop + length if self.stop < 0 else self.stop)
        step = self.step if self.step is not None else 1
        return lo <= index < hi and (step <= 1 or (index - lo) % step == 0)


@dataclass(frozen=True, slots=True)
class QueueArgs:
    """A parsed queue statement (items not yet read from files, commands or globs)."""

    count: int
    variables: tuple[str, ...]
    mode: ForEach
    slice: Slice | None
    items: tuple[str, ...]
    items_source: str | None  # file name or "cmd |" for `from`; None when inline

    @property
    def loop_variables(self) -> tuple[str, ...]:
        """The loop variables, `Item` when a foreach mode names none."""
        if self.mode is not ForEach.NOT and not self.variables:
            return ("Item",)
        return self.variables


_KEYWORDS = {"in": ForEach.IN, "from": ForEach.FROM, "matching": ForEach.MATCHING}
_QUALIFIERS = {
    "files": ForEach.MATCHING_FILES,
    "dirs": ForEach.MATCHING_DIRS,
    "any": ForEach.MATCHING_ANY,
}
_SLICE = re.compile(r"\[\s*([+-]?\d*)\s*(?::\s*([+-]?\d*)\s*(?::\s*([+-]?\d*)\s*)?)?\]")


def _string_list(text: str) -> list[str]:
    """HTCondor's StringList: split on commas and whitespace, empty tokens dropped."""
    return [tok for tok in re.split(r"[,\s]+", text) if tok]


def parse_queue_args(args: str, inline_items: tuple[str, ...] | None) -> QueueArgs:
    """Parse the (macro-expanded) text after `queue`."""
    text = args.strip()
    if not text:
        return QueueArgs(1, (), ForEach.NOT, None, (), None)
    mode = ForEach.NOT
    key_start = key_end = -1
    for match in re.finditer(r"[^\s(]+", text):
        word = match.group().lower()
        after = match.end()
        if word in _KEYWORDS and (
            after == len(text) or text[after].isspace() or text[after] == "("
        ):
            mode = _KEYWORDS[word]
            key_start, key_end = match.start(), after
            break
    items: tuple[str, ...] = ()
    source: str | None = None
    qslice: Slice | None = None
    head = text
    if mode is not ForEach.NOT:
        rest = text[key_end:].lstrip()
        while rest and rest[0] != "(":
            word_match = re.match(r"[^\s(]+", rest)
            word = word_match.group() if word_match else ""
            if word.startswith("["):
                slice_match = _SLICE.match(rest)
                if not slice_match:
                    raise SubmitError("invalid Queue statement: bad slice")
                qslice = Slice(
                    *(
                        int(g) if g not in (None, "", "+", "-") else None
                        for g in slice_match.groups()
                    )
                )
                rest = rest[slice_match.end() :].lstrip()
                continue
            qual = _QUALIFIERS.get(word.lower())
            if qual is None:
                break
            if mode is not ForEach.MATCHING:
                raise SubmitError(f"invalid Queue statement: unexpected keyword '{word}'")
            mode = qual
            rest = rest[len(word) :].lstrip()
        items, source = _items(rest, mode, inline_items)
        head = text[:key_start].rstrip()
    variables, count_text = _split_head(head) if mode is not ForEach.NOT else ((), head)
    count = 1
    if count_text.strip():
        value = string_is_long(count_text)
        if value is None:
            raise SubmitError(f"invalid Queue statement: '{count_text.strip()}' is not a number")
        if value < 0 or value >= 2**31 - 1:
            raise SubmitError(f"invalid Queue statement: count {value} is out of range")
        count = value
    return QueueArgs(count, variables, mode, qslice, items, source)


def _items(
    rest: str, mode: ForEach, inline_items: tuple[str, ...] | None
) -> tuple[tuple[str, ...], str | None]:
    one_line = False
    body = rest
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1]
        one_line = True
    if body.startswith("(") and not one_line:
        first = body[1:].strip()
        lines = ([first] if first else []) + list(inline_items or ())
        if mode is ForEach.FROM:
            return tuple(lines), None
        return tuple(tok for line in lines for tok in _string_list(line)), None
    if mode is ForEach.FROM:
        if one_line:
            return (body.strip(),) if body.strip() else (), None
        if not body.strip():
            raise SubmitError("invalid Queue statement: 'from' needs a file, a command or a list")
        return (), body.strip()
    return tuple(_string_list(body)), None


def _split_head(head: str) -> tuple[tuple[str, ...], str]:
    """Split `[count] [var, var...]` before the in/from/matching keyword."""
    pt = len(head)
    pvars = pt
    while pt > 0:
        ch = head[pt - 1]
        if ch.isdigit():
            pt -= 1
            while pt > 0:
                ch = head[pt - 1]
                if ch.isalpha():
                    break
                if not ch.isdigit():
                    ch = "!"
                    break
                pt -= 1
        if ch.isspace() or ch.isalpha() or ch in ",_.":
            pvars = pt - 1
        else:
            break
        pt -= 1
    variables = tuple(_string_list(head[pvars:]))
    return variables, head[:pvars]


def load_items(
    qargs: QueueArgs,
    *,
    cwd: str,
    run_command: Callable[[str, str], str],
) -> Sequence[str]:
    """The full item list: read a `from` file or command, or expand `matching` globs.
    A file's items are read as they are asked for (`FileItems`), not held."""
    if qargs.mode is ForEach.FROM and qargs.items_source is not None:
        name = qargs.items_source
        if name.endswith("|"):
            text = run_command(name[:-1].strip(), cwd)
            # unlike inline lists, item files keep every line, comments and blanks included
            lines = text.replace("\r\n", "\n").split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            return tuple(line.strip() for line in lines)
        if name == "-":
            raise SubmitError("QUEUE FROM - (read from stdin) is not allowed in this context")
        return FileItems(name if os.path.isabs(name) else os.path.join(cwd, name), name)
    if qargs.mode in (
        ForEach.MATCHING,
        ForEach.MATCHING_FILES,
        ForEach.MATCHING_DIRS,
        ForEach.MATCHING_ANY,
    ):
        return _glob(qargs.items, qargs.mode, cwd)
    return qargs.items


class FileItems(Sequence[str]):
    """The lines of an item file (each stripped; every line kept, comments and blanks
    included), read from the file as they are gone through: a file of a million lines
    in the memory of one. Counted when made; a file that changes after that is an error
    when it is read again (SubmitError), as is one with a NUL in a line."""

    def __init__(self, path: str, name: str) -> None:
        self._path = path
        self._name = name
        count = 0
        for number, line in enumerate(self._lines(), 1):
            if "\0" in line:
                raise SubmitError(
                    f"item {number} of the queue statement holds a NUL character, which no "
                    "job ad can hold"
                )
            count = number
        self._count = count

    def _lines(self) -> Iterator[str]:
        try:
            with open(self._path) as handle:  # universal newlines: \r\n and \r end lines
                for line in handle:
                    yield line.strip()
        except OSError as exc:
            raise SubmitError(
                f"cannot read queue items from {self._name}: {exc.strerror}"
            ) from None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        count = 0
        for line in self._lines():
            count += 1
            if count > self._count:
                break
            yield line
        if count != self._count:
            raise SubmitError(
                f"queue items file {self._name} changed while it was read "
                f"({self._count} lines, then {count})"
            )

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        # Read through to it: items are gone through in order, not looked up.
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        for number, line in enumerate(self):
            if number == index:
                return line
        raise IndexError(index)


def _glob(patterns: tuple[str, ...], mode: ForEach, cwd: str) -> tuple[str, ...]:
    want_files = mode is not ForEach.MATCHING_DIRS
    want_dirs = mode is not ForEach.MATCHING_FILES
    found: list[str] = []
    seen: set[str] = set()
    for pattern in patterns:
        if not glob.has_magic(pattern):
            matches = [pattern] if os.path.exists(os.path.join(cwd, pattern)) else []
        else:
            matches = sorted(glob.glob(pattern, root_dir=cwd))
        for match in matches:
            is_dir = os.path.isdir(os.path.join(cwd, match))
            if (is_dir and not want_dirs) or (not is_dir and not want_files):
                continue
            name = match.rstrip("/") + "/" if is_dir else match
            if name not in seen:
                seen.add(name)
                found.append(name)
    return tuple(found)


def split_item(item: str, count: int) -> list[str]:
    """Split one item into `count` loop-variable values; the last takes the rest."""
    data = item.lstrip(" \t")
    if "\x1f" in data:
        fields = [part.strip(" \t") for part in data.rstrip("\r\n").split("\x1f")]
        if len(fields) > count:
            fields = [*fields[: count - 1], "\x1f".join(fields[count - 1 :])] if count else []
        return fields + [""] * (count - len(fields))
    values: list[str] = []
    pos = 0
    start = 0
    for _ in range(count - 1):
        while pos < len(data) and data[pos] not in ", \t":
            pos += 1
        if pos >= len(data):
            break
        values.append(data[start:pos])
        pos += 1
        while pos < len(data) and data[pos] in " \t":
            pos += 1
        start = pos
    values.append(data[start:])
    return values + [""] * (count - len(values))


@dataclass(frozen=True, slots=True)
class ProcSlot:
    """What one proc of a queue statement sees: its row, step and loop variables."""

    row: int
    step: int
    values: tuple[tuple[str, str], ...]


def iterate_procs(qargs: QueueArgs, items: Sequence[str]) -> Iterator[ProcSlot]:
    """The procs a queue statement makes, in order."""
    if qargs.mode is ForEach.NOT:
        for step in range(qargs.count):
            yield ProcSlot(0, step, ())
        return
    names = qargs.loop_variables
    for row, item in enumerate(items):
        if qargs.slice is not None and not qargs.slice.selected(row, len(items)):
            continue
        values = tuple(zip(names, split_item(item, len(names)), strict=True))
        for step in range(qargs.count):
            yield ProcSlot(row, step, values)

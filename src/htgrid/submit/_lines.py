"""Reading a submit description: lines, continuations, `@=` values,
`if`/`elif`/`else`/`endif`, `include`, and where the `queue` statements are.

The result is a list of queue steps, each with a snapshot of the macro table
as it stood at that `queue` statement: values stay unexpanded until jobs are
made, so a macro defined after its use (but before `queue`) still applies.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from htgrid.submit._errors import SubmitError
from htgrid.submit._macros import Expander, MacroSet, expand_self

__all__ = ["QueueStep", "RawLine", "is_queue_statement", "logical_lines", "parse_description"]

# include files may include others, but not without end.
_MAX_INCLUDE_DEPTH = 10

_KEY = re.compile(r"\+?[A-Za-z0-9_.]+\Z")
_VERSION = re.compile(r"version\s*(>=|<=|==|!=|>|<)\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*\Z", re.I)

# The HTCondor version whose behaviour this package reproduces; `if version`
# conditions compare against it.
CONDOR_VERSION = (24, 0, 24)


@dataclass(frozen=True, slots=True)
class RawLine:
    """One logical line (continuations joined) and where it started."""

    text: str
    line: int


@dataclass(frozen=True, slots=True)
class QueueStep:
    """A `queue` statement and the macro table in force when it was reached."""

    macros: MacroSet
    args: str
    inline_items: tuple[str, ...] | None
    path: str | None
    line: int


def logical_lines(text: str) -> Iterator[RawLine]:
    """Lines with `\\` continuations joined, trimmed; comment lines included."""
    physical = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    index = 0
    while index < len(physical):
        start = index
        line = physical[index].strip()
        index += 1
        is_comment = line.startswith("#")
        while line.endswith("\\") and not is_comment:
            line = line[:-1]
            if index >= len(physical):
                break
            line += physical[index].strip()
            index += 1
        yield RawLine(line, start + 1)


def is_queue_statement(line: str) -> str | None:
    """The arguments after `queue` when `line` is a queue statement, else None."""
    if line[:5].lower() == "queue" and (len(line) == 5 or line[5].isspace()):
        return line[5:].strip()
    return None


class _Source:
    """A stream of logical lines from one file (or command), with a cursor."""

    def __init__(self, text: str, path: str | None, is_top: bool) -> None:
        self.lines = list(logical_lines(text))
        self.pos = 0
        self.path = path
        self.is_top = is_top

    def next(self) -> RawLine | None:
        if self.pos >= len(self.lines):
            return None
        line = self.lines[self.pos]
        self.pos += 1
        if "\0" in line.text:  # condor_submit would cut the line there, silently
            raise SubmitError(
                "the line holds a NUL character, which no job ad can hold",
                path=self.path,
                line=line.line,
            )
        return line


@dataclass(slots=True)
class _IfFrame:
    active: bool  # the enclosing block is being read
    taken: bool  # some branch of this if was true
    reading: bool  # the current branch is being read
    seen_else: bool
    line: int


def parse_description(
    text: str,
    *,
    path: str | None,
    cwd: str,
    defaults: Mapping[str, str],
    env: Mapping[str, str],
    run_command: Callable[[str, str], str],
) -> list[QueueStep]:
    """All queue steps of a submit description (an implicit `queue 1` if it has none)."""
    macros = MacroSet()
    expander = Expander(macros, defaults=defaults, env=env)
    steps: list[QueueStep] = []
    stack: list[_Source] = [_Source(text, path, True)]
    ifs: list[_IfFrame] = []

    def fail(reason: str, where: RawLine, source: _Source) -> SubmitError:
        return SubmitError(reason, path=source.path, line=where.line)

    while stack:
        source = stack[-1]
        raw = source.next()
        if raw is None:
            stack.pop()
            continue
        line = raw.text
        if not line or line.startswith("#"):
            continue
        reading = not ifs or (ifs[-1].active and ifs[-1].reading)
        keyword = line.split(None, 1)[0].lower() if line else ""
        rest = line[len(keyword) :].strip() if keyword else ""
        if keyword in ("if", "elif", "else", "endif"):
            try:
                _conditional(keyword, rest, ifs, reading, expander, raw.line)
            except SubmitError as exc:
                raise fail(exc.reason, raw, source) from None
            continue
        if not reading:
            continue
        qargs = is_queue_statement(line)
        if qargs is not None:
            if not source.is_top:
                raise fail("Queue statement not allowed in include file or command", raw, source)
            items = _inline_items(qargs, source, raw)
            steps.append(QueueStep(macros.copy(), qargs, items, source.path, raw.line))
            continue
        if re.match(r"include\b", line, re.I) and ":" in line:
            if len(stack) > _MAX_INCLUDE_DEPTH:
                raise fail("include files nested too deeply", raw, source)
            stack.append(_include(line, source, raw, expander, cwd, run_command))
            continue
        name, value = _assignment(line, source, raw)
        if name.startswith("+"):
            name = "MY." + name[1:]
        value = expand_self(name, value, expander)
        macros.set(name, value)
    if ifs:
        raise SubmitError("endif(s) not found before end-of-file", path=path, line=ifs[-1].line)
    if not steps:
        steps.append(QueueStep(macros.copy(), "", None, path, 0))
    return steps


def _assignment(line: str, source: _Source, raw: RawLine) -> tuple[str, str]:
    at = line.find("@=")
    eq = line.find("=")
    if at >= 0 and at < eq + 1 and line[:at].strip() and _KEY.match(line[:at].strip()):
        name = line[:at].strip()
        tag = line[at + 2 :].strip()
        if not tag:
            raise SubmitError("missing tag after @=", path=source.path, line=raw.line)
        body: list[str] = []
        while True:
            more = source.next()
            if more is None:
                raise SubmitError(
                    f"end of file reached before @{tag} for {name}", path=source.path, line=raw.line
                )
            if more.text.startswith("@" + tag) and not more.text[len(tag) + 1 :].strip():
                break
            body.append(more.text)
        return name, "\n".join(body)
    if eq <= 0:
        raise SubmitError(
            f"syntax error, expected 'name = value': {line}", path=source.path, line=raw.line
        )
    name = line[:eq].strip()
    if not _KEY.match(name):
        raise SubmitError(f"invalid submit command name '{name}'", path=source.path, line=raw.line)
    return name, line[eq + 1 :].strip()


def _inline_items(qargs: str, source: _Source, raw: RawLine) -> tuple[str, ...] | None:
    """Item lines after `queue ... (` when the list continues past this line."""
    keyword = re.search(r"(?i)(?:^|[\s,])(in|from|matching)(?=[\s(]|$)", qargs)
    if keyword is None or qargs.rstrip().endswith(")"):
        return None
    rest = qargs[keyword.end() :]
    rest = re.sub(r"(?i)^(\s*(files|dirs|any|\[[^\]]*\]))*", "", rest).lstrip()
    if not rest.startswith("("):
        return None
    items: list[str] = []
    while True:
        more = source.next()
        if more is None:
            raise SubmitError(
                "Reached end of file without finding closing brace ')' for Queue command",
                path=source.path,
                line=raw.line,
            )
        if more.text.startswith("#"):
            continue
        if more.text.startswith(")"):
            return tuple(items)
        items.append(more.text)


def _include(
    line: str,
    source: _Source,
    raw: RawLine,
    expander: Expander,
    cwd: str,
    run_command: Callable[[str, str], str],
) -> _Source:
    head, sep, target = line.partition(":")
    words = head.split()
    if not sep or words[0].lower() != "include" or len(words) > 2:
        raise SubmitError(f"malformed include statement: {line}", path=source.path, line=raw.line)
    mode = words[1].lower() if len(words) == 2 else ""
    if mode not in ("", "command", "ifexist"):
        raise SubmitError(f"unknown include option '{mode}'", path=source.path, line=raw.line)
    target = expander.expand(target.strip())
    is_command = mode == "command"
    if target.endswith("|"):
        is_command = True
        target = target[:-1].strip()
    if not target:
        raise SubmitError("include statement names no file", path=source.path, line=raw.line)
    if is_command:
        try:
            output = run_command(target, cwd)
        except SubmitError as exc:
            raise exc.at(source.path, raw.line) from None
        return _Source(output, f"{target} |", False)
    file = Path(target) if Path(target).is_absolute() else Path(cwd) / target
    try:
        text = file.read_text()
    except OSError as exc:
        if mode == "ifexist":
            return _Source("", str(file), False)
        raise SubmitError(
            f"cannot read include file {file}: {exc.strerror}", path=source.path, line=raw.line
        ) from None
    return _Source(text, str(file), False)


def _conditional(
    keyword: str, rest: str, ifs: list[_IfFrame], reading: bool, expander: Expander, line: int
) -> None:
    if keyword == "if":
        value = _test(rest, expander) if reading else False
        ifs.append(_IfFrame(reading, value, value, False, line))
        return
    if not ifs:
        raise SubmitError(f"{keyword} without matching if")
    frame = ifs[-1]
    if keyword == "endif":
        ifs.pop()
        return
    if frame.seen_else:
        raise SubmitError(f"{keyword} after else")
    if keyword == "else":
        frame.seen_else = True
        frame.reading = frame.active and not frame.taken
        frame.taken = True
        return
    if frame.active and not frame.taken:
        frame.reading = _test(rest, expander)
        frame.taken = frame.reading
    else:
        frame.reading = False


def _test(condition: str, expander: Expander) -> bool:
    """Evaluate the condition of an if/elif as condor_submit does."""
    text = expander.expand(condition).strip()
    inverted = False
    while text.startswith("!"):
        inverted = not inverted
        text = text[1:].strip()
    result = _simple_test(text, condition, expander)
    return result != inverted


def _simple_test(text: str, original: str, expander: Expander) -> bool:
    if not text:
        return False
    words = text.split()
    if words[0].lower() == "defined":
        if len(words) != 2:
            raise SubmitError(f"{original} is not a valid if condition")
        return bool(expander.lookup(words[1]))
    version = _VERSION.match(text)
    if version:
        op = version.group(1)
        want = tuple(int(g or 0) for g in version.groups()[1:])
        have = CONDOR_VERSION
        return {
            ">=": have >= want,
            "<=": have <= want,
            "==": have == want,
            "!=": have != want,
            ">": have > want,
            "<": have < want,
        }[op]
    low = text.lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    try:
        return float(text) != 0
    except ValueError:
        pass
    if re.search(r"[<>=!&|?+*/%-]", text) and len(words) >= 1 and not re.fullmatch(r"\w+", text):
        raise SubmitError(
            f"{original} is not a valid if condition because complex conditionals are not supported"
        )
    raise SubmitError(
        f"{original} is not a valid if condition because expression is not a conditional"
    )


def run_shell(command: str, cwd: str) -> str:
    """Run `command` through the shell in `cwd` and return its standard output."""
    try:
        done = subprocess.run(
            command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SubmitError(f"cannot run command '{command}': {exc}") from None
    if done.returncode != 0:
        raise SubmitError(f"command '{command}' exited with status {done.returncode}")
    return done.stdout

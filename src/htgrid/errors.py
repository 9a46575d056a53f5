"""The error tree of htgrid. Every error htgrid raises derives from `HTGridError`.

HTGridError
├── ClassAdException            (the name classad2 scripts catch)
│   ├── ClassAdSyntaxError      (also a ValueError: text that is not a ClassAd)
│   └── ClassAdValueError       (also a TypeError/ValueError: a Python value with no ClassAd form)
└── UsageError                  (a command line that cannot be carried out)
"""

from __future__ import annotations

__all__ = [
    "ClassAdException",
    "ClassAdSyntaxError",
    "ClassAdValueError",
    "HTGridError",
    "UsageError",
]


class HTGridError(Exception):
    """Something htgrid could not do."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message if message is not None else (type(self).__doc__ or "").strip())


class ClassAdException(HTGridError):
    """A ClassAd operation failed."""


class ClassAdSyntaxError(ClassAdException, ValueError):
    """The text is not valid ClassAd syntax.

    Carries where it went wrong: `line` and `column` (both 1-based), the offending
    `source` line, and a caret excerpt in the message.
    """

    def __init__(
        self,
        reason: str,
        *,
        text: str = "",
        offset: int = 0,
        origin: str = "",
    ) -> None:
        line = text.count("\n", 0, offset) + 1
        start = text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        if end < 0:
            end = len(text)
        column = offset - start + 1
        source = text[start:end]
        self.reason = reason
        self.line = line
        self.column = column
        self.offset = offset
        self.source = source
        self.origin = origin
        where = f"{origin}:" if origin else ""
        excerpt = source if len(source) <= 200 else source[max(0, column - 100) : column + 100]
        caret_col = column - 1 if len(source) <= 200 else min(column - 1, 100)
        message = (
            f"{where}line {line}, column {column}: {reason}\n    {excerpt}\n    {' ' * caret_col}^"
        )
        super().__init__(message)


class ClassAdValueError(ClassAdException, TypeError):
    """A Python value that has no ClassAd form."""


class UsageError(HTGridError):
    """The command line cannot be carried out."""

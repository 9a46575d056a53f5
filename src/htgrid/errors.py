"""The error tree of htgrid. Every error htgrid raises derives from `HTGridError`.

HTGridError
├── ClassAdException            (the name classad2 scripts catch)
│   ├── ClassAdSyntaxError      (also a ValueError: text that is not a ClassAd)
│   ├── ClassAdValueError       (also a TypeError/ValueError: a Python value with no ClassAd form)
│   ├── ClassAdEvaluationError  (also a TypeError: an evaluation that gives no value)
│   ├── ClassAdTypeError        (also a TypeError/ValueError)
│   ├── ClassAdEnumError        (also a TypeError)
│   ├── ClassAdInternalError    (also a ValueError)
│   └── ClassAdOSError          (also an OSError: a library that cannot be loaded)
└── UsageError                  (a command line that cannot be carried out)

The ClassAd errors also derive from the built-in exceptions the version-1 `classad`
module raised them as (it names ClassAdSyntaxError `ClassAdParseError`): ValueError,
SyntaxError and RuntimeError for text that does not parse, as before HTCondor 8.9.9, so
that scripts of every era catch them.
"""

from __future__ import annotations

__all__ = [
    "ClassAdEnumError",
    "ClassAdEvaluationError",
    "ClassAdException",
    "ClassAdInternalError",
    "ClassAdOSError",
    "ClassAdSyntaxError",
    "ClassAdTypeError",
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


class ClassAdSyntaxError(ClassAdException, ValueError, SyntaxError, RuntimeError):
    """The text is not valid ClassAd syntax.

    Carries where it went wrong: `line` and `column` (both 1-based), the offending
    `source` line, and a caret excerpt in the message.
    """

    offset: int  # where in the ClassAd text (SyntaxError's own may be None)

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
        # What SyntaxError prints (str() and tracebacks); its file, line and text fields
        # stay unset, since `line`, `column` and `source` say those of the ClassAd text.
        self.msg = message


class ClassAdValueError(ClassAdException, ValueError, RuntimeError, TypeError):
    """A Python value that has no ClassAd form."""


class ClassAdEvaluationError(ClassAdException, TypeError, RuntimeError):
    """An expression could not be evaluated (or to no value the caller can use)."""


class ClassAdTypeError(ClassAdException, TypeError, ValueError):
    """A value of the wrong type for a ClassAd operation."""


class ClassAdEnumError(ClassAdException, TypeError):
    """A value that must be a member of an enumeration is not."""


class ClassAdInternalError(ClassAdException, ValueError, RuntimeError):
    """The ClassAd library came to a state it should not reach."""


class ClassAdOSError(ClassAdException, OSError, RuntimeError):
    """An operating-system failure of the ClassAd library (a library not loaded)."""


class UsageError(HTGridError):
    """The command line cannot be carried out."""

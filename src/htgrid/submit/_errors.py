"""The one error type of the submit language."""

from __future__ import annotations

from htgrid.errors import HTGridError

__all__ = ["SubmitError"]


class SubmitError(HTGridError):
    """The submit description cannot be turned into jobs.

    `path` and `line` name where the offending statement is, when known
    (`path` is None for text that came from no file, `line` is 1-based or 0).
    """

    def __init__(self, reason: str, *, path: str | None = None, line: int = 0) -> None:
        self.reason = reason
        self.path = path
        self.line = line
        where = ""
        if path is not None or line:
            where = f"{path or '<submit>'}:{line}: " if line else f"{path}: "
        super().__init__(f"{where}{reason}")

    def at(self, path: str | None, line: int) -> SubmitError:
        """The same error, placed at `path`:`line` unless it already has a place."""
        if self.line or self.path is not None:
            return self
        return SubmitError(self.reason, path=path, line=line)

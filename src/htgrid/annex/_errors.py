"""The annex's errors: bad requests, missing setup, the cloud's refusals."""

from __future__ import annotations

from htgrid.errors import HTGridError

__all__ = ["AnnexCloudError", "AnnexError", "AnnexNotFound", "AnnexUsageError", "SetupMissing"]


class AnnexError(HTGridError):
    """An annex could not be made, changed or shown."""


class AnnexUsageError(AnnexError):
    """A request that cannot be: a bad name, duration, flag or combination."""


class AnnexNotFound(AnnexError):
    """No annex of that name (no lease rule in that region)."""


class SetupMissing(AnnexError):
    """`htgrid annex setup` has not been run for this account and region."""


class AnnexCloudError(AnnexError):
    """The cloud refused a call, or could not be reached: which call, and its reason."""

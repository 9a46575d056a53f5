"""htgrid: HTCondor's machinery for running jobs beyond the local pool, in Python."""

from htgrid.errors import HTGridError

__all__ = ["HTGridError", "__version__"]
__version__ = "0.1.0"

"""The client side of htgrid's HTTPS APIs, without any daemon: what reaches an API.

The command line (`htgrid q -name`, `htgrid status`), the daemons' own clients (of the
collector, of another schedd) and the condor GAHP server (a separate process, which may
import only htgrid.classad, htgrid.gahp and small helpers like this package) all talk to
the same APIs the same way, so they share this package:

- `tls_transport`: httpx's transport, closing the connection of a cancelled TLS handshake.

Names load when first asked for: a process that needs one of them does not pay for the
others' imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid._lazy import on_demand

if TYPE_CHECKING:
    from htgrid.client._transport import tls_transport

_LAZY: Final = {
    "tls_transport": "_transport",
}

__getattr__ = on_demand(__name__, _LAZY)

__all__ = ["tls_transport"]

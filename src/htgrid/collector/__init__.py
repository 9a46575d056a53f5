"""The collector (HTCondor's condor_collector): where daemons and sites advertise ads.

`AdStore` keeps ads by type with HTCondor's update semantics (expiry, sequence numbers,
invalidation) and answers constraint queries; `htgrid.collector.app.create_app` serves it
over HTTP (TLS and the pool's tokens: `htgrid.collector.daemon`) and `CollectorClient`
talks to it (`KeptAds`: a query's ads kept decoded, only what changed read again);
`locate_schedd` finds a schedd's URL by its Name in a pool's collector
(condor_q's -name and -pool; the Python bindings' `Collector.locate`). `htgrid
collector`, `htgrid status` and `htgrid advertise` are the command-line faces.
"""

from htgrid.client import pool_url
from htgrid.collector._ccb import (
    CcbContact,
    CcbRequest,
    ccb_contact,
    private_network,
    with_ccb,
)
from htgrid.collector._errors import (
    CollectorError,
    CollectorRefused,
    CollectorUnavailable,
    InvalidAd,
    InvalidQuery,
    NotRegistered,
    ProtocolError,
    UnknownCommand,
)
from htgrid.collector._kept import KeptAds
from htgrid.collector._locate import (
    ScheddLocation,
    ScheddNotFound,
    find_schedd,
    find_schedd_async,
    locate_schedd,
    locate_schedd_async,
)
from htgrid.collector._reverse import ReverseConnector, connect_back
from htgrid.collector._store import DEFAULT_LIFETIME, AdStore, UpdateResult
from htgrid.collector._types import AdType, Command, command_for, parse_command
from htgrid.collector.client import CollectorClient, default_pool

__all__ = [
    "DEFAULT_LIFETIME",
    "AdStore",
    "AdType",
    "CcbContact",
    "CcbRequest",
    "CollectorClient",
    "CollectorError",
    "CollectorRefused",
    "CollectorUnavailable",
    "Command",
    "InvalidAd",
    "InvalidQuery",
    "KeptAds",
    "NotRegistered",
    "ProtocolError",
    "ReverseConnector",
    "ScheddLocation",
    "ScheddNotFound",
    "UnknownCommand",
    "UpdateResult",
    "ccb_contact",
    "command_for",
    "connect_back",
    "default_pool",
    "find_schedd",
    "find_schedd_async",
    "locate_schedd",
    "locate_schedd_async",
    "parse_command",
    "pool_url",
    "private_network",
    "with_ccb",
]

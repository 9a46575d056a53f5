"""Where the GRAM tests find the gatekeeper of `.ci/gram-up.sh`, and how their GAHP runs:
inside its loopback-only network namespace (the job manager's and the GASS server's
listeners bind every interface there, and nothing reaches them from outside)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

NETNS = os.environ.get("HTGRID_GRAM_NETNS", "htgrid-gram")
PKI = Path(os.environ.get("HTGRID_REALGRID_DIR", "/var/tmp/htgrid-realgrid")) / "pki"
CONTACT = "localhost:2119/jobmanager-fork"
#: The gt GAHP, in the namespace (ports of its own, apart from the job manager's).
GRAM_GAHP = (
    "ip",
    "netns",
    "exec",
    NETNS,
    "env",
    "GLOBUS_HOSTNAME=localhost",
    "GLOBUS_TCP_PORT_RANGE=42000,42999",
    sys.executable,
    "-m",
    "htgrid.cli",
    "gahp",
    "gram",
)

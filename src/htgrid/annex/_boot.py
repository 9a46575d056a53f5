"""The boot script an annex's instances run (their user data).

No htgrid is baked into images: the script installs the submitter's htgrid version from
PyPI into a virtualenv, then runs `python -m htgrid.annex.node`, which fetches the
annex's token from SSM or Key Vault (the instance role or the scale set's managed
identity may read it; it is not in the user data or custom data),
joins the pool and shuts the instance down when idle or at the lease's end.

The settings it carries (the pool's address and CA certificate, the annex's name,
owners, idle time, lease end, parameter names) are no secret. Test hooks, read from the
environment the script runs in (a test harness sets them; cloud-init sets none):

    HTGRID_ANNEX_HOME          where the node's home is (default /var/lib/htgrid-annex)
    HTGRID_ANNEX_PIP_ARGS      what pip installs (default: htgrid[ec2]==<version>), e.g.
                               `--no-deps /path/htgrid-0.1.0-py3-none-any.whl`
    HTGRID_ANNEX_SKIP_INSTALL  1: install nothing, htgrid is importable by
                               $HTGRID_ANNEX_PYTHON (default python3) already
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any, Final

from htgrid import __version__

__all__ = ["boot_script", "settings_of"]

_MARK: Final = "HTGRID_ANNEX_SETTINGS"


def boot_script(settings: Mapping[str, Any], *, version: str = __version__) -> str:
    """The user data of an annex's instances."""
    doc = json.dumps(dict(settings), indent=1, sort_keys=True)
    if _MARK in doc:
        raise ValueError("the annex's settings may not hold the here-document's marker")
    pip = shlex.quote(f"htgrid[ec2]=={version}")
    name = shlex.quote(str(settings.get("annex", "")))
    return f"""#!/bin/sh
# htgrid annex {name}: installs htgrid {version}, then runs an execute node that joins
# the pool with the annex's token (read from SSM with the instance's role) and shuts
# this instance down when idle or at the lease's end.
set -eu
home="${{HTGRID_ANNEX_HOME:-/var/lib/htgrid-annex}}"
mkdir -p "$home"
chmod 0755 "$home"
cat > "$home/annex.json" <<'{_MARK}'
{doc}
{_MARK}
if [ "${{HTGRID_ANNEX_SKIP_INSTALL:-}}" = 1 ]; then
    python="${{HTGRID_ANNEX_PYTHON:-python3}}"
else
    python3 -m venv --system-site-packages "$home/venv"
    # shellcheck disable=SC2086  # the test hook is a list of arguments
    "$home/venv/bin/python" -m pip install --quiet --disable-pip-version-check \\
        ${{HTGRID_ANNEX_PIP_ARGS:-{pip}}}
    python="$home/venv/bin/python"
fi
exec "$python" -m htgrid.annex.node "$home/annex.json"
"""


def settings_of(script: str) -> dict[str, Any]:
    """The settings a boot script carries (ValueError if it is not one)."""
    start = script.find(f"<<'{_MARK}'\n")
    if start < 0:
        raise ValueError("not an htgrid annex boot script")
    body = script[start + len(_MARK) + 5 :]
    end = body.find(f"\n{_MARK}\n")
    if end < 0:
        raise ValueError("the boot script's settings are cut short")
    loaded = json.loads(body[:end])
    if not isinstance(loaded, dict):
        raise ValueError("the boot script's settings are not an object")
    return loaded

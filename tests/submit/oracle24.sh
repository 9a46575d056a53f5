#!/usr/bin/env bash
# Create the HTCondor 24.0 oracle venv used by tests/submit/test_conformance.py.
# Idempotent: does nothing when the venv already has the right wheel.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/.venv-oracle24"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import htcondor, sys; sys.exit(0 if htcondor.version().find("24.0.24") >= 0 else 1)' 2>/dev/null; then
    exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check htcondor==24.0.24
"$venv/bin/python" -c 'import htcondor; print("oracle:", htcondor.version())' 2>/dev/null

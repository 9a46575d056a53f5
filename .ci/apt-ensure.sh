#!/usr/bin/env bash
# Install the Debian packages named as arguments that are not installed yet; nothing
# is started at install time (no systemd here: each .ci/*-up.sh starts its daemons).
set -euo pipefail
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ "${#missing[@]}" -gt 0 ] || exit 0
echo "[apt-ensure] installing ${missing[*]}" >&2
[ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; }
[ -n "$(ls /var/lib/apt/lists/*_Packages* 2>/dev/null)" ] || apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=900 "${missing[@]}" >/dev/null
echo "[apt-ensure] installed" >&2

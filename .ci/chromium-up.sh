#!/usr/bin/env bash
# Debian's chromium and chromedriver, for the web view's browser tests (tests/web).
# Idempotent: a second run finds both and does nothing. Needs root.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "[chromium-up] $(/usr/bin/chromium --version 2>/dev/null | head -1) already installed"
    exit 0
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
/usr/bin/chromium --version 2>/dev/null | head -1
test -x /usr/bin/chromedriver

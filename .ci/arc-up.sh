#!/usr/bin/env bash
# Bring up a NorduGrid ARC CE 6 (Debian 12's packages) on loopback: A-REX with the fork
# LRMS and its REST interface on https://localhost:443/arex, X.509 (the test PKI of
# .ci/grid-pki.sh) and token auth, grid identities mapped to the local user gridtest.
# Idempotent: a second run finds both daemons up and answering, and leaves them alone.
#
#   bash .ci/arc-up.sh          # install, configure, start, check the REST interface
#   bash .ci/arc-up.sh stop     # stop both daemons by pid
#
# No systemd: the distribution's start scripts (which exec arched, which daemonizes)
# are run by hand. Needs root.
set -euo pipefail

R=${HTGRID_REALGRID_DIR:-/var/tmp/htgrid-realgrid}
D=$R/arc
PKI=$R/pki
HERE=$(cd "$(dirname "$0")" && pwd)
AREX_PID=/run/arched-arex.pid
WS_PID=/run/arched-arex-ws.pid
START=$SECONDS

log() { printf '[arc-up %3ss] %s\n' "$((SECONDS - START))" "$*"; }
die() { log "ERROR: $*"; exit 1; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop_pid() {
    local pidfile=$1 pid
    alive "$pidfile" || { rm -f "$pidfile"; return 0; }
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}
wait_for() {
    local deadline=$1 what=$2; shift 2
    local end=$((SECONDS + deadline))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || die "timed out after ${deadline}s waiting for $what"
        sleep 0.2
    done
}

if [ "${1:-}" = stop ]; then
    stop_pid "$WS_PID"
    stop_pid "$AREX_PID"
    log "stopped"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || die "must run as root"

# A short proxy of the test user, made with ARC's own client: the check below uses it.
check_proxy() {
    X509_CERT_DIR=/etc/grid-security/certificates arcproxy -C "$PKI/user.pem" -K "$PKI/user.key" \
        -P "$D/check-proxy.pem" -c validityPeriod=3600 >/dev/null
}
rest_answers() {
    curl -sSf --max-time 10 --capath /etc/grid-security/certificates \
        --cert "$D/check-proxy.pem" --key "$D/check-proxy.pem" -H 'Accept: application/json' \
        https://localhost:443/arex/rest/1.0/info -o /dev/null
}

if alive "$AREX_PID" && alive "$WS_PID" && [ -s "$D/check-proxy.pem" ] && rest_answers; then
    log "already up (A-REX $(cat "$AREX_PID"), REST $(cat "$WS_PID"))"
    exit 0
fi

# --- install --------------------------------------------------------------------------
pkgs=(nordugrid-arc-arex nordugrid-arc-client nordugrid-arc-plugins-arcrest
    nordugrid-arc-plugins-internal nordugrid-arc-arcctl nordugrid-arc-plugins-needed curl)
bash "$HERE/apt-ensure.sh" "${pkgs[@]}"

bash "$HERE/grid-pki.sh"

# --- configure ------------------------------------------------------------------------
stop_pid "$WS_PID"
stop_pid "$AREX_PID"
mkdir -p "$D" /var/spool/arc/jobstatus /var/spool/arc/sessiondir /var/log/arc
USER_DN=$(openssl x509 -in "$PKI/user.pem" -noout -subject -nameopt compat | sed 's/^subject=//')
cat >/etc/arc.conf <<EOF
# Written by htgrid's .ci/arc-up.sh: a fork-LRMS CE on loopback for the grid-type tests.
[common]
hostname = localhost
x509_host_key = /etc/grid-security/hostkey.pem
x509_host_cert = /etc/grid-security/hostcert.pem
x509_cert_dir = /etc/grid-security/certificates

[authgroup:testusers]
subject = $USER_DN

[authgroup:tokenusers]
authtokens = * https://localhost:${HTGRID_OIDC_PORT:-8443} * * *

[mapping]
map_to_user = testusers gridtest:gridtest
map_to_user = tokenusers gridtest:gridtest

[authtokens]

[lrms]
lrms = fork

[arex]
loglevel = 3
controldir = /var/spool/arc/jobstatus
sessiondir = /var/spool/arc/sessiondir

[arex/ws]
wsurl = https://localhost:443/arex

[arex/ws/jobs]
allowaccess = testusers
allowaccess = tokenusers

[infosys]

[infosys/glue2]

[infosys/cluster]

[queue:fork]
EOF
# Without DH parameters the REST daemon's start script runs `openssl dhparam 4096` (minutes
# of CPU): give it RFC 7919's ffdhe2048 group, which costs nothing to write.
[ -s /var/spool/arc/jobstatus/dhparam.pem ] ||
    openssl genpkey -genparam -algorithm DH -pkeyopt dh_param:ffdhe2048 -out /var/spool/arc/jobstatus/dhparam.pem
# The REST daemon's start script has no bind address: a copy that listens on loopback only.
sed 's|<tcp:Listen><tcp:Port>|<tcp:Listen><tcp:Interface>127.0.0.1</tcp:Interface><tcp:Port>|' \
    /usr/share/arc/arc-arex-ws-start >"$D/arc-arex-ws-start-lo"
grep -q '<tcp:Interface>127.0.0.1' "$D/arc-arex-ws-start-lo" || die "cannot bind the REST daemon to loopback"
chmod 755 "$D/arc-arex-ws-start-lo"

# --- start ----------------------------------------------------------------------------
# REST first: A-REX runs the information provider at start, which marks the endpoints
# critical if nothing listens on 443 yet (and ARC's clients then refuse the CE).
"$D/arc-arex-ws-start-lo" >"$D/ws-start.log" 2>&1 || die "A-REX WS did not start: $(tail -3 "$D/ws-start.log")"
wait_for 60 "the REST interface on 127.0.0.1:443" bash -c 'echo >/dev/tcp/127.0.0.1/443'
/usr/share/arc/arc-arex-start >"$D/arex-start.log" 2>&1 || die "A-REX did not start: $(tail -3 "$D/arex-start.log")"
wait_for 30 "A-REX's pid file" alive "$AREX_PID"
check_proxy
wait_for 60 "the REST interface's answer" rest_answers
log "up: A-REX $(cat "$AREX_PID"), REST $(cat "$WS_PID") on https://localhost:443/arex"

#!/usr/bin/env bash
# Bring up a MyProxy server 6 (Debian 12's packages) on 127.0.0.1:7512, running as user
# myproxy with the test PKI's host credential (.ci/grid-pki.sh), any client with a
# certificate of the test CA allowed to store, retrieve and renew. Idempotent: a server
# that answers is left alone.
#
#   bash .ci/myproxy-up.sh          # install, configure, start, store and retrieve once
#   bash .ci/myproxy-up.sh stop     # stop the server by pid
#
# The round trip is made as the local user gridtest (as root the clients would present
# the host credential, and the stored credential would be the host's).
set -euo pipefail

R=${HTGRID_REALGRID_DIR:-/var/tmp/htgrid-realgrid}
D=$R/myproxy
PKI=$R/pki
PORT=${HTGRID_MYPROXY_PORT:-7512}
PID=/var/lib/myproxy/myproxy-server.pid
HERE=$(cd "$(dirname "$0")" && pwd)
START=$SECONDS

log() { printf '[myproxy-up %3ss] %s\n' "$((SECONDS - START))" "$*"; }
die() { log "ERROR: $*"; exit 1; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop_pid() {
    local pid
    alive "$PID" || { rm -f "$PID"; return 0; }
    pid=$(cat "$PID")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PID"
}
listening() { bash -c "echo >/dev/tcp/127.0.0.1/$PORT" 2>/dev/null; }

if [ "${1:-}" = stop ]; then
    stop_pid
    log "stopped"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || die "must run as root"

if alive "$PID" && listening; then
    log "already up (pid $(cat "$PID"), 127.0.0.1:$PORT)"
    exit 0
fi

pkgs=(myproxy-server myproxy myproxy-admin)
bash "$HERE/apt-ensure.sh" "${pkgs[@]}"

bash "$HERE/grid-pki.sh"

stop_pid
mkdir -p "$D"
install -d -o myproxy -g myproxy -m 700 /var/lib/myproxy /etc/grid-security/myproxy
install -o myproxy -g myproxy -m 644 /etc/grid-security/hostcert.pem /etc/grid-security/myproxy/hostcert.pem
install -o myproxy -g myproxy -m 400 /etc/grid-security/hostkey.pem /etc/grid-security/myproxy/hostkey.pem
cat >"$D/myproxy-server.config" <<'EOF'
# Written by htgrid's .ci/myproxy-up.sh: any client with a certificate of the test CA
# may store, retrieve (with the passphrase) and renew credentials.
accepted_credentials  "*"
authorized_retrievers "*"
default_retrievers    "*"
authorized_renewers   "*"
default_renewers      "none"
authorized_key_retrievers "*"
default_key_retrievers    "none"
EOF
chmod 644 "$D/myproxy-server.config"

X509_USER_CERT=/etc/grid-security/myproxy/hostcert.pem \
X509_USER_KEY=/etc/grid-security/myproxy/hostkey.pem \
X509_CERT_DIR=/etc/grid-security/certificates \
    start-stop-daemon --start -c myproxy --exec /usr/sbin/myproxy-server -- \
    -l 127.0.0.1 -p "$PORT" -s /var/lib/myproxy -c "$D/myproxy-server.config" -P "$PID"
for _ in $(seq 1 100); do listening && break; sleep 0.1; done
listening || die "myproxy-server does not listen on 127.0.0.1:$PORT"

# One round trip as gridtest: store a credential, retrieve a proxy with the passphrase.
install -d -o gridtest -g gridtest -m 700 ~gridtest/.globus
install -o gridtest -g gridtest -m 644 "$PKI/user.pem" ~gridtest/.globus/usercert.pem
install -o gridtest -g gridtest -m 400 "$PKI/user.key" ~gridtest/.globus/userkey.pem
runuser -u gridtest -- env X509_CERT_DIR=/etc/grid-security/certificates bash -c "
    set -e
    echo htgrid-check-pass | myproxy-init -s localhost -p $PORT -l htgrid-check -S -c 1 -t 1 >/dev/null
    echo htgrid-check-pass | myproxy-logon -s localhost -p $PORT -l htgrid-check -S -t 1 -o /tmp/htgrid-myproxy-check.pem >/dev/null
    myproxy-destroy -s localhost -p $PORT -l htgrid-check >/dev/null
    rm -f /tmp/htgrid-myproxy-check.pem
" || die "the MyProxy round trip failed"
log "up: myproxy-server $(cat "$PID") on 127.0.0.1:$PORT"

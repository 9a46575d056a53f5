#!/usr/bin/env bash
# Bring up a Globus GRAM5 gatekeeper (the Grid Community Toolkit's Debian 12 packages) with
# the fork job manager, inside a network namespace of its own that has only loopback
# (`htgrid-gram`): GRAM's job managers and callback listeners bind every interface, so
# nothing of it may live in the host's namespace. Clients run in the same namespace:
#
#   ip netns exec htgrid-gram globusrun -a -r localhost:2119/jobmanager-fork
#
# The gatekeeper runs in -inetd mode behind a small loopback listener (it has no bind
# address of its own); the test user's DN maps to the local user gridtest. Idempotent: a
# gatekeeper that authenticates a client is left alone.
#
#   bash .ci/gram-up.sh          # install, configure, start, one authentication
#   bash .ci/gram-up.sh stop     # stop the listener and its job managers by pid
set -euo pipefail

R=${HTGRID_REALGRID_DIR:-/var/tmp/htgrid-realgrid}
D=$R/gram
PKI=$R/pki
NS=${HTGRID_GRAM_NETNS:-htgrid-gram}
PORT=2119
PID=$D/listener.pid
HERE=$(cd "$(dirname "$0")" && pwd)
START=$SECONDS

log() { printf '[gram-up %3ss] %s\n' "$((SECONDS - START))" "$*"; }
die() { log "ERROR: $*"; exit 1; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
in_ns() { ip netns exec "$NS" "$@"; }

stop_all() {
    if alive "$PID"; then
        kill -TERM "$(cat "$PID")" 2>/dev/null || true
    fi
    rm -f "$PID"
    # The job managers the gatekeeper started outlive the listener: every process of the
    # namespace is one of ours.
    if ip netns list | grep -qw "$NS"; then
        for pid in $(ip netns pids "$NS"); do kill -TERM "$pid" 2>/dev/null || true; done
    fi
}

if [ "${1:-}" = stop ]; then
    stop_all
    log "stopped"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || die "must run as root"

check_proxy() {
    X509_CERT_DIR=/etc/grid-security/certificates grid-proxy-init -q -cert "$PKI/user.pem" \
        -key "$PKI/user.key" -out "$D/check-proxy.pem" -hours 1 >/dev/null
}
authenticates() {
    # As root GSI would present the host credential: point it at the proxy.
    in_ns env X509_CERT_DIR=/etc/grid-security/certificates X509_USER_PROXY="$D/check-proxy.pem" \
        X509_USER_CERT="$D/check-proxy.pem" X509_USER_KEY="$D/check-proxy.pem" \
        globusrun -a -r "localhost:$PORT/jobmanager-fork" >/dev/null 2>&1
}

if ip netns list | grep -qw "$NS" && alive "$PID" && [ -s "$D/check-proxy.pem" ] && authenticates; then
    log "already up (listener $(cat "$PID") in netns $NS)"
    exit 0
fi

pkgs=(globus-gatekeeper globus-gram-job-manager globus-gram-job-manager-fork
    globus-gram-job-manager-fork-setup-poll globus-gram-client-tools globus-proxy-utils
    libglobus-gram-client3 globus-gass-server-ez-progs)
bash "$HERE/apt-ensure.sh" "${pkgs[@]}"

bash "$HERE/grid-pki.sh"

stop_all
mkdir -p "$D"
globus-gatekeeper-admin -e jobmanager-fork-poll -n jobmanager-fork >/dev/null
globus-gatekeeper-admin -e jobmanager-fork-poll -n jobmanager >/dev/null
USER_DN=$(openssl x509 -in "$PKI/user.pem" -noout -subject -nameopt compat | sed 's/^subject=//')
printf '"%s" gridtest\n' "$USER_DN" >/etc/grid-security/grid-mapfile

ip netns list | grep -qw "$NS" || ip netns add "$NS"
in_ns ip link set lo up

# The loopback listener: each connection on fd 0/1 of a new gatekeeper (-inetd).
cat >"$D/listener.py" <<'EOF'
"""Accept on 127.0.0.1:PORT; run `argv` per connection with the socket as its stdin and
stdout (what inetd does for globus-gatekeeper -inetd). Usage: listener.py PIDFILE PORT argv..."""
import os, signal, socket, sys
pidfile, port, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen(64)
with open(pidfile, "w") as out:
    out.write(f"{os.getpid()}\n")
while True:
    conn, _ = server.accept()
    if os.fork() == 0:
        server.close()
        os.dup2(conn.fileno(), 0)
        os.dup2(conn.fileno(), 1)
        conn.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.execv(argv[0], argv)
    conn.close()
EOF
ip netns exec "$NS" env GLOBUS_TCP_PORT_RANGE=40000,40999 GLOBUS_HOSTNAME=localhost \
    setsid python3 "$D/listener.py" "$PID" "$PORT" /usr/sbin/globus-gatekeeper -inetd \
    -l "$D/gatekeeper.log" -grid_services /etc/grid-services \
    -gridmap /etc/grid-security/grid-mapfile -x509_cert_dir /etc/grid-security/certificates \
    -x509_user_cert /etc/grid-security/hostcert.pem -x509_user_key /etc/grid-security/hostkey.pem \
    </dev/null >"$D/listener.log" 2>&1 &
for _ in $(seq 1 100); do alive "$PID" && break; sleep 0.1; done
alive "$PID" || die "the gatekeeper's listener did not start (see $D/listener.log)"
check_proxy
authenticates || die "the gatekeeper does not authenticate the test user (see $D/gatekeeper.log)"
log "up: gatekeeper on 127.0.0.1:$PORT in netns $NS (listener $(cat "$PID"))"

#!/usr/bin/env bash
# Bring up an OpenSSH server (Debian 12's openssh-server) of its own on a loopback
# address, for the grid universe's remote batch systems (`batch slurm user@host`, as
# HTCondor's BOSCO reaches a cluster's login node). Idempotent: a server that lets the
# test user in is left alone.
#
#   bash .ci/sshd-up.sh          # install, configure, start, log in once
#   bash .ci/sshd-up.sh stop     # stop the server by pid
#
# What it makes, under $HTGRID_SSHD_DIR (default /var/tmp/htgrid-sshd):
#   etc/sshd_config, etc/ssh_host_ed25519_key   the server's own configuration and host key
#   client/id_ed25519 (0600), client/id_ed25519.pub   root's key pair for the test user
#   client/known_hosts            the server's host key, so clients check it (no TOFU)
#   log/sshd.log, run/sshd.pid
# The test user ($HTGRID_SSHD_USER, default boscotest) may log in with that key only:
# no passwords, no root logins, nobody else. Nothing secret is printed.
set -euo pipefail

D=${HTGRID_SSHD_DIR:-/var/tmp/htgrid-sshd}
ADDR=${HTGRID_SSHD_ADDR:-127.0.0.22}
PORT=${HTGRID_SSHD_PORT:-2222}
TUSER=${HTGRID_SSHD_USER:-boscotest}
PID=$D/run/sshd.pid
KEY=$D/client/id_ed25519
HERE=$(cd "$(dirname "$0")" && pwd)
START=$SECONDS

log() { printf '[sshd-up %3ss] %s\n' "$((SECONDS - START))" "$*"; }
die() { log "ERROR: $*"; exit 1; }
alive() { [ -s "$PID" ] && kill -0 "$(cat "$PID")" 2>/dev/null; }
stop_pid() {
    local pid
    alive || { rm -f "$PID"; return 0; }
    pid=$(cat "$PID")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PID"
}
# One login as the test user, the host key checked against the known_hosts written here.
login() {
    ssh -F none -T -i "$KEY" -o IdentitiesOnly=yes -o BatchMode=yes \
        -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$D/client/known_hosts" \
        -o ConnectTimeout=10 -p "$PORT" "$TUSER@$ADDR" "$@"
}

if [ "${1:-}" = stop ]; then
    stop_pid
    log "stopped"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || die "must run as root"

if alive && [ -s "$KEY" ] && [ "$(login echo in 2>/dev/null)" = in ]; then
    log "already up (pid $(cat "$PID"), $TUSER@$ADDR:$PORT)"
    exit 0
fi

bash "$HERE/apt-ensure.sh" openssh-server openssh-client

# --- the test user: key login only ----------------------------------------------------
if ! id "$TUSER" >/dev/null 2>&1; then
    useradd -m -s /bin/bash "$TUSER"
fi
# A "!" password is a locked account, which sshd refuses without PAM; "*" is no password.
usermod -p '*' "$TUSER"
home=$(getent passwd "$TUSER" | cut -d: -f6)
chmod 755 "$home"

# --- keys -----------------------------------------------------------------------------
umask 077
mkdir -p "$D"/{etc,client,log,run}
chmod 755 "$D" "$D/client"
[ -s "$D/etc/ssh_host_ed25519_key" ] ||
    ssh-keygen -q -t ed25519 -N '' -C "htgrid-sshd host" -f "$D/etc/ssh_host_ed25519_key"
[ -s "$KEY" ] || ssh-keygen -q -t ed25519 -N '' -C "htgrid-sshd client" -f "$KEY"
chmod 600 "$KEY" "$D/etc/ssh_host_ed25519_key"
chmod 644 "$KEY.pub"
install -d -o "$TUSER" -g "$(id -gn "$TUSER")" -m 700 "$home/.ssh"
install -o "$TUSER" -g "$(id -gn "$TUSER")" -m 600 "$KEY.pub" "$home/.ssh/authorized_keys"
# ssh names a host on another port than 22 as [addr]:port in known_hosts.
printf '[%s]:%s %s\n' "$ADDR" "$PORT" "$(cut -d' ' -f1,2 "$D/etc/ssh_host_ed25519_key.pub")" \
    >"$D/client/known_hosts"
chmod 644 "$D/client/known_hosts"
umask 022

# --- the server -----------------------------------------------------------------------
cat >"$D/etc/sshd_config" <<EOF
# Written by htgrid's .ci/sshd-up.sh: $TUSER may log in with root's test key, nobody else.
ListenAddress $ADDR
Port $PORT
HostKey $D/etc/ssh_host_ed25519_key
PidFile $PID
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers $TUSER
UsePAM no
StrictModes yes
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
LogLevel INFO
Subsystem sftp internal-sftp
EOF
stop_pid
# sshd's privilege separation directory (systemd's tmpfiles would make it).
install -d -m 755 /run/sshd
/usr/sbin/sshd -t -f "$D/etc/sshd_config" || die "sshd -t rejects $D/etc/sshd_config"
/usr/sbin/sshd -f "$D/etc/sshd_config" -E "$D/log/sshd.log"
for _ in $(seq 1 100); do alive && break; sleep 0.1; done
alive || die "sshd did not start (see $D/log/sshd.log)"

ok=
for _ in $(seq 1 50); do
    if [ "$(login echo in 2>/dev/null)" = in ]; then ok=1; break; fi
    sleep 0.2
done
[ -n "$ok" ] || die "cannot log in as $TUSER@$ADDR:$PORT (see $D/log/sshd.log)"
log "sshd up: $TUSER@$ADDR:$PORT, key $KEY, known hosts $D/client/known_hosts"

#!/usr/bin/env bash
# Bring up a single-node (Son of) Grid Engine 8.1.9 from Debian 12's packages on
# loopback. Idempotent: a second run finds the daemons up and leaves them alone.
#
#   bash .ci/sge-up.sh         # install, configure, start, run one test job
#   bash .ci/sge-up.sh stop    # stop the daemons by pid
#
# Grid Engine lives at fixed places (/var/lib/gridengine, /var/spool/gridengine);
# clients need SGE_ROOT=/var/lib/gridengine and SGE_CELL=default (Debian's wrappers in
# /usr/bin set them). Needs root; no systemd: daemons are started by hand.
set -euo pipefail

export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
COMMON=$SGE_ROOT/$SGE_CELL/common
QMASTER_PID=/var/spool/gridengine/qmaster/qmaster.pid
EXECD_PID=/var/spool/gridengine/execd/localhost/execd.pid
T=${HTGRID_SGE_DIR:-/var/tmp/htgrid-sge}
START=$SECONDS

log() { printf '[sge-up %3ss] %s\n' "$((SECONDS - START))" "$*"; }
die() { log "ERROR: $*"; exit 1; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pid() {
    local pidfile=$1 pid
    alive "$pidfile" || return 0
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}

wait_for() {
    local deadline=$1 what=$2; shift 2
    local end=$((SECONDS + deadline))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || die "timed out after ${deadline}s waiting for $what"
        sleep 0.2
    done
}

# qconf -m* opens $EDITOR on a temporary file; this "editor" applies sed expressions.
edit_with() {
    local script=$1; shift
    local ed
    ed=$(mktemp)
    printf '#!/bin/sh\nsed -i %s "$1"\n' "$script" >"$ed"
    chmod +x "$ed"
    # qconf exits non-zero when the edit changed nothing: not an error on a re-run.
    EDITOR=$ed "$@" >/dev/null 2>&1 || true
    rm -f "$ed"
}

if [ "${1:-}" = stop ]; then
    stop_pid "$EXECD_PID"
    stop_pid "$QMASTER_PID"
    log "stopped"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root"

queue_usable() {
    # all.q@localhost exists and carries no alarm/error/disabled state letters.
    qstat -f -q all.q 2>/dev/null | awk '$1 == "all.q@localhost" { found = 1; if (NF >= 6 && $6 ~ /[aAuEdsScC]/) bad = 1 }
        END { exit !(found && !bad) }'
}

if alive "$QMASTER_PID" && alive "$EXECD_PID" && queue_usable; then
    log "already up"
    exit 0
fi

# --- install --------------------------------------------------------------------------
pkgs=(gridengine-master gridengine-exec gridengine-client)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    # Answer the packages' questions up front; the postinst then runs init_cluster.
    for p in common master exec client; do
        printf 'gridengine-%s shared/gridengineconfig boolean true\n' "$p"
        printf 'gridengine-%s shared/gridenginecell string default\n' "$p"
        printf 'gridengine-%s shared/gridenginemaster string %s\n' "$p" "$(hostname)"
    done | debconf-set-selections
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    log "installed"
fi
[ -f "$COMMON/settings.sh" ] || die "$COMMON/settings.sh missing: init_cluster did not run"

# --- qmaster --------------------------------------------------------------------------
stop_pid "$EXECD_PID"
stop_pid "$QMASTER_PID"
# Clients connect from 127.0.0.1, which resolves to "localhost", not $(hostname): make
# the two names one host, and the master "localhost".
echo "localhost $(hostname)" >"$COMMON/host_aliases"
echo localhost >"$COMMON/act_qmaster"
chown sgeadmin:sgeadmin "$COMMON/host_aliases" "$COMMON/act_qmaster"
/usr/sbin/sge_qmaster </dev/null >/dev/null 2>&1
wait_for 30 sge_qmaster qconf -sss
log "sge_qmaster up"

# --- hosts, queue, limits (each step checks first, so re-runs are harmless) ------------
qconf -sh 2>/dev/null | grep -qx localhost || qconf -ah localhost >/dev/null 2>&1
qconf -ss 2>/dev/null | grep -qx localhost || qconf -as localhost >/dev/null 2>&1
if ! qconf -sel 2>/dev/null | grep -qx localhost; then
    eh=$(mktemp)
    printf 'hostname localhost\nload_scaling NONE\ncomplex_values NONE\nuser_lists NONE\nxuser_lists NONE\nprojects NONE\nxprojects NONE\nusage_scaling NONE\nreport_variables NONE\n' >"$eh"
    qconf -Ae "$eh" >/dev/null 2>&1
    rm -f "$eh"
fi
# root submits in CI: allow uid/gid 0 (default minimum 1000); qacct records within
# a second instead of 15 s (flush_time); job shells are not login shells (a login
# shell runs the user's profile: here, pyenv's rehash, which can wait 60 s for a lock).
edit_with "-e 's/^min_uid .*/min_uid 0/' -e 's/^min_gid .*/min_gid 0/' \
  -e 's/^login_shells .*/login_shells NONE/' \
  -e 's/flush_time=[0-9:]*/flush_time=00:00:01/' \
  -e 's/accounting_flush_time=[0-9:]*/accounting_flush_time=00:00:01/'" qconf -mconf global
# Schedule every second (default 15 s), and at once on submit/finish. No load
# adjustments: on a busy CI machine they (and the queue's load threshold, below) put the
# queue in alarm state and stop all dispatching.
edit_with "-e 's/^schedule_interval .*/schedule_interval 0:0:1/' \
  -e 's/^flush_submit_sec .*/flush_submit_sec 1/' -e 's/^flush_finish_sec .*/flush_finish_sec 1/' \
  -e 's/^job_load_adjustments .*/job_load_adjustments NONE/' \
  -e 's/^load_adjustment_decay_time .*/load_adjustment_decay_time 0:0:0/'" \
    qconf -msconf
slots=$(nproc)
if ! qconf -sql 2>/dev/null | grep -qx all.q; then
    edit_with "-e 's/^pe_list .*/pe_list NONE/' -e 's/^hostlist .*/hostlist localhost/' \
      -e 's/^slots .*/slots $slots/' -e 's/^shell .*/shell \/bin\/bash/'" qconf -aq all.q
fi
qconf -rattr queue load_thresholds NONE all.q >/dev/null 2>&1 || true
log "configured"

# --- execd ----------------------------------------------------------------------------
/usr/sbin/sge_execd </dev/null >/dev/null 2>&1
# A job that failed before these settings may have left the queue in error state.
wait_for 30 "the exec host" sh -c 'qhost -h localhost | grep -q "^localhost .*[0-9]"'
qmod -c all.q >/dev/null 2>&1 || true
wait_for 60 "a usable all.q" queue_usable
log "sge_execd up"

# --- one real job, start to finish --------------------------------------------------------
mkdir -p "$T"
out=$T/up.out
rm -f "$out"
jid=$(qsub -terse -N htgrid-up -o "$out" -j y -b y -shell n /bin/echo up-ok)
wait_for 60 "test job $jid" grep -qx up-ok "$out"
log "test job $jid ran"
qacct_ok() { qacct -j "$jid" | grep -Eq '^exit_status +0'; }
wait_for 30 "qacct record of $jid" qacct_ok
log "qacct sees job $jid"
# Jobs left in error state (Eqw) by an earlier run hold nothing but clutter qstat.
qstat -u '*' 2>/dev/null | awk 'NR > 2 && $5 ~ /E/ {print $1}' | xargs -r qdel >/dev/null 2>&1 || true
log "Grid Engine ready in $((SECONDS - START))s"

#!/usr/bin/env bash
# Bring up a single-node Slurm (Debian 12 packages) on loopback, with accounting
# (slurmdbd + MariaDB) so that `sacct` works. Idempotent: a second run finds the
# daemons up, checks them and leaves them alone.
#
#   bash .ci/slurm-up.sh          # install, configure, start, run one test job
#   HTGRID_SLURM_ACCOUNTING=0 bash .ci/slurm-up.sh   # no slurmdbd/MariaDB (sacct-less)
#   bash .ci/slurm-up.sh stop     # stop the daemons by pid
#
# The configuration goes to /etc/slurm (the default location), so the clients need no
# SLURM_CONF; state, spool, logs and pid files live under $HTGRID_SLURM_DIR.
# Needs root. No systemd: the daemons are started by hand and stopped by pid.
set -euo pipefail

D=${HTGRID_SLURM_DIR:-/var/tmp/htgrid-slurm}
ACCOUNTING=${HTGRID_SLURM_ACCOUNTING:-1}
CONF_DIR=/etc/slurm
START=$SECONDS

log() { printf '[slurm-up %3ss] %s\n' "$((SECONDS - START))" "$*"; }
die() { log "ERROR: $*"; exit 1; }

# A daemon is up when its pid file names a live process.
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pid() {
    local pidfile=$1 pid
    alive "$pidfile" || return 0
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}

# Poll a command until it succeeds or the deadline (seconds) passes.
wait_for() {
    local deadline=$1 what=$2; shift 2
    local end=$((SECONDS + deadline))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || die "timed out after ${deadline}s waiting for $what"
        sleep 0.2
    done
}

stop_all() {
    stop_pid "$D/run/slurmd.pid"
    stop_pid "$D/run/slurmctld.pid"
    stop_pid "$D/run/slurmdbd.pid"
    stop_pid "$D/mysql/mysqld.pid"
    stop_pid /run/munge/munged.pid
}

if [ "${1:-}" = stop ]; then
    stop_all
    log "stopped"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root"

node_idle() { sinfo -h -o %T 2>/dev/null | grep -Eqx 'idle|mixed|allocated'; }

if alive "$D/run/slurmctld.pid" && alive "$D/run/slurmd.pid" && node_idle; then
    if [ "$ACCOUNTING" != 1 ] || alive "$D/run/slurmdbd.pid"; then
        log "already up ($(sinfo -h -o '%P %T' | head -1))"
        exit 0
    fi
fi

# --- install --------------------------------------------------------------------------
pkgs=(slurmctld slurmd slurm-client munge)
[ "$ACCOUNTING" = 1 ] && pkgs+=(slurmdbd mariadb-server)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    # The lists may be missing or stale on a fresh machine.
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    log "installed"
fi

# --- configure ------------------------------------------------------------------------
# Start from a clean set of daemons: a half-started cluster is restarted whole.
stop_all
mkdir -p "$D"/{state,spool,log,run} "$CONF_DIR"

if [ "$ACCOUNTING" = 1 ]; then
    acct_lines="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux"
else
    acct_lines="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi

cat >"$CONF_DIR/slurm.conf" <<EOF
# Written by htgrid's .ci/slurm-up.sh: one node on loopback.
ClusterName=ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
$acct_lines
JobCompType=jobcomp/none
# Finished jobs leave squeue after ~MinJobAge (plus slurmctld's 60 s purge cycle), so
# tests reach the history path (sacct, exit-code file) within a minute or two.
MinJobAge=10
# The CE bench (bench/ce_route.py) sends 10,000 jobs after a loop of 10,000 sbatch whose
# cancelled jobs still count until purged: room for both and the tests beside them.
MaxJobCount=50000
# A cancelled or timed-out job gets SIGTERM, then SIGKILL this many seconds later.
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$(free -m | awk '/^Mem:/{print $2}') State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

# --- munge ----------------------------------------------------------------------------
[ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing (munge's postinst makes it)"
install -d -o munge -g munge -m 0755 /run/munge
runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1
wait_for 10 munged sh -c 'munge -n | unmunge'
log "munged up"

# --- accounting: MariaDB + slurmdbd -----------------------------------------------------
if [ "$ACCOUNTING" = 1 ]; then
    M=$D/mysql
    mkdir -p "$M"
    if [ ! -d "$M/data/mysql" ]; then
        mariadb-install-db --no-defaults --user=root --datadir="$M/data" \
            --auth-root-authentication-method=socket >"$D/log/mariadb-install.log" 2>&1
    fi
    setsid mariadbd --no-defaults --user=root --datadir="$M/data" --socket="$M/mysqld.sock" \
        --pid-file="$M/mysqld.pid" --bind-address=127.0.0.1 --port=3306 \
        --log-error="$D/log/mariadb.log" </dev/null >/dev/null 2>&1 &
    wait_for 30 mariadbd mariadb --no-defaults --socket="$M/mysqld.sock" -u root -e 'SELECT 1'
    mariadb --no-defaults --socket="$M/mysqld.sock" -u root -e "
        CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
    log "mariadbd up"

    # slurmdbd has no -f: it reads slurmdbd.conf beside slurm.conf, which must be 0600.
    umask 077
    cat >"$CONF_DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
PidFile=$D/run/slurmdbd.pid
LogFile=$D/log/slurmdbd.log
EOF
    umask 022
    chmod 600 "$CONF_DIR/slurmdbd.conf"
    slurmdbd </dev/null >/dev/null 2>&1
    wait_for 30 slurmdbd sacctmgr -n list cluster
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx ci; then
        sacctmgr -i add cluster ci >/dev/null
    fi
    log "slurmdbd up"
else
    rm -f "$CONF_DIR/slurmdbd.conf"
fi

# --- slurmctld + slurmd ---------------------------------------------------------------
slurmctld </dev/null >/dev/null 2>&1
slurmd </dev/null >/dev/null 2>&1
wait_for 60 "an idle node" node_idle
log "slurmctld and slurmd up: $(sinfo -h -o '%P %T %c' | head -1)"

# --- one real job, start to finish --------------------------------------------------------
T=$D/test
mkdir -p "$T"
jid=$(sbatch --parsable -J htgrid-up -D "$T" -o "$T/up-%j.out" --wrap 'echo up-ok')
jid=${jid%%;*}
job_done() { scontrol show job "$jid" 2>/dev/null | grep -q 'JobState=COMPLETED'; }
wait_for 60 "test job $jid" job_done
grep -qx up-ok "$T/up-$jid.out" || die "test job $jid wrote no output"
log "test job $jid completed"
if [ "$ACCOUNTING" = 1 ]; then
    # The accounting record arrives shortly after the job ends.
    acct_ok() { sacct -X -n -P -j "$jid" -o State | grep -q COMPLETED; }
    wait_for 30 "sacct record of $jid" acct_ok
    log "sacct sees job $jid"
fi
log "Slurm ready in $((SECONDS - START))s"

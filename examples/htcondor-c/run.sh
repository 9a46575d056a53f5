#!/bin/sh
# HTCondor-C between two pools on this host: pool B, "the site", runs a queue and a
# collector; pool A, "the laptop", runs a queue and the grid manager. A trusts B's CA
# and holds a token B issued for A's user; a grid job submitted on A runs on B and its
# output comes back to A. Both pools live in a scratch directory and stop on exit.
#
#   sh examples/htcondor-c/run.sh
set -eu
cd "$(dirname "$0")"
# This demo names its pools itself: settings of the caller's own pool would get in the way.
unset HTGRID_COLLECTOR_HOST HTGRID_TOKEN HTGRID_TRUST_DOMAIN
scratch="$(mktemp -d "${TMPDIR:-/tmp}/htgrid-c.XXXXXX")"
A="$scratch/laptop"
B="$scratch/site"
user="$(id -un)"
site_schedd="schedd@site.example"

stop_pools() {
    status=$?
    HTGRID_HOME="$A" htgrid down || true
    HTGRID_HOME="$B" htgrid down || true
    if [ "$status" -eq 0 ]; then
        rm -rf "$scratch"
    else  # the daemons' logs say what went wrong
        echo "run.sh: failed; both pools' files are kept in $scratch (log/SchedLog...)" >&2
    fi
}
trap stop_pools EXIT
trap 'exit 130' INT TERM

# Try the command that follows once a second, up to $1 times, until it succeeds.
retry() {
    left=$1
    shift
    until "$@"; do
        left=$((left - 1))
        if [ "$left" -le 0 ]; then
            echo "run.sh: gave up waiting for: $*" >&2
            return 1
        fi
        sleep 1
    done
}

mkdir -p "$A" "$B"
# A pool run by root runs each job as its owner, and refuses root's (as HTCondor does):
# run as root, this demo lets both pools run root's jobs.
root_jobs=""
if [ "$(id -u)" = 0 ]; then
    root_jobs="ALLOW_ROOT_JOBS = true"
fi
# The site: its own trust domain and schedd name, a collector on a free loopback port.
cat > "$B/htgrid.conf" <<CONF
TRUST_DOMAIN = site.example
SCHEDD_NAME = $site_schedd
COLLECTOR_HOST = 127.0.0.1:0
DAEMON_LIST = MASTER, SCHEDD, COLLECTOR
$root_jobs
CONF
# The laptop: a queue and the grid manager, which looks at the site every 2 seconds;
# no collector (COLLECTOR_HOST keeps it off another pool's default port 9618).
cat > "$A/htgrid.conf" <<CONF
TRUST_DOMAIN = laptop.example
SCHEDD_NAME = schedd@laptop.example
COLLECTOR_HOST = 127.0.0.1:0
DAEMON_LIST = MASTER, SCHEDD, GRIDMANAGER
GRIDMANAGER_JOB_PROBE_INTERVAL = 2
$root_jobs
CONF

echo "== the site (pool B)"
HTGRID_HOME="$B" htgrid up
# Where the site's collector listens (its file says port 0: any free one).
site_pool="$(HTGRID_HOME="$B" htgrid config_val COLLECTOR_HOST)"

echo "== the laptop (pool A) trusts the site's CA and gets a token from the site"
HTGRID_HOME="$A" htgrid trust add site.example "$(HTGRID_HOME="$B" htgrid config_val TRUST_DOMAIN_CAFILE)"
# The site's administrator signs a token for the user (user@site.example maps to the
# local user there); the user keeps it where clients look for tokens (mode 0600).
HTGRID_HOME="$B" htgrid token create -identity "$user@site.example" -token "$A/etc/tokens.d/site.example"
HTGRID_HOME="$A" htgrid up

echo "== submit on the laptop, for the site"
rm -f job.out job.err job.log answer.txt
HTGRID_HOME="$A" htgrid submit job.sub "site_schedd=$site_schedd" "site_pool=$site_pool"

echo "== the job in the site's queue, seen from the laptop (-name/-pool), and on the laptop"
running_at_site() {
    status="$(HTGRID_HOME="$A" htgrid q -name "$site_schedd" -pool "$site_pool" -af JobStatus 2>/dev/null)" || true
    [ "$status" = 2 ] || grep -q '^005 ' job.log 2>/dev/null
}
retry 120 running_at_site
HTGRID_HOME="$A" htgrid q -name "$site_schedd" -pool "$site_pool" -nobatch
HTGRID_HOME="$A" htgrid q -grid

# `htgrid wait` returns when the job has left the queue; a held job stays, so look at
# the log between waits rather than wait out the whole time for nothing.
left=300
until finished="$(HTGRID_HOME="$A" htgrid wait -wait 10 job.log)"; do
    if grep -q '^012 ' job.log; then
        echo "run.sh: the job was held:" >&2
        sed -n '/^012 /,/^\.\.\./p' job.log >&2
        exit 1
    fi
    left=$((left - 10))
    if [ "$left" -le 0 ]; then
        echo "run.sh: the job did not finish in 300 seconds" >&2
        exit 1
    fi
done
echo "$finished"
echo "== answer.txt and job.out, back on the laptop"
cat answer.txt job.out
echo "== job.log (the laptop's event log)"
cat job.log
echo "== the job in the laptop's history"
HTGRID_HOME="$A" htgrid history -limit 1 -af ClusterId ExitCode GridJobId
# Once the output is back, the grid manager lets the site's copy go to the site's history.
echo "== the site's copy, in the site's history, seen from the laptop (-name/-pool)"
site_history() {
    HTGRID_HOME="$A" htgrid history -name "$site_schedd" -pool "$site_pool" "$@"
}
in_site_history() {
    [ -n "$(site_history -af ClusterId)" ]
}
retry 60 in_site_history
site_history -af ClusterId Owner ExitCode SubmitterGlobalJobId

#!/bin/sh
# The main job: start the personal pool, run one grid job end to end through the grid
# manager and the batch GAHP (fork back end), show its output and its event log.
#
#   sh examples/grid/run.sh --install   installs htgrid (pip install -e) first
set -e
cd "$(dirname "$0")"
if [ "${1:-}" = "--install" ]; then
    # The interpreter itself rather than a pyenv shim: pip through a shim ends in
    # `pyenv rehash`, which fails when a stale rehash lock is left behind.
    py="$(python3 -c 'import sys; print(sys.executable)')"
    "$py" -m pip install --quiet --disable-pip-version-check -e ../..
    PATH="$(dirname "$py"):$PATH"
    export PATH
fi
if [ "$(id -u)" = 0 ]; then
    # Run by root, a pool runs each job as its owner, and refuses root's (as HTCondor
    # does): for this example, whose job is root's, the pool lets root's jobs run.
    home="${HTGRID_HOME:-$HOME/.htgrid}"
    if ! grep -qs '^ *ALLOW_ROOT_JOBS *=' "$home/htgrid.conf"; then
        mkdir -p "$home"
        printf "# Set by examples/grid/run.sh, run as root: root's jobs run, as root.\n" >> "$home/htgrid.conf"
        echo "ALLOW_ROOT_JOBS = true" >> "$home/htgrid.conf"
        echo "run as root: ALLOW_ROOT_JOBS = true added to $home/htgrid.conf"
    fi
fi
rm -f hello.out hello.err hello.log
htgrid up
trap 'htgrid down' EXIT
htgrid submit hello.sub
htgrid wait -wait 300 hello.log
echo "== hello.out (staged back from the batch job's working area)"
cat hello.out
echo "== hello.log (the user job event log)"
cat hello.log
echo "== the job in the history"
htgrid history -limit 1 -af ClusterId GridResource GridJobId ExitCode

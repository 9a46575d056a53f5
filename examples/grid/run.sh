#!/bin/sh
# The main job: start the personal pool, run one grid job end to end through the grid
# manager and the batch GAHP (fork back end), show its output and its event log.
set -e
cd "$(dirname "$0")"
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

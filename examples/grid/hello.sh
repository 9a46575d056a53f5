#!/bin/sh
# Runs in the batch job's working area, with the staged-in input file beside it.
echo "$(cat greeting.txt) $*"
echo "ran on $(hostname) as $(id -un)"

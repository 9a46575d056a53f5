#!/bin/sh
# Runs at the site, in the sandbox its queue made for it: reads the file sent along,
# writes one to send back, and says where it ran.
sleep 10
tr 'a-z' 'A-Z' < greeting.txt > answer.txt
echo "ran at the site, in $(pwd)"

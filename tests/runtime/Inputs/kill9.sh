#!/bin/sh
# kill9.sh RANK ERR -- COMMAND...: run COMMAND (an mpirun whose process of world rank RANK
# stops itself with --stop) with its stderr in ERR; once that process has stopped, SIGKILL it
# from outside (as the OOM killer would) and wait for the job. Prints "exit STATUS" (COMMAND's)
# at the end of ERR. Gives up (exit 2) when no process of rank RANK stops within 30 s.
rank=$1 err=$2
shift 3
. "$(dirname "$0")/procs.sh"
"$@" > /dev/null 2> "$err" &
job=$!
n=0
while :; do
  n=$((n + 1))
  if [ $n -gt 300 ]; then echo "kill9.sh: no process of rank $rank stopped" >&2; kill $job; exit 2; fi
  sleep 0.1
  for p in $(rank_procs $job "$rank"); do
    state=$(sed 's/^.*) \([A-Za-z]\).*$/\1/' /proc/$p/stat 2>/dev/null)
    if [ "$state" = T ]; then
      kill -9 $p
      wait $job
      echo "exit $?" >> "$err"
      exit 0
    fi
  done
done

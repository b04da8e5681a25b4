#!/bin/sh
# kill9.sh RANK ERR -- COMMAND...: run COMMAND (an mpirun whose processes inject --stop at RANK)
# with its stderr in ERR; once the stopped process has said so, SIGKILL it from outside (as the
# OOM killer would) and wait for the job. Prints "exit STATUS" (COMMAND's) at the end of ERR.
# Gives up (exit 2) when no process says it stopped within 30 s.
rank=$1 err=$2
shift 3
"$@" > /dev/null 2> "$err" &
job=$!
n=0
until grep -q 'as asked (--stop)' "$err"; do
  n=$((n + 1))
  if [ $n -gt 300 ]; then echo "kill9.sh: no process stopped" >&2; kill $job; exit 2; fi
  sleep 0.1
done
procs=$job kids=$job
while [ -n "$kids" ]; do # every descendant: COMMAND may be timeout, then mpirun
  kids=$(for k in $kids; do pgrep -P $k; done)
  procs="$procs $kids"
done
for p in $procs; do
  if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
    kill -9 $p
  fi
done
wait $job
echo "exit $?" >> "$err"

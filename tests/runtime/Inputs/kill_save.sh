#!/bin/sh
# kill_save.sh DIR DELAY RANK -- COMMAND...: run COMMAND (an octo-run that saves into DIR every
# step) in the background; once DIR/latest exists, wait DELAY seconds and SIGKILL it from
# outside, as the OOM killer or a lost node would: RANK "-" kills COMMAND's own process (the
# cpu backend), a number the MPI process of that world rank (mpirun then ends the others).
# Waits for the job and prints "killed after step N" (DIR/latest's step) or "finished"
# when the run ended first. Gives up (exit 2) when no checkpoint appears within 60 s.
# (Not a test: lit skips Inputs/.)
dir=$1 delay=$2 rank=$3
shift 4
"$@" > /dev/null 2>&1 &
job=$!
n=0
while [ ! -f "$dir/latest" ]; do
  n=$((n + 1))
  if [ $n -gt 600 ]; then echo "kill_save.sh: no checkpoint in $dir" >&2; kill $job; exit 2; fi
  sleep 0.1
done
sleep "$delay"
victim=$job
if [ "$rank" != "-" ]; then
  . "$(dirname "$0")/procs.sh"
  for p in $(rank_procs $job "$rank"); do victim=$p; done
fi
if kill -9 "$victim" 2>/dev/null; then
  wait $job
  echo "killed after $(cat "$dir/latest" | sed 's/step-0*/step /')"
else
  wait $job
  echo "finished"
fi

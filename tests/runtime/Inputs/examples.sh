#!/bin/sh
# examples.sh -- every example spec trains its real model: each is planned (the tuner, half a
# second), lowered to a stream and run with octo-run --check at the automatic scale on BACKEND
# (cpu: threads; mpi: one process per rank under $MPIRUN) for STEPS steps. Prints one line per
# example: "NAME: ok (scale K)" or "NAME: FAILED (exit N)" with octo-run's output.
# usage: examples.sh EXAMPLES_DIR TMPDIR BACKEND STEPS   (octoc, octo-run, octo-dis on PATH)
# (Not a test: lit skips Inputs/.)
set -u
dir=$1 tmp=$2 backend=$3 steps=$4
mkdir -p "$tmp"
for spec in "$dir"/*.octo; do
  name=$(basename "$spec" .octo)
  plan="$tmp/$name.ois"
  if ! octoc "$spec" --evals=200 --emit=stream -o "$plan" > "$plan.log" 2>&1; then
    echo "$name: FAILED (octoc)"
    cat "$plan.log"
    continue
  fi
  if [ "$backend" = mpi ]; then
    world=$(octo-dis "$plan" | sed -n 's/^; model @[^:]*: \([0-9]*\) ranks* x \([0-9]*\) replicas*.*/\1 \2/p' |
            { read -r n r; echo $((n * r)); })
    $MPIRUN -np "$world" octo-run "$plan" --backend=mpi --check --steps="$steps" \
      --timeout=60 > "$plan.out" 2>&1
  else
    octo-run "$plan" --check --steps="$steps" --timeout=60 > "$plan.out" 2>&1
  fi
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^check: every step matches" "$plan.out"; then
    echo "$name: ok$(sed -n 's/.*, scale \([0-9]*\)$/ (scale \1)/p' "$plan.out" | head -1)"
  else
    echo "$name: FAILED (exit $rc)"
    cat "$plan.out"
  fi
done

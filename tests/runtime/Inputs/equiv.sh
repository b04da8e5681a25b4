#!/bin/sh
# equiv.sh -- gradient equivalence of every schedule: compiles hetero.octo for a pipeline of P
# devices (and D data-parallel replicas) with each classic schedule and with the tuner, lowers it
# to a stream, runs it with octo-run --check on BACKEND (cpu: threads; cuda: one GPU; mpi: mpirun with one
# process per rank of the stream, P x D unless the plan leaves a device idle) and
# prints one line per schedule: "NAME: ok", "NAME: refused" (the planner does not make that
# schedule for this shape) or "NAME: FAILED (exit N)" with octo-run's output.
# usage: equiv.sh SRCDIR TMPDIR P D BACKEND [STEPS]   (octoc, octo-run on PATH; MPIRUN set for mpi)
# (Not a test: lit skips Inputs/.)
set -u
src=$1 tmp=$2 p=$3 d=$4 backend=$5 steps=${6:-2}
mkdir -p "$tmp"
spec="$tmp/hetero-p$p-d$d.octo"
mb=$((8 / d))
sed -e "s/pipeline = 4, tensor = 1, data = 1/pipeline = $p, tensor = 1, data = $d/" \
    -e "s/gpus_per_node = 4/gpus_per_node = $((p * d))/" \
    -e "s/global_batch = 8/global_batch = $((mb * d))/" "$src/hetero.octo" > "$spec"
for name in gpipe 1f1b interleaved zb-h1 zbv adaptive tuned; do
  case $name in
    interleaved) passes='cost,partition{method=uniform, chunks=2},place{method=interleaved},schedule{method=interleaved-1f1b}' ;;
    zbv) passes='cost,partition{method=balanced, chunks=2},place{method=vshape},schedule{method=zbv}' ;;
    adaptive) passes='cost,partition{method=balanced, chunks=2},place{method=interleaved},schedule{method=adaptive}' ;;
    tuned) passes='' ;;
    *) passes="cost,partition{method=balanced},place,schedule{method=$name}" ;;
  esac
  plan="$tmp/$name-p$p-d$d.ois"
  if [ -n "$passes" ]; then
    octoc "$spec" --passes="$passes" --emit=stream -o "$plan" 2>/dev/null
  else
    octoc "$spec" --evals=200 --emit=stream -o "$plan" 2>/dev/null
  fi
  if [ $? -ne 0 ]; then
    echo "$name: refused"
    continue
  fi
  if [ "$backend" = mpi ]; then
    # The plan may leave a device without stages: one process per rank of the stream.
    world=$(octo-dis "$plan" | sed -n 's/^; model @[^:]*: \([0-9]*\) ranks* x \([0-9]*\) replicas*.*/\1 \2/p' |
            { read -r n r; echo $((n * r)); })
    $MPIRUN -np "$world" octo-run "$plan" --backend=mpi --check --steps="$steps" \
      --timeout=20 > "$plan.out" 2>&1
  else
    octo-run "$plan" --backend="$backend" --check --steps="$steps" --timeout=20 > "$plan.out" 2>&1
  fi
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "$name: ok"
  else
    echo "$name: FAILED (exit $rc)"
    cat "$plan.out"
  fi
done

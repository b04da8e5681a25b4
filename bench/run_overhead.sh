#!/bin/sh
# run_overhead.sh -- executor overhead of octo-run's cpu backend (issue 7's benchmark):
#   1. negligible compute (the model at its smallest, --scale=1000000): the step time
#      divided by the instructions of the longest program = the interpreter's and the transport's
#      time per instruction;
#   2. real compute (--scale=SCALE, default 8): the step time against the busiest rank's compute
#      time; the remainder is the pipeline's bubble (1F1B on 2 ranks with 64 microbatches:
#      (p - 1) / (m + p - 1) = 1.5% for equal stages) plus the executor's overhead.
# Uses the runtime tests' heterogeneous model. Figures only.
# usage: bench/run_overhead.sh BUILD_DIR [SCALE [STEPS]]   (STEPS of negligible compute,
#        default 200; the real compute runs 3; the smoke run of tests/bench: SCALE 64, 10 STEPS)
set -eu
BUILD=$1
SCALE=${2:-8}
STEPS=${3:-200}
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
sed -e 's/pipeline = 4, tensor = 1, data = 1/pipeline = 2, tensor = 1, data = 1/' \
    -e 's/gpus_per_node = 4/gpus_per_node = 2/' -e 's/global_batch = 8/global_batch = 64/' \
    "$SRC/tests/runtime/Inputs/hetero.octo" > "$TMP/m.octo"
"$BUILD/tools/octoc" "$TMP/m.octo" \
  --passes='cost,partition{method=uniform},place,schedule{method=1f1b}' --emit=stream -o "$TMP/p.ois"
instrs=$("$BUILD/tools/octo-dis" "$TMP/p.ois" | awk '/^rank/ {if (n > max) max = n; n = 0} /^  [0-9]/ {n++} END {if (n > max) max = n; print max}')

"$BUILD/tools/octo-run" "$TMP/p.ois" --scale=1000000 --steps="$STEPS" > "$TMP/small.txt"
awk -v n="$instrs" '/^step/ {t += $3; k++} END {
  printf "negligible compute: %d steps, %.3f ms per step, %d instructions on the longest program: %.2f us per instruction\n", k, t / k, n, 1000 * t / k / n }' "$TMP/small.txt"

"$BUILD/tools/octo-run" "$TMP/p.ois" --scale="$SCALE" --steps=3 > "$TMP/big.txt"
awk '/^step/ {t += $3} /^rank/ {b = $4; if (b > busy) busy = b} END {
  printf "real compute (scale '"$SCALE"'): step time %.1f ms in all, busiest rank computes %.1f ms: %.2f%% over it (bubble of the schedule: 1.5%%)\n", t, busy, 100 * (t / busy - 1) }' "$TMP/big.txt"

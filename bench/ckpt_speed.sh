#!/bin/sh
# ckpt_speed.sh -- what a checkpoint costs (octo-run --save and --resume; docs/checkpoints.md),
# on the Llama 3 8B example's model at a scale (default 16), planned on 4 ranks x 2 replicas,
# saved after one step on threads. Prints the checkpoint's size (weights and Adam's moments,
# F32) and three times:
#   save    the save as the run reports it: the ranks of replica 0 write their shards in
#           parallel, then rank 0 writes the indexes and reads every file back for its CRC-32;
#   verify  the manifest's check of every file's size and CRC-32 before a resume: the wall time
#           of a resume that stops right after it (--steps at the checkpoint's step);
#   read    the slowest rank's reading of its tensors in a resume, as the run reports it.
# Figures only.
# usage: bench/ckpt_speed.sh BUILD_DIR [SCALE]   (the smoke run of tests/bench: SCALE 64)
set -eu
BUILD=$1
SCALE=${2:-16}
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ln -s "$SRC/examples/clusters" "$TMP/clusters"
sed -e 's/global_batch = [0-9]*/global_batch = 4/' \
    -e 's/pipeline = 8, tensor = 1, data = 1/pipeline = 4, tensor = 1, data = 2/' \
    "$SRC/examples/llama3_8b.octo" > "$TMP/m.octo"
"$BUILD/tools/octoc" "$TMP/m.octo" \
  --passes='cost,partition{method=balanced},place,schedule{method=1f1b}' --emit=stream -o "$TMP/p.ois"
run() { "$BUILD/tools/octo-run" "$TMP/p.ois" --timeout=600 "$@"; }
run --scale="$SCALE" --steps=1 --save="$TMP/ck" > "$TMP/save.txt"
bytes=$(cat "$TMP/ck"/step-*/* | wc -c)
t0=$(date +%s.%N)
run --steps=1 --resume="$TMP/ck" > /dev/null 2>&1 || true # refused after the verification
t1=$(date +%s.%N)
run --steps=2 --resume="$TMP/ck" > "$TMP/resume.txt"
cat "$TMP/save.txt" "$TMP/resume.txt" | awk -v bytes="$bytes" -v scale="$SCALE" \
    -v t0="$t0" -v t1="$t1" '
  function rate(s) { return s > 0 ? bytes / 1048576 / s : 0 }
  /^saved:/ { save = $(NF - 1) }
  /^resumed:/ { read = $(NF - 1) }
  END {
    verify = t1 - t0
    printf "llama3_8b at scale %d, 4 ranks x 2 replicas: checkpoint %.1f MiB\n", scale, bytes / 1048576
    printf "save: %.3f s (%.0f MiB/s)\n", save, rate(save)
    printf "verify: %.3f s (%.0f MiB/s, with reading the plan)\n", verify, rate(verify)
    printf "read: %.3f s (%.0f MiB/s)\n", read, rate(read)
  }'

#!/bin/sh
# tune_speed.sh -- the tuner's time targets (issue 5): a 64-layer, 8-device, 64-microbatch case
# and a 128-layer, 16-device, 128-microbatch case (Llama-3-8B-like decoder layers, 4K tokens, on
# H100 clusters), each run with the tuner's budget given (default: 1 s and 20 s) and with the
# default 10 s; prints the tuner's own line (iterations, plans simulated, seconds, speedups).
# Usage: bench/tune_speed.sh BUILD [BUDGET_SMALL BUDGET_LARGE]
set -eu
build=$1
small=${2:-1}
large=${3:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/octo-tune-speed.XXXXXX")
trap 'rm -rf "$work"' EXIT
spec() { # $1: decoder layers, $2: pipeline, $3: microbatches, $4: cluster
  cat <<SPEC
import "$root/examples/clusters/h100.octo"
model tune_speed {
  hidden = 4096  heads = 32  kv_heads = 8  ffn = 14336  vocab = 128256  seq = 4096
  layer embed : embedding
  repeat $1 { layer attn : attention
              layer mlp : mlp }
  layer head : lm_head
}
train { cluster = $4, pipeline = $2, microbatches = $3, mem_limit = 72 GiB }
SPEC
}
spec 31 8 64 dgx_h100 > "$work/small.octo"      # 64 layers with embedding and head
spec 63 16 128 dgx_h100_x2 > "$work/large.octo" # 128 layers
for run in "small $small" "small 10" "large $large" "large 10"; do
  set -- $run
  printf '%-6s --budget=%-3s ' "$1" "$2"
  "$build/tools/octoc" "$work/$1.octo" --budget="$2" | grep '^tuner:'
done

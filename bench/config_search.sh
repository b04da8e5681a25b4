#!/bin/sh
# config_search.sh -- the configuration search's targets (issue 16): on the heterogeneous examples
# and on 32- and 64-GPU variants of them, with every configuration field left free (tensor,
# pipeline, data, micro_batch, recompute, zero; octoc --search=config), print per case the
# chosen configuration and its predicted step, the best configuration of the Megatron grid
# (every TP x PP x DP, micro_batch 1/2/4, recompute none/selective/full, uniform 1F1B or
# interleaved 1F1B), the PP-only tuned plan, the speedups and the search's time; then the
# geometric-mean speedup over the grid and the slowest search. 'bound': how far the chosen step is
# above the smallest bound of any configuration; 'ceiling': the grid's step over that bound, the
# largest speedup any plan of any configuration could have over the grid.
# The clusters are the examples' with gemm_half = 128 on every GPU (a GEMM whose smallest
# dimension on one GPU is 128 reaches half of the device's efficiency: docs/cost-model.md), so
# that tensor parallelism and small microbatches pay for their smaller GEMMs.
# Usage: bench/config_search.sh BUILD [--smoke]   (--smoke: one 8-GPU case with short tunes, the
#        smoke run of tests/bench)
set -eu
build=$1
mode=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/octo-config-search.XXXXXX")
trap 'rm -rf "$work"' EXIT
octoc="$build/tools/octoc"

mkdir -p "$work/clusters"
for f in "$root"/examples/clusters/*.octo; do
  sed -E 's/(efficiency = [0-9.]+)/\1, gemm_half = 128/' "$f" > "$work/clusters/$(basename "$f")"
done

# free EXAMPLE CLUSTER GLOBAL_BATCH: the example with the configuration fields removed.
free() {
  sed -E -e "s#import \"clusters/#import \"$work/clusters/#" \
    -e '/^train/,/^}/{/^ *(pipeline|tensor|data|micro_batch|recompute|zero|microbatches) *=/d}' \
    -e "/^train/,/^}/s/cluster = [a-z0-9_]+/cluster = $2/" \
    -e "/^train/,/^}/s/global_batch = [0-9]+/global_batch = $3/" \
    "$root/examples/$1.octo"
}

if [ "$mode" = --smoke ]; then
  cases="nemotron_h_8b:dgx_h100:64"
  evals=--evals=100
else
  cases="nemotron_h_8b:dgx_h100:64 nemotron_h_8b:dgx_h100_x4:256 nemotron_h_8b:dgx_h100_x8:512
llama3_8b:dgx_h100:64 llama3_8b:dgx_h100_x8:512 vlm_llava:dgx_h100:128 gemma2_2b:dgx_h100:128
llama3_8b_mixed:h100_a100:128 deepseek_v3_moe:dgx_h200_x4:64 llama3_70b:dgx_h100_x4:128
llama3_70b:dgx_h100_x8:256"
  evals=
fi

echo "configuration search (octoc --search=config, default effort) against the Megatron grid"
printf '%-16s %4s  %-24s %11s %6s  %-24s %11s %8s %8s %8s %7s\n' case GPUs chosen "step ms" \
  "bound" "Megatron grid best" "step ms" speedup ceiling "PP-only" "search"
: > "$work/speedups"
for c in $cases; do
  ex=${c%%:*}
  rest=${c#*:}
  cl=${rest%%:*}
  gb=${rest#*:}
  free "$ex" "$cl" "$gb" > "$work/$ex.octo"
  start=$(date +%s.%N)
  "$octoc" "$work/$ex.octo" --search=config --report=json $evals > "$work/out.json"
  end=$(date +%s.%N)
  python3 - "$work/out.json" "$ex" "$start" "$end" "$work/speedups" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def cfg(c):
    rc = {"none": "-", "selective": "sel", "full": "full"}[c["recompute"]]
    return "t%d p%d d%d mb%d %s z%d" % (c["tensor"], c["pipeline"], c["data"], c["micro_batch"],
                                        rc, c["zero"])
best, grid, pp = r["configs"][0], r["megatron_grid"], r["pp_only"]
speed = grid["makespan_ms"] / best["makespan_ms"] if grid else float("nan")
ppx = pp["makespan_ms"] / best["makespan_ms"] if pp else float("nan")
bound = r["config_search"]["bound_ms"]
gap = best["makespan_ms"] / bound - 1
ceil = grid["makespan_ms"] / bound if grid else float("nan")
print("%-16s %4d  %-24s %11.1f %5.1f%%  %-24s %11.1f %7.2fx %7.2fx %7.2fx %6.1fs" % (
    sys.argv[2], best["gpus"],
    cfg(best), best["makespan_ms"], 100 * gap, cfg(grid) if grid else "-",
    grid["makespan_ms"] if grid else float("nan"), speed, ceil, ppx,
    float(sys.argv[4]) - float(sys.argv[3])))
with open(sys.argv[5], "a") as f:
    f.write("%r %r %r\n" % (speed, float(sys.argv[4]) - float(sys.argv[3]), ceil))
PY
done
python3 - "$work/speedups" <<'PY'
import math, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
def gmean(v):
    v = [a for a in v if a == a]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
s = [a for a, _, _ in rows if a == a]
print("geometric-mean speedup over the Megatron grid: %.2fx over %d cases (slowest case %.2fx)"
      % (gmean(s), len(s), min(s) if s else float("nan")))
print("geometric-mean ceiling (grid step / smallest bound of any configuration): %.2fx"
      % gmean([c for _, _, c in rows]))
print("longest search: %.1f s" % max(t for _, t, _ in rows))
PY

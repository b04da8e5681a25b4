#!/bin/sh
# tune_speed.sh -- the tuner's targets (issues 15, 28), with octoc's default settings (until 20
# restarts in a row find nothing better, at most 4000 plans and 2.5e8 simulated operations;
# every core):
#   1. time and distance from the bound: 64 layers / 8 devices / 64 microbatches, 128 / 16 / 128
#      (two nodes) and 256 / 64 / 512 (eight nodes), Llama-3-8B-like decoder layers at 4K tokens
#      on H100 nodes with a 72 GiB limit;
#   2. the speedup of the search from 1 to 2 threads (and that the plan is the same);
#   3. strong scaling: a hybrid Mamba-2 / attention / MLP model with a 256K-vocabulary head on
#      16, 32 and 64 devices, the tuned plan's speedup over interleaved 1F1B and over the best
#      classic plan (the same 256 microbatches at every size);
#   4. a wall-clock budget (--budget, no effort limit): the seconds the search took.
# Usage: bench/tune_speed.sh BUILD [--quick|--smoke]   (--quick: only the smallest case of each
#        part; --smoke: that with an effort of 50 plans, the smoke run of tests/bench)
set -eu
build=$1
quick=${2:-}
effort=
if [ "$quick" = --smoke ]; then
  quick=--quick
  effort=--evals=50
fi
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/octo-tune-speed.XXXXXX")
trap 'rm -rf "$work"' EXIT
octoc="$build/tools/octoc"

dense() { # $1: decoder layers, $2: pipeline, $3: microbatches, $4: cluster
  cat <<SPEC
import "$root/examples/clusters/h100.octo"
model dense {
  hidden = 4096  heads = 32  kv_heads = 8  ffn = 14336  vocab = 128256  seq = 4096
  layer embed : embedding
  repeat $1 { layer attn : attention
              layer mlp : mlp }
  layer head : lm_head
}
train { cluster = $4, pipeline = $2, microbatches = $3, mem_limit = 72 GiB }
SPEC
}
hybrid() { # $1: pipeline, $2: microbatches, $3: cluster
  cat <<SPEC
import "$root/examples/clusters/h100.octo"
model hybrid {
  hidden = 4096  heads = 32  kv_heads = 8  ffn = 16384  vocab = 256000  seq = 8192
  layer embed : embedding
  repeat 21 { layer m1 : mamba2 { state = 128 }
              layer f1 : mlp { act = relu2, gated = false }
              layer m2 : mamba2 { state = 128 }
              layer f2 : mlp { act = relu2, gated = false }
              layer a : attention
              layer f3 : mlp { act = relu2, gated = false } }
  layer head : lm_head
}
train { cluster = $3, pipeline = $1, microbatches = $2, mem_limit = 72 GiB, recompute = selective }
SPEC
}

# JSON report -> one table row: seconds, plans (simulated, passed over), pruned, stop, step,
# bound, gap, speedups.
row() { # $1: label, $2: JSON file
  python3 - "$1" "$2" <<'PY'
import json, sys
label, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
t = r["tuner"]
fits = [b for b in r.get("baselines", []) if b.get("ok") and not b.get("oom")]
i1 = [b["makespan_ms"] for b in fits if b["name"].startswith("I-1F1B")]
best = min((b["makespan_ms"] for b in fits), default=None)
step = t["makespan_ms"]
def x(v):
    return "%.2fx" % (v / step) if v else "-"
print("| %s | %.2f | %d | %d | %d | %s | %.1f | %.1f | %.1f%% | %s | %s |" % (
    label, t["seconds"], t["evaluations"], t["passed"], t["pruned"], t["stop"], step, t["bound_ms"],
    100 * t["gap"], x(min(i1) if i1 else None), x(best)))
PY
}
header() {
  echo "| case | s | plans | passed | pruned | stop | step ms | bound ms | gap | vs I-1F1B | vs best classic |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
}

table() { # $1: spec function; then cases "label args..." (the smallest first)
  make=$1
  shift
  header
  for c in "$@"; do
    set -- $c
    label=$1
    shift
    "$make" "$@" > "$work/c.octo"
    "$octoc" "$work/c.octo" $effort --compare --report=json -o "$work/c.json"
    row "$label" "$work/c.json"
    if [ "$quick" = --quick ]; then break; fi
  done
}

echo "## 1. Targets (default settings, $(nproc) cores)"
table dense "64L/8dev/64mb 31 8 64 dgx_h100" "128L/16dev/128mb 63 16 128 dgx_h100_x2" \
  "256L/64dev/512mb 127 64 512 dgx_h100_x8"

echo
echo "## 2. Threads (128 layers, 16 devices, 128 microbatches; the plan must not change)"
if [ "$quick" = --quick ]; then dense 31 8 64 dgx_h100 > "$work/t.octo"; else dense 63 16 128 dgx_h100_x2 > "$work/t.octo"; fi
echo "| jobs | s | step ms |"
echo "|---|---|---|"
for j in 1 2; do
  "$octoc" "$work/t.octo" $effort --jobs=$j --report=json -o "$work/t$j.json"
  "$octoc" "$work/t.octo" $effort --jobs=$j --emit=ir -o "$work/t$j.oir"
  python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['tuner']; print('| %s | %.2f | %.3f |' % (sys.argv[2], t['seconds'], t['makespan_ms']))" "$work/t$j.json" $j
done
if cmp -s "$work/t1.oir" "$work/t2.oir"; then echo "same plan with 1 and 2 threads"; else echo "DIFFERENT plans with 1 and 2 threads"; exit 1; fi
python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['tuner']['seconds']; b=json.load(open(sys.argv[2]))['tuner']['seconds']; print('speedup from 1 to 2 threads: %.2fx' % (a / b))" "$work/t1.json" "$work/t2.json"

echo
echo "## 3. Strong scaling (hybrid Mamba-2/attention/MLP, 256K vocabulary, 128 layers, 256 microbatches)"
table hybrid "16dev 16 256 dgx_h100_x2" "32dev 32 256 dgx_h100_x4" "64dev 64 256 dgx_h100_x8"

echo
echo "## 4. A wall-clock budget (--evals=0 --budget=S): the search's seconds"
echo "| case | budget s | tuner s | stop |"
echo "|---|---|---|---|"
for c in "64L/8dev/64mb 31 8 64 dgx_h100 0.2" "128L/16dev/128mb 63 16 128 dgx_h100_x2 1" \
         "256L/64dev/512mb 127 64 512 dgx_h100_x8 5"; do
  set -- $c
  dense "$2" "$3" "$4" "$5" > "$work/b.octo"
  "$octoc" "$work/b.octo" --evals=0 --budget="$6" --report=json -o "$work/b.json"
  python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['tuner']; print('| %s | %s | %.3f | %s |' % (sys.argv[2], sys.argv[3], t['seconds'], t['stop']))" "$work/b.json" "$1" "$6"
  if [ "$quick" = --quick ]; then break; fi
done

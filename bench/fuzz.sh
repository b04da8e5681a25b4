#!/bin/sh
# fuzz.sh -- runs the libFuzzer harnesses of tests/fuzz (the .octo front end, the IR reader, the
# .ois reader, the runtime's set-up from CRC-valid mutated streams, the profile reader, plan ->
# lowering, the Hugging Face config import, the safetensors reader, the checkpoint manifest's
# reader) for a given time each and prints, per fuzzer, the executions, executions per second,
# coverage (cov: edges, ft: features) and corpus size. It configures and builds the fuzzers first
# (clang, -DOCTO_FUZZ=ON: libFuzzer, ASan and UBSan) unless -n is given. Each fuzzer starts from
# a corpus seeded from the examples and the tests (tests/fuzz/seeds.py, two lowered streams for
# .ois and model; safetensors files and checkpoint manifests made there) with the DSL or IR
# dictionary (tests/fuzz/*.dict), kept in CORPUS/NAME so that later runs go on from it. A finding
# (crash, leak, timeout, out of memory) is kept as CORPUS/NAME.findings/* and makes the exit status 1;
# an input slower than 10 s (libFuzzer's slow-unit-*) is kept there too and said on stderr.
#
# usage: bench/fuzz.sh [-t SECONDS] [-T SECONDS] [-b BUILD_DIR] [-c CORPUS_DIR] [-n] [FUZZER...]
#   -t SECONDS   time per fuzzer (default 60)
#   -T SECONDS   wall-clock time one input may take before it counts as a hang (default 20;
#                raise it on a loaded machine, where a niced fuzzer gets little of a core)
#   -b BUILD_DIR the fuzz build (default build-fuzz; configured with CC=clang when missing)
#   -c CORPUS    corpus directory (default BUILD_DIR/fuzz-corpus)
#   -n           build nothing: run the fuzzers of BUILD_DIR as they are (the smoke tests)
#   FUZZER       octo, ir, ois, model, profile, plan, import, safetensors, checkpoint
#                (default all)
set -eu

usage() {
  sed -n '/^# usage:/,/^#   FUZZER/s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

SRC=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_EACH=60
HANG=20
BUILD=$SRC/build-fuzz
CORPUS=
BUILD_IT=1
while [ $# -gt 0 ]; do
  case $1 in
    -t) [ $# -ge 2 ] || usage; SECONDS_EACH=$2; shift 2 ;;
    -T) [ $# -ge 2 ] || usage; HANG=$2; shift 2 ;;
    -b) [ $# -ge 2 ] || usage; BUILD=$2; shift 2 ;;
    -c) [ $# -ge 2 ] || usage; CORPUS=$2; shift 2 ;;
    -n) BUILD_IT=0; shift ;;
    -h|--help) usage ;;
    -*) echo "fuzz.sh: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || set -- octo ir ois model profile plan import safetensors checkpoint
CORPUS=${CORPUS:-$BUILD/fuzz-corpus}

if [ "$BUILD_IT" = 1 ]; then
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    command -v clang > /dev/null || { echo "fuzz.sh: clang is needed (libFuzzer)" >&2; exit 1; }
    CC=clang cmake -S "$SRC" -B "$BUILD" -DOCTO_FUZZ=ON -DOCTO_WITH_CUDA=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
  fi
  targets=octoc
  for f in "$@"; do targets="$targets fuzz_$f"; done
  # shellcheck disable=SC2086
  cmake --build "$BUILD" -j "$(nproc 2>/dev/null || echo 2)" --target $targets > /dev/null
fi

# Seeds, once per corpus directory (again when a fuzzer added since lacks its folder).
mkdir -p "$CORPUS"
seed_dirs="octo ir ois prof hf st ckpt"
for s in $seed_dirs; do
  [ -d "$CORPUS/seeds/$s" ] || rm -rf "$CORPUS/seeds"
done
if [ ! -d "$CORPUS/seeds" ]; then
  for s in $seed_dirs; do mkdir -p "$CORPUS/seeds.new/$s"; done
  python3 "$SRC/tests/fuzz/seeds.py" "$SRC" "$CORPUS/seeds.new"
  octoc=$BUILD/tools/octoc
  [ -x "$octoc" ] || octoc=$SRC/build/tools/octoc
  if [ -x "$octoc" ]; then
    "$octoc" "$SRC/examples/hybrid_tiny.octo" --emit=stream -o "$CORPUS/seeds.new/ois/tiny.ois"
    zbv='cost,partition{method=balanced, chunks=2},place{method=vshape},schedule{method=zbv}'
    "$octoc" "$SRC/examples/gpt_uniform.octo" --passes="$zbv" --emit=stream \
      -o "$CORPUS/seeds.new/ois/zbv.ois"
  else
    echo "fuzz.sh: no octoc to lower seed streams with: the ois fuzzer starts from nothing" >&2
  fi
  mv "$CORPUS/seeds.new" "$CORPUS/seeds"
fi

printf '%-8s %8s %12s %9s %7s %7s %7s  %s\n' fuzzer seconds executions "exec/s" cov ft corpus result
status=0
for name in "$@"; do
  bin=$BUILD/tests/fuzz/fuzz_$name
  [ -x "$bin" ] || { echo "fuzz.sh: '$bin' is missing (build with -DOCTO_FUZZ=ON)" >&2; exit 1; }
  case $name in
    octo) seeds="octo plan"; dict=octo.dict ;;
    plan) seeds="plan"; dict=octo.dict ;;
    ir) seeds="ir"; dict=ir.dict ;;
    ois|model) seeds="ois"; dict= ;;
    profile) seeds="prof"; dict= ;;
    import) seeds="hf"; dict= ;;
    safetensors) seeds="st"; dict= ;;
    checkpoint) seeds="ckpt"; dict= ;;
    *) echo "fuzz.sh: unknown fuzzer '$name' (octo, ir, ois, model, profile, plan, import, safetensors, checkpoint)" >&2
       exit 2 ;;
  esac
  dir=$CORPUS/$name
  found=$CORPUS/$name.findings
  mkdir -p "$dir" "$found"
  set --
  for s in $seeds; do set -- "$@" "$CORPUS/seeds/$s"; done
  [ -z "$dict" ] || set -- "$@" -dict="$SRC/tests/fuzz/$dict"
  log=$CORPUS/$name.log
  rc=0
  # ASan's leak check runs at exit; -timeout: one input taking longer is a hang (a finding).
  "$bin" "$dir" "$@" -max_total_time="$SECONDS_EACH" -timeout="$HANG" -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$found/" > "$log" 2>&1 || rc=$?
  result=ok
  # libFuzzer's slow-unit-* files (an input that took over 10 s, e.g. on a loaded machine) are
  # reports, not failures: said on stderr; crash-, leak-, timeout- and oom- files are findings.
  if [ "$rc" != 0 ] || [ -n "$(ls "$found" | grep -v '^slow-unit-')" ]; then
    result="FINDING (see $log, $found)"
    status=1
  fi
  slow=$(ls "$found" | grep -c '^slow-unit-' || true)
  [ "$slow" = 0 ] || echo "fuzz.sh: $name: $slow input(s) took over 10 s (slowest:" \
    "$(sed -n 's/^stat::slowest_unit_time_sec: *//p' "$log") s): $found/slow-unit-*;" \
    "rerun them alone to tell a slow input from a loaded machine" >&2
  awk -v name="$name" -v secs="$SECONDS_EACH" -v result="$result" '
    / cov: / {
      for (i = 1; i <= NF; i++) {
        if ($i == "cov:") cov = $(i + 1)
        if ($i == "ft:") ft = $(i + 1)
        if ($i == "corp:") { corp = $(i + 1); sub(/\/.*/, "", corp) }
      }
    }
    /^stat::number_of_executed_units:/ { execs = $2 }
    /^stat::average_exec_per_sec:/ { rate = $2 }
    END { printf "%-8s %8s %12s %9s %7s %7s %7s  %s\n", name, secs, execs, rate, cov, ft, corp, result }' "$log"
done
exit $status

#!/bin/sh
# parse_scale.sh -- front-end scaling benchmark for the target "a 10,000-layer spec is parsed and
# verified in under 0.3 s". Builds nothing: it takes a build directory holding tools/octoc,
# tools/octo-opt and bench/gen_spec, generates two specs of N layers (every layer its own
# statement; the same body as one 'repeat'), and times, RUNS times each:
#   octoc   spec.octo --passes=verify --emit=ir -o /dev/null
#                                              lex + parse + sema + IR build + verify + print
#                                              (no plan: octoc plans by default, and a model of
#                                              10,000 layers fits no cluster's memory)
#   octo-opt spec.oir -o /dev/null             IR read + verify + print
# It prints best / median / mean wall time per phase, layers per second (from the best run), and
# whether the best run is under the target. It also checks once that octo-opt prints back exactly
# the IR octoc wrote. Figures only: the exit status is non-zero only when a tool fails.
#
# usage: bench/parse_scale.sh BUILD_DIR [-n LAYERS] [-r RUNS] [-t TARGET_S] [-k]
#   -n LAYERS   layers of the generated model (default 10000)
#   -r RUNS     timed runs per phase (default 10)
#   -t TARGET_S target wall time in seconds (default 0.3)
#   -k          keep the generated files (their directory is printed)
set -eu

usage() {
  sed -n '/^# usage:/,/^#   -k/s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

[ $# -ge 1 ] || usage
BUILD=$1
shift
LAYERS=10000
RUNS=10
TARGET=0.3
KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    -n) [ $# -ge 2 ] || usage; LAYERS=$2; shift 2 ;;
    -r) [ $# -ge 2 ] || usage; RUNS=$2; shift 2 ;;
    -t) [ $# -ge 2 ] || usage; TARGET=$2; shift 2 ;;
    -k) KEEP=1; shift ;;
    -h|--help) usage ;;
    *) echo "parse_scale.sh: unknown option '$1'" >&2; usage ;;
  esac
done

OCTOC=$BUILD/tools/octoc
OPT=$BUILD/tools/octo-opt
GEN=$BUILD/bench/gen_spec
for t in "$OCTOC" "$OPT" "$GEN"; do
  if [ ! -x "$t" ]; then
    echo "parse_scale.sh: '$t' is missing: build the project in '$BUILD' first" >&2
    exit 1
  fi
done
if ! date +%N | grep -q '^[0-9]'; then
  echo "parse_scale.sh: this 'date' has no %N (nanoseconds); GNU date is needed" >&2
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/octo-parse-scale.XXXXXX")
if [ "$KEEP" = 0 ]; then
  trap 'rm -rf "$WORK"' EXIT
fi

# run_once LOG CMD... : run a command once, fail loudly with its stderr.
run_once() {
  log=$1
  shift
  if ! "$@" >/dev/null 2>"$log"; then
    echo "parse_scale.sh: failed: $*" >&2
    head -20 "$log" >&2
    exit 1
  fi
}

# time_phase NAME CMD... : RUNS timed runs; prints one result row.
time_phase() {
  name=$1
  shift
  run_once "$WORK/warmup.err" "$@" # warm the page cache; checks that it works
  times=$WORK/times
  : >"$times"
  i=0
  while [ "$i" -lt "$RUNS" ]; do
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$t0 $t1" | awk '{ printf "%.6f\n", $2 - $1 }' >>"$times"
    i=$((i + 1))
  done
  sort -n "$times" | awk -v name="$name" -v layers="$LAYERS" -v target="$TARGET" '
    { t[NR] = $1; sum += $1 }
    END {
      best = t[1]
      med = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
      rate = (best > 0) ? layers / best : 0
      ok = (best < target) ? "yes" : "NO"
      printf "  %-34s %9.4f %9.4f %9.4f %12.0f   %s\n", name, best, med, sum / NR, rate, ok
    }'
}

echo "OctoPipe front-end scaling: $LAYERS layers, $RUNS runs per phase, target < ${TARGET} s"
echo "build: $BUILD   files: $WORK"
for variant in explicit repeat; do
  spec=$WORK/$variant.octo
  ir=$WORK/$variant.oir
  if [ "$variant" = repeat ]; then
    "$GEN" -n "$LAYERS" --repeat -o "$spec"
  else
    "$GEN" -n "$LAYERS" -o "$spec"
  fi
  run_once "$WORK/octoc.err" "$OCTOC" "$spec" --passes=verify --emit=ir -o "$ir"
  "$OPT" "$ir" -o "$WORK/back.oir" 2>"$WORK/opt.err" || {
    echo "parse_scale.sh: octo-opt failed on the IR of $spec" >&2
    head -20 "$WORK/opt.err" >&2
    exit 1
  }
  if cmp -s "$ir" "$WORK/back.oir"; then rt=identical; else rt=DIFFERS; fi
  echo
  echo "$variant: spec $(wc -c <"$spec" | tr -d ' ') bytes, $(wc -l <"$spec" | tr -d ' ') lines;" \
    "IR $(wc -c <"$ir" | tr -d ' ') bytes; octo-opt round trip: $rt"
  printf '  %-34s %9s %9s %9s %12s   %s\n' phase "best(s)" "median(s)" "mean(s)" "layers/s" "<target"
  time_phase "octoc --emit=ir (parse..verify)" "$OCTOC" "$spec" --passes=verify --emit=ir \
    -o /dev/null
  time_phase "octo-opt (read+verify+print)" "$OPT" "$ir" -o /dev/null
  time_phase "octo-opt --no-verify (read+print)" "$OPT" "$ir" --no-verify -o /dev/null
done

#!/bin/sh
# fidelity.sh -- predicted against measured step times on this machine (issue 14's benchmark).
# For each spec of bench/specs (a Mamba-2/attention/MLP hybrid with a 16K-token head, a
# dense-then-MoE model, a uniform control), on RANKS MPI processes (default: the machine's cores):
#   1. profile: octo-run --profile measures every layer (F, B, W) and the MPI link at --scale=1;
#   2. plan with that profile: the tuner, and every classic plan of octoc --compare;
#   3. run each plan for STEPS steps with MPI and take the median step after the first;
#   4. calibrate: run the profiled S-1F1B plan for STEPS steps with
#      octo-run --calibrate, which times every layer's F, B, W and the optimizer inside its
#      steps; plan again with the profile and the calibration, and run each plan as in 3;
# then print per plan and per set of costs (profile; profile + calibration) the predicted step,
# the measured step and the error, whether the plans' ranking by prediction matches the ranking
# by measurement (for every pair whose predictions differ by more than 10%), and the tuned
# plan's measured speedup over each classic plan beside its predicted one. The calibrating
# run's plan is S-1F1B's (uniform partition, 1F1B): its calibrated row is in-sample, the others
# are not. S-1F1B's plan, the same with either set of costs, runs in both phases: the last line
# per spec compares its two measurements (the machine's drift). Figures only (bench/README.md
# quotes them).
# usage: bench/fidelity.sh BUILD_DIR [STEPS] [RANKS] [SPEC...]   (STEPS: default 8; RANKS: the
#        cores; SPEC: names of bench/specs, default all three; the smoke run of tests/bench:
#        2 steps, 2 ranks, fid_uniform, FIDELITY_SCALE=8 and FIDELITY_EVALS=100)
# environment: FIDELITY_SCALE (octo-run --scale of the profile and the runs, default 1),
#              FIDELITY_EVALS (the tuner's --evals, plans simulated, default 1000)
set -eu
SCALE=${FIDELITY_SCALE:-1}
EVALS=${FIDELITY_EVALS:-1000}
BUILD=$1
STEPS=${2:-8}
RANKS=${3:-$(nproc 2>/dev/null || echo 2)}
SRC=$(cd "$(dirname "$0")/.." && pwd)
shift $(($# < 3 ? $# : 3))
[ $# -gt 0 ] || set -- fid_hybrid fid_moe fid_uniform
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
OCTOC="$BUILD/tools/octoc"
RUN="$BUILD/tools/octo-run"

# The classic plans of octoc --compare (passes/compare.def), as "name|pipeline" lines.
classics() {
  python3 -c '
import re, sys
text = open(sys.argv[1]).read()
for name, lits in re.findall(r"^BASELINE\(\s*\"([^\"]*)\"\s*,((?:\s*\"[^\"]*\")+)\s*\)", text, re.M):
    print(name + "|" + "".join(re.findall(r"\"([^\"]*)\"", lits)))
' "$SRC/passes/compare.def"
}

# world size of a plan: ranks x replicas of its stream
world_of() {
  "$BUILD/tools/octo-dis" "$1" | sed -n 's/^; model @[^:]*: \([0-9]*\) ranks* x \([0-9]*\) replicas*.*/\1 \2/p' |
    { read -r n r; echo $((n * r)); }
}

for name in "$@"; do
  spec="$TMP/$name.octo"
  sed -e "s/pipeline = 2,/pipeline = $RANKS,/" -e "s/gpus_per_node = 2,/gpus_per_node = $RANKS,/" \
      -e "s|import \"../../examples/|import \"$SRC/examples/|" "$SRC/bench/specs/$name.octo" > "$spec"
  "$OCTOC" "$spec" --passes='cost,partition{method=uniform},place,schedule{method=1f1b}' \
    --emit=stream -o "$TMP/base.ois"
  t0=$(date +%s.%N)
  $MPIRUN -np "$(world_of "$TMP/base.ois")" "$RUN" "$TMP/base.ois" --backend=mpi --scale="$SCALE" \
    --profile="$TMP/$name.json" < /dev/null > /dev/null
  t1=$(date +%s.%N)
  echo "== $name: $RANKS MPI ranks, profiled in $(echo "$t1 - $t0" | bc | cut -c1-4) s"
  for mode in profile calibrated; do
    costs="--profile=$TMP/$name.json"
    if [ "$mode" = calibrated ]; then
      "$OCTOC" "$spec" $costs \
        --passes='cost,partition{method=uniform},place{method=sequential},schedule{method=1f1b}' \
        --emit=stream -o "$TMP/cal.ois"
      t0=$(date +%s.%N)
      $MPIRUN -np "$(world_of "$TMP/cal.ois")" "$RUN" "$TMP/cal.ois" --backend=mpi --scale="$SCALE" \
        --steps="$STEPS" --calibrate="$TMP/$name.cal.json" < /dev/null > "$TMP/cal.txt" 2>&1 ||
        { echo "calibration run failed"; tail -3 "$TMP/cal.txt"; continue; }
      t1=$(date +%s.%N)
      echo "-- calibrated: $STEPS steps of S-1F1B's plan timed in $(echo "$t1 - $t0" | bc | cut -c1-4) s"
      costs="$costs --profile=$TMP/$name.cal.json"
    else
      echo "-- profile: every layer measured alone"
    fi
    printf '%-16s %12s %12s %8s\n' plan "predicted ms" "measured ms" error
    : > "$TMP/$name.$mode.rows"
    { echo "tuned|"; classics; } | while IFS='|' read -r plan passes; do
      out="$TMP/$name.$(echo "$plan" | tr -c 'A-Za-z0-9' '_').ois"
      if [ -z "$passes" ]; then
        "$OCTOC" "$spec" $costs --evals="$EVALS" --emit=stream -o "$out" 2>/dev/null || continue
      else
        "$OCTOC" "$spec" $costs --passes="cost,$passes" --emit=stream -o "$out" 2>/dev/null || continue
      fi
      $MPIRUN -np "$(world_of "$out")" "$RUN" "$out" --backend=mpi --scale="$SCALE" --steps="$STEPS" \
        < /dev/null > "$out.txt" 2>&1 || { echo "$plan: run failed"; tail -3 "$out.txt"; continue; }
      awk -v plan="$plan" '
        /^prediction:/ { for (i = 1; i <= NF; i++) if ($i ~ /^predicted/) p = $(i - 2) }
        /^step [0-9]+:/ { k++; if (k > 1) t[k - 1] = $3 }
        END {
          n = k - 1; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (t[j] < t[i]) { x = t[i]; t[i] = t[j]; t[j] = x }
          m = n % 2 ? t[(n + 1) / 2] : (t[n / 2] + t[n / 2 + 1]) / 2
          printf "%-16s %12.1f %12.1f %+7.1f%%\n", plan, p, m, 100 * (m - p) / p
          printf "%s|%.3f|%.3f\n", plan, p, m > "/dev/stderr"
        }' "$out.txt" 2>> "$TMP/$name.$mode.rows"
    done
    awk -F'|' '
      { name[NR] = $1; p[NR] = $2; m[NR] = $3 }
      END {
        pairs = 0; agree = 0; worst = 0
        for (i = 1; i <= NR; i++) {
          e = (m[i] - p[i]) / p[i]; if (e < 0) e = -e; if (e > worst) worst = e
          for (j = i + 1; j <= NR; j++) {
            d = (p[i] - p[j]) / (p[i] < p[j] ? p[i] : p[j]); if (d < 0) d = -d
            if (d <= 0.10) continue
            pairs++; if ((p[i] < p[j]) == (m[i] < m[j])) agree++
          }
        }
        printf "largest error %.1f%%; ranking: %d of %d pairs with predictions more than 10%% apart ordered alike\n", 100 * worst, agree, pairs
        for (j = 2; j <= NR; j++)
          printf "  tuned over %-14s predicted %.2fx, measured %.2fx\n", name[j] ":", p[j] / p[1], m[j] / m[1]
      }' "$TMP/$name.$mode.rows"
  done
  # S-1F1B's plan does not depend on the costs: measured in both phases, it shows the machine's
  # drift between them.
  cat "$TMP/$name.profile.rows" "$TMP/$name.calibrated.rows" 2>/dev/null | awk -F'|' '
    $1 == "S-1F1B" { m[++n] = $3 }
    END { if (n == 2) printf "noise: S-1F1B, the same plan in both phases, measured %.1f and %.1f ms (%.1f%% apart)\n", m[1], m[2], 100 * (m[2] > m[1] ? m[2] - m[1] : m[1] - m[2]) / (m[1] < m[2] ? m[1] : m[2]) }'
done

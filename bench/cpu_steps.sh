#!/bin/sh
# cpu_steps.sh -- the real model on CPUs: for every example spec, the plan the tuner makes
# (half a second) runs STEPS training steps with octo-run's cpu backend at the automatic scale
# (every rank a thread, one BLAS thread each), and prints the scale, the median step time of the
# steps after the first, the busiest rank's compute time per step, and the share of all ranks'
# compute time spent in BLAS GEMMs. Figures only (bench/README.md quotes them).
# usage: bench/cpu_steps.sh BUILD_DIR [STEPS [SPEC...]]   (default 4 steps of every example; the
#        smoke run of tests/bench runs 2 steps of one small spec)
set -eu
BUILD=$1
STEPS=${2:-4}
SRC=$(cd "$(dirname "$0")/.." && pwd)
shift $(($# < 2 ? $# : 2))
[ $# -gt 0 ] || set -- "$SRC"/examples/*.octo
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
printf '%-18s %6s %6s %10s %12s %10s\n' example ranks scale "step ms" "busiest ms" "BLAS share"
for spec in "$@"; do
  name=$(basename "$spec" .octo)
  "$BUILD/tools/octoc" "$spec" --evals=200 --emit=stream -o "$TMP/$name.ois" > /dev/null
  "$BUILD/tools/octo-run" "$TMP/$name.ois" --steps="$STEPS" > "$TMP/$name.out"
  awk -v name="$name" -v steps="$STEPS" '
    NR == 1 { for (i = 1; i <= NF; i++) if ($i == "scale") scale = $(i + 1); ranks = $2 }
    /^step [0-9]+:/ { k++; if (k > 1) t[k - 1] = $3 }
    /^(replica [0-9]+ )?rank [0-9]+: busy/ {
      for (i = 1; i <= NF; i++) {
        if ($i == "busy") { b = $(i + 1); busy += b; if (b > top) top = b }
        if ($i == "BLAS") { s = $(i + 1); sub(/%/, "", s); blas += b * s / 100 }
      }
    }
    END {
      n = k - 1; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (t[j] < t[i]) { x = t[i]; t[i] = t[j]; t[j] = x }
      med = n % 2 ? t[(n + 1) / 2] : (t[n / 2] + t[n / 2 + 1]) / 2
      printf "%-18s %6s %6s %10.1f %12.1f %9.1f%%\n", name, ranks, scale, med, top / steps, 100 * blas / busy
    }' "$TMP/$name.out"
done

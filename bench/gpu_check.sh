#!/bin/sh
# gpu_check.sh -- the one prepared script for a machine with a GPU (issue 8), under 8 minutes on
# one H200. It builds OctoPipe (with the CUDA toolkit, cuBLAS and NCCL), then prints:
#   1. the GPU tests (lit, REQUIRES: cuda) and the GPU model test; every layer kind's kernels
#      on the GPU against the CPU (octo_kernel_cases check-gpu: y, dx, weight gradients);
#   2. float32 gradient equivalence of --backend=cuda with the CPU backend on several schedules
#      (--check compares a step with the sequential reference that the cpu backend matches bit
#      for bit; the losses of three steps of both backends are printed side by side), then the
#      same check at the real size (--scale=1) on the GPU;
#   3. the example models' layers profiled at full size on the GPU (octo-run --profile on the cuda
#      backend: the runtime's own kernels) against the analytic cost model (measured / analytic
#      per kind for F, B and W);
#   4. a plan run with --backend=cuda: its step time, the compute time of all ranks on the GPU,
#      the executor's overhead, and the simulator's prediction of the plan's total compute;
#   5. the nccl backend with one rank, as a smoke test.
# usage: bench/gpu_check.sh [BUILD_DIR]   (default build-gpu; prints figures, exit 0 unless the
#        build fails; without a visible GPU it prints that it skipped and exits 0 at once)
# On the lent H200 machine, whose image has CUDA, CMake and MPI but not the Debian build
# dependencies, first run bench/gpu_deps.sh here: it says what to carry and run there.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build-gpu}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
say() { printf '\n== %s\n' "$*"; }

# Without a visible GPU there is nothing to measure: say so and stop before building.
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpu_check.sh: no GPU visible (nvidia-smi -L fails): skipped"
  exit 0
fi
say "build ($BUILD)"
nvidia-smi -L 2>&1 | head -4
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > "$T/cmake.log" 2>&1 || { cat "$T/cmake.log"; exit 1; }
grep -E "CUDA|MPI|NCCL" "$T/cmake.log"
make -C "$BUILD" -j"$(nproc)" > "$T/make.log" 2>&1 || { tail -40 "$T/make.log"; exit 1; }
echo "built"
PATH=$BUILD/tools:$PATH
export PATH

say "1. GPU tests (at most 60 s a test and 240 s in all, so that the later sections run)"
timeout 240 python3 /usr/lib/llvm-14/build/utils/lit/lit.py -sv --timeout=60 "$BUILD/tests" \
  --filter 'gpu|cuda' > "$T/lit.log" 2>&1 || echo "lit: exit $? (124: the 240 s ran out)"
grep -E '^(FAIL|TIMEOUT|UNRESOLVED|XPASS):' "$T/lit.log"
tail -8 "$T/lit.log"
[ -x "$BUILD/tests/gpu/octo_gpu_tests" ] && timeout 120 "$BUILD/tests/gpu/octo_gpu_tests" 2>&1 | tail -15

say "1b. every layer kind's kernels on the GPU against the CPU (same weights; float32, then bf16 GEMM inputs)"
"$BUILD/tests/unit/octo_kernel_cases" check-gpu 2>&1
"$BUILD/tests/unit/octo_kernel_cases" check-gpu --bf16 2>&1 | tail -1

say "2. float32 equivalence: --backend=cuda vs cpu (--check of step 1 against the sequential run; losses of 3 steps)"
spec=$SRC/tests/runtime/Inputs/hetero.octo
printf '%-12s %-10s %-34s %s\n' schedule backend "loss step 1 .. 3" "check (step 1)"
for name in 1f1b zb-h1 interleaved zbv adaptive; do
  case $name in
    interleaved) p='cost,partition{method=uniform, chunks=2},place{method=interleaved},schedule{method=interleaved-1f1b}' ;;
    zbv) p='cost,partition{method=balanced, chunks=2},place{method=vshape},schedule{method=zbv}' ;;
    adaptive) p='cost,partition{method=balanced, chunks=2},place{method=interleaved},schedule{method=adaptive}' ;;
    *) p="cost,partition{method=balanced},place,schedule{method=$name}" ;;
  esac
  octoc "$spec" --passes="$p" --emit=stream -o "$T/$name.ois" || continue
  for b in cpu cuda; do
    timeout 120 octo-run "$T/$name.ois" --backend=$b --steps=1 --check --scale=16 > "$T/$name.$b" 2>&1
    rc=$?
    timeout 120 octo-run "$T/$name.ois" --backend=$b --steps=3 --scale=16 > "$T/$name.$b.3" 2>&1
    losses=$(awk '/^step/ {sub(",", "", $6); printf "%s ", $6}' "$T/$name.$b.3")
    printf '%-12s %-10s %-34s %s\n' "$name" "$b" "$losses" "$( [ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)")"
    [ $rc -ne 0 ] && tail -5 "$T/$name.$b"
  done
done

say "2b. the real size on the GPU: --check of step 1 (against the CPU's sequential reference) per schedule"
for name in 1f1b zb-h1 zbv adaptive; do
  [ -f "$T/$name.ois" ] || continue
  timeout 90 octo-run "$T/$name.ois" --backend=cuda --steps=1 --check --scale=1 > "$T/$name.real" 2>&1
  rc=$?
  printf '%-12s %s\n' "$name" "$( [ $rc -eq 0 ] && grep -m1 -E '^check|gradient' "$T/$name.real" || echo "FAILED (exit $rc)")"
  [ $rc -ne 0 ] && tail -5 "$T/$name.real"
done

say "3. layer kinds at full size: measured (octo-run --profile on the cuda backend, bf16) vs analytic"
printf '%-14s %-10s %9s %9s %9s %9s %9s %9s %7s %7s %7s\n' model kind "F meas" "B meas" "W meas" \
  "F model" "B model" "W model" "F x" "B x" "W x"
for ex in llama3_8b gemma2_2b nemotron_h_8b; do
  octoc "$SRC/examples/$ex.octo" --passes='cost,partition{method=balanced},place,schedule{method=1f1b}' \
    --emit=stream -o "$T/$ex.ois" 2>/dev/null || continue
  octoc "$SRC/examples/$ex.octo" --passes='cost,partition{method=balanced},place,schedule{method=1f1b},simulate' \
    > "$T/$ex.report" 2>/dev/null
  timeout 300 octo-run "$T/$ex.ois" --backend=cuda --bf16 --scale=1 --profile="$T/$ex.json" \
    > "$T/$ex.prof" 2>&1 || { tail -3 "$T/$ex.prof"; continue; }
  # measured: the profile's layers by kind (the first of each); analytic: the report's
  # "costs per layer kind" table (kind, [type,] layers, F, B, W in ms).
  python3 - "$ex" "$T/$ex.json" "$T/$ex.report" <<'PY'
import json, sys
ex, prof, report = sys.argv[1:4]
meas = {}
for name, l in json.load(open(prof))["layers"].items():
    meas.setdefault(l["shape"]["kind"], (l["f_ms"], l["b_ms"], l["w_ms"]))
on = False
for line in open(report):
    if line.startswith("costs per layer kind"):
        on = True
        continue
    if on and not line.strip():
        break
    f = line.split()
    k = 2 if len(f) > 1 and f[1].isdigit() else 3  # a "type" column on mixed clusters
    if on and f and f[0] in meas and len(f) >= k + 3:
        m, a = meas[f[0]], [float(x) for x in f[k:k + 3]]
        r = [m[k] / a[k] if a[k] > 0 else 0 for k in range(3)]
        print("%-14s %-10s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %7.2f %7.2f %7.2f"
              % (ex, f[0], *m, *a, *r))
PY
done

say "4. a plan on one GPU (--backend=cuda, bf16, full size): step time vs compute"
octoc "$spec" --passes='cost,partition{method=balanced},place,schedule{method=1f1b},simulate' \
  --report=json > "$T/plan.json" 2>/dev/null
octoc "$spec" --passes='cost,partition{method=balanced},place,schedule{method=1f1b}' \
  --emit=stream -o "$T/plan.ois"
timeout 120 octo-run "$T/plan.ois" --backend=cuda --bf16 --scale=1 --steps=5 > "$T/plan.out" 2>&1
tail -8 "$T/plan.out"
awk '/^step/ && ++k > 1 { t += $3; n++ } /^rank/ { busy += $4 }
  END { if (n) printf "measured: %.3f ms per step (steps 2-5); the ranks compute %.3f ms per step in all: overhead %.1f%%\n",
    t / n, busy / (n + 1), 100 * (t / n / (busy / (n + 1)) - 1) }' "$T/plan.out"
python3 - "$T/plan.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
busy = sum(d.get("busy_ms", 0) for d in r.get("per_device", []))
print("simulator: the plan's compute on one device would take %.3f ms per step (sum of the "
      "devices' busy time; makespan on its %d devices %.3f ms)" %
      (busy, len(r.get("per_device", [])), r.get("makespan_ms", 0)))
EOF

say "5. nccl backend, one rank (smoke test)"
sed -e 's/pipeline = 4/pipeline = 1/' -e 's/gpus_per_node = 4/gpus_per_node = 1/' "$spec" > "$T/one.octo"
octoc "$T/one.octo" --passes='cost,partition{method=balanced},place,schedule{method=1f1b}' \
  --emit=stream -o "$T/one.ois" && \
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 octo-run "$T/one.ois" --backend=nccl \
  --steps=3 --check 2>&1 | tail -6
exit 0

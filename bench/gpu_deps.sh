#!/bin/sh
# gpu_deps.sh -- prepare a run of bench/gpu_check.sh on the lent GPU machine (the device tool's
# H200), whose image (Ubuntu 24.04, CUDA 13, CMake, MPI, NCCL) lacks what the build needs from
# Debian: flex, bison and m4, cJSON, OpenBLAS, zlib's headers, and llvm-14-tools' FileCheck and
# lit. It downloads those packages here (apt-get download, no install) into .gpudeps/, which git
# ignores, and prints the device command that unpacks them there and runs the check. Carry
# ".gpudeps" with the run; give it timeout_s=600.
# usage: bench/gpu_deps.sh   (from anywhere in the checkout)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.gpudeps"
grep -qx '/.gpudeps/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpudeps/' >> "$root/.git/info/exclude"
cd "$root/.gpudeps"
apt-get download flex bison m4 libfl2 libfl-dev libcjson1 libcjson-dev libopenblas0-pthread \
  libopenblas-pthread-dev libopenblas-dev libgfortran5 zlib1g-dev libz3-4 llvm-14-tools
du -sh "$root/.gpudeps"
# There: unpack into a side folder and copy without replacing the image's own files; OpenBLAS is
# found through its pthread folder (Debian's alternatives links are not unpacked); warnings are
# not errors (the image's GCC 13 warns where Debian's GCC 12, which CI uses, does not).
cat <<'CMD'
device command (carry [".gpudeps"], timeout_s 600):
S=/tmp/dx; mkdir -p $S; for f in .gpudeps/*.deb; do dpkg -x "$f" $S; done; cp -an $S/usr/. /usr/ 2>/dev/null; export CMAKE_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread CMAKE_INCLUDE_PATH=/usr/include/x86_64-linux-gnu/openblas-pthread LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-} CFLAGS=-Wno-error; bash bench/gpu_check.sh $PWD/build-gpu 2>&1 | tee $OUT/gpu_check.txt
CMD

#!/bin/sh
# bootstrap.sh -- one-stop set-up for a fresh Debian machine: installs the build and test
# dependencies that are missing (apt-get), configures and builds OctoPipe, then runs the
# requested job.
#
#   scripts/bootstrap.sh example [SPEC]   build, then plan SPEC (default: the Nemotron-H
#                                          example) and print its report and the classic plans
#   scripts/bootstrap.sh test              build, run the whole test suite, then build again
#                                          with AddressSanitizer + UBSan and run it once more;
#                                          where clang is, build the fuzzers (-DOCTO_FUZZ=ON)
#                                          and run each for 10 s (tests/fuzz/smoke-*.test)
#   scripts/bootstrap.sh build             only install and build
#   scripts/bootstrap.sh packages          print the packages that would be installed, no more
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
job=${1:-example}
build="$root/build"
jobs=$(nproc 2>/dev/null || echo 2)

# Debian packages the build and the tests need. Whether one is there is asked of dpkg, never
# guessed from a file: another package may provide the same header (libblas-dev ships a cblas.h,
# but the runtime links OpenBLAS).
need="cmake gcc make flex bison python3 llvm-14-tools libcjson-dev zlib1g-dev openmpi-bin
libopenmpi-dev libopenblas-dev"

# missing_packages: prints, on one line, the packages of $need that dpkg does not report as
# installed. $OCTO_DPKG_QUERY replaces dpkg-query (the unit test's stand-in).
missing_packages() {
  query=${OCTO_DPKG_QUERY:-dpkg-query}
  out=""
  for pkg in $need; do
    status=$($query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "installed" ] || out="$out $pkg"
  done
  echo "$out"
}

if [ "$job" = packages ]; then
  missing_packages
  exit 0
fi

missing=$(missing_packages)
if [ -n "$missing" ]; then
  echo "bootstrap: installing$missing"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

configure_and_build() { # $1: build dir, $2...: extra cmake arguments
  dir=$1
  shift
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

lit() { # $1: build dir
  python3 /usr/lib/llvm-14/build/utils/lit/lit.py -sv "$1/tests"
}

case "$job" in
build)
  configure_and_build "$build"
  ;;
example)
  configure_and_build "$build"
  spec=${2:-"$root/examples/nemotron_h_8b.octo"}
  "$build/tools/octoc" "$spec" --compare
  ;;
test)
  configure_and_build "$build"
  lit "$build"
  configure_and_build "$root/build-asan" -DOCTO_SANITIZE=address,undefined
  lit "$root/build-asan"
  if command -v clang >/dev/null 2>&1; then
    # only what the fuzzers' smoke runs need: the harnesses and octoc (seed streams)
    CC=clang cmake -S "$root" -B "$root/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DOCTO_FUZZ=ON -DOCTO_WITH_CUDA=OFF >/dev/null
    cmake --build "$root/build-fuzz" -j "$jobs" --target octoc fuzzers
    python3 /usr/lib/llvm-14/build/utils/lit/lit.py -sv "$root/build-fuzz/tests/fuzz"
  else
    echo "bootstrap: clang not found: the fuzzers' smoke runs are skipped"
  fi
  ;;
*)
  echo "usage: scripts/bootstrap.sh example [SPEC] | test | build | packages" >&2
  exit 1
  ;;
esac

#!/bin/sh
# fresh-check.sh -- runs the README's two set-up commands (scripts/bootstrap.sh example, then
# scripts/bootstrap.sh test) in a minimal Debian made with debootstrap, on the committed tree, as
# CI would on a fresh machine: every package the project needs must come from bootstrap.sh itself.
#
#   scripts/fresh-check.sh [--keep] [--preinstall "PKG ..."] [--suite SUITE] [DIR]
#
#   DIR           where the chroot is made (default: a new directory under /var/tmp); removed at
#                 the end unless --keep, or unless DIR already held a chroot (then it is reused:
#                 debootstrap is skipped, the source tree is laid anew)
#   --preinstall  packages installed before the check, as a machine image may ship them
#                 (default: "libblas-dev", the reference BLAS of this project's machines, whose
#                 cblas.h once hid a missing libopenblas-dev; "" for a bare minimal Debian)
#   --suite       the Debian release (default: the host's, from /etc/os-release)
#   --job JOB     run only one of the two commands (example or test)
#
# Needs root and debootstrap (apt-get install debootstrap); the mirror is the host's first
# deb.debian.org-style source. The chroot's mounts live in a private mount namespace (unshare), so
# nothing is left mounted whatever happens. Exit status: that of the first command that failed.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
keep=0
preinstall="libblas-dev"
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
dir=""
jobs_to_run="example test"
while [ $# -gt 0 ]; do
  case "$1" in
  --keep) keep=1 ;;
  --preinstall) preinstall=$2; shift ;;
  --suite) suite=$2; shift ;;
  --job) jobs_to_run=$2; shift ;;
  -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
  -*) echo "fresh-check: unknown option '$1' (see --help)" >&2; exit 1 ;;
  *) dir=$1 ;;
  esac
  shift
done

[ "$(id -u)" -eq 0 ] || { echo "fresh-check: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null 2>&1 ||
  { echo "fresh-check: debootstrap not found: apt-get install debootstrap" >&2; exit 1; }

# The mirror the host itself uses (its deb822 or one-line sources), else Debian's.
mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk 'NR == 1 { print $2 }')
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

if [ -z "$dir" ]; then
  dir=$(mktemp -d /var/tmp/octo-fresh.XXXXXX)
fi
[ -x "$dir/bin/sh" ] && keep=1 # a chroot the user made stays
cleanup() {
  [ "$keep" -eq 1 ] || rm -rf --one-file-system "$dir"
}
trap cleanup EXIT

start=$(date +%s)
if [ ! -x "$dir/bin/sh" ]; then
  echo "fresh-check: debootstrap --variant=minbase $suite into $dir ($mirror)"
  debootstrap --variant=minbase "$suite" "$dir" "$mirror" >"$dir.debootstrap.log" 2>&1 ||
    { tail -20 "$dir.debootstrap.log" >&2; echo "fresh-check: debootstrap failed" >&2; exit 1; }
  rm -f "$dir.debootstrap.log"
fi
cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true

# The committed tree, as CI's clean checkout has it (uncommitted changes are not checked).
rm -rf "$dir/src"
mkdir -p "$dir/src"
git -C "$root" archive HEAD | tar -x -C "$dir/src"
echo "fresh-check: $(git -C "$root" log -1 --format='%h %s' | cut -c1-80)"

# Inside: the pre-installed packages, then the README's commands, each timed.
cat >"$dir/fresh-run.sh" <<EOF
#!/bin/sh
set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 HOME=/root
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if [ -n "$preinstall" ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $preinstall >/dev/null
  echo "fresh-check: pre-installed $preinstall"
fi
cd /src
for job in $jobs_to_run; do
  t0=\$(date +%s)
  echo "fresh-check: scripts/bootstrap.sh \$job"
  if [ "\$job" = example ]; then
    scripts/bootstrap.sh example >/tmp/example.out 2>&1 || { tail -30 /tmp/example.out; exit 1; }
    grep -E 'predicted|step' /tmp/example.out | head -3
  else
    scripts/bootstrap.sh test
  fi
  echo "fresh-check: scripts/bootstrap.sh \$job passed in \$((\$(date +%s) - t0)) s"
done
EOF
chmod +x "$dir/fresh-run.sh"

unshare --mount --propagation private sh -c '
  d=$1
  mount -t proc proc "$d/proc"
  mount -t sysfs sysfs "$d/sys"
  mount --bind /dev "$d/dev"
  mount -t devpts devpts "$d/dev/pts" -o newinstance,ptmxmode=0666 2>/dev/null || true
  mount -t tmpfs tmpfs "$d/dev/shm"
  mount -t tmpfs tmpfs "$d/tmp"
  exec chroot "$d" /fresh-run.sh' sh "$dir"
echo "fresh-check: passed in $(($(date +%s) - start)) s ($suite, pre-installed: ${preinstall:-nothing})"

#!/usr/bin/env bash
# Runs the README's quick start the way a new user's machine would: a freshly bootstrapped Debian 12 with
# only git and make added, a clean clone of this repository's HEAD, and `make <target>` inside it as root.
# A green CI can hide a missing install step (CI runs on a machine that earlier work already set up); this
# cannot. Run it from the project's root after changing scripts/setup.sh, CMakeLists.txt or the Makefile.
#
# Usage: scripts/fresh-machine-check.sh [TARGET...]      (default: test; e.g. `demo`, `test demo`)
# Env:   FRESH_DIR   where the Debian base is cached and the throwaway machine is made (default /var/tmp/zaya-fresh)
#        FRESH_KEEP=1 keeps the throwaway machine for a look afterwards (remove it with `rm -rf` once done).
# Needs root, debootstrap (apt-get install debootstrap) and ~4 GB of disk. The first run spends ~1 min
# making the base; every run then spends what the target costs from nothing (packages, build, tests).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "fresh-machine-check: needs root (chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh-machine-check: apt-get install debootstrap first" >&2; exit 2; }
git rev-parse --show-toplevel >/dev/null 2>&1 || { echo "fresh-machine-check: run it inside the project's repository" >&2; exit 2; }
targets=("${@:-test}")
dir=${FRESH_DIR:-/var/tmp/zaya-fresh}
base=$dir/debian12-base.tar
mirror=$(sed -n 's/^URIs: *\([^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null)}
[ -n "$mirror" ] || { echo "fresh-machine-check: no Debian mirror found in this machine's apt sources" >&2; exit 2; }
mkdir -p "$dir"

if [ ! -s "$base" ]; then  # the pristine machine: Debian 12 minbase, what apt needs, git and make
  staging=$dir/base-staging
  rm -rf "$staging"
  echo "fresh-machine-check: bootstrapping Debian 12 into $staging (once)"
  debootstrap --variant=minbase --include=git,make,ca-certificates bookworm "$staging" "$mirror" >"$dir/debootstrap.log" 2>&1 \
    || { tail -5 "$dir/debootstrap.log"; exit 1; }
  security=${mirror%/debian}/debian-security
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
    "$mirror" "$mirror" "$security" >"$staging/etc/apt/sources.list"
  tar -C "$staging" -cf "$base.tmp" . && mv "$base.tmp" "$base"
  rm -rf "$staging"
fi

machine=$(mktemp -d "$dir/machine.XXXXXX")
cleanup() {
  if findmnt -rn -o TARGET | grep -q "^$machine/"; then
    echo "fresh-machine-check: $machine still has mounts; not removing it" >&2
  elif [ "${FRESH_KEEP:-0}" != 1 ]; then
    rm -rf "$machine"
  fi
}
trap cleanup EXIT
tar -C "$machine" -xf "$base"
cp /etc/resolv.conf "$machine/etc/resolv.conf"
git clone -q "$(git rev-parse --show-toplevel)" "$machine/root/project"
log=$dir/last-run.log
echo "fresh-machine-check: make ${targets[*]} on a fresh Debian 12 (log: $log)"
start=$(date +%s)
set +e
# A private mount namespace: the mounts vanish with it, whatever happens to this script.
unshare --mount --propagation private bash -c '
  set -e
  m=$1; shift
  mount -t proc proc "$m/proc"
  mount --rbind /dev "$m/dev"
  mount --rbind /sys "$m/sys"
  mount -t tmpfs tmpfs "$m/tmp"
  chroot "$m" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    TERM=dumb LANG=C.UTF-8 CI=true bash -c "cd /root/project && make $*"
' fresh "$machine" "${targets[@]}" >"$log" 2>&1
status=$?
set -e
secs=$(( $(date +%s) - start ))
if [ $status -eq 0 ]; then
  echo "fresh-machine-check: make ${targets[*]} passed on a fresh Debian 12 in ${secs}s; last line: $(tail -1 "$log")"
else
  echo "fresh-machine-check: make ${targets[*]} FAILED (exit $status) after ${secs}s on a fresh Debian 12; the log's end:"
  tail -15 "$log"
fi
exit $status

#!/usr/bin/env bash
# Runs a command of this checkout inside a Debian 13 (trixie) root made with debootstrap, so
# that a Debian 12 machine (CI, a developer's) can build and test kcert against Debian 13's
# LibTorch 2.6, libpqxx 7.10, Catch2 3, yaml-cpp 0.8 and PostgreSQL 17.
#
#   scripts/in-debian13.sh                      # the README test command: scripts/test.sh
#   scripts/in-debian13.sh scripts/test.sh -L stats
#   scripts/in-debian13.sh --fresh              # remake the root first
#   scripts/in-debian13.sh --shell              # an interactive shell in the root
#
# The checkout is mounted at /kcert inside the root and builds into build-debian13/ (beside
# build/ of the host). The root is kept in $KCERT_DEBIAN13_ROOT (default
# /var/tmp/kcert-debian13) and reused while it is complete; a machine without one makes it
# (about a minute, plus the packages scripts/install-deps.sh installs inside it). Nothing
# depends on the cache: delete it, or pass --fresh, and the next run makes it again.
# /proc, /sys, /dev, /dev/pts, /dev/shm and the checkout are mounted for the command and
# unmounted on every exit path (success, failure, Ctrl-C), after stopping any process the
# command left running inside the root.
#
# Needs root (chroot, mount) and debootstrap; the mirror is $KCERT_DEBIAN_MIRROR
# (default http://deb.debian.org/debian).
set -euo pipefail

ROOT_DIR=${KCERT_DEBIAN13_ROOT:-/var/tmp/kcert-debian13}
MIRROR=${KCERT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MARK=.kcert-root-complete

fresh=0
shell=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --fresh) fresh=1; shift ;;
    --shell) shell=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
if [[ $# -eq 0 ]]; then
  set -- scripts/test.sh
fi

say() { echo "in-debian13: $*" >&2; }
[[ $(id -u) -eq 0 ]] || { say "needs root (debootstrap, chroot and mount); run it with sudo"; exit 2; }
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap; }
fi

# ---- the root: made once, reused while complete ----
if [[ $fresh -eq 1 && -d $ROOT_DIR ]]; then
  say "removing $ROOT_DIR (--fresh)"
  rm -rf --one-file-system "$ROOT_DIR"
fi
if [[ ! -f $ROOT_DIR/$MARK ]]; then
  # Made beside and renamed when whole: an interrupted debootstrap is never reused.
  rm -rf --one-file-system "$ROOT_DIR.partial" "$ROOT_DIR"
  say "making a Debian 13 root in $ROOT_DIR from $MIRROR"
  start=$(date +%s)
  debootstrap --variant=minbase trixie "$ROOT_DIR.partial" "$MIRROR" >"$ROOT_DIR.debootstrap.log" 2>&1 ||
    { tail -20 "$ROOT_DIR.debootstrap.log" >&2; say "debootstrap failed (log: $ROOT_DIR.debootstrap.log)"; exit 2; }
  # Packages installed in a chroot must not start services on the host's init.
  printf '#!/bin/sh\nexit 101\n' >"$ROOT_DIR.partial/usr/sbin/policy-rc.d"
  chmod 755 "$ROOT_DIR.partial/usr/sbin/policy-rc.d"
  mkdir -p "$ROOT_DIR.partial/kcert"
  touch "$ROOT_DIR.partial/$MARK"
  mv "$ROOT_DIR.partial" "$ROOT_DIR"
  say "root made in $(( $(date +%s) - start )) s"
fi
# Name resolution as on the host: DNS for apt, and this machine's own name (Slurm's local
# cluster resolves its node by hostname; a fresh root's /etc/hosts lacks it).
cp -L /etc/resolv.conf "$ROOT_DIR/etc/resolv.conf"
cp -L /etc/hosts "$ROOT_DIR/etc/hosts"

# ---- mounts, undone on every exit path ----
mounted=()
mount_in() {  # mount_in TARGET MOUNT-ARGS...
  local target=$ROOT_DIR$1
  shift
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  # Processes the command left behind inside the root (a test's PostgreSQL, slurmd, a
  # browser) keep the mounts busy: stop them first.
  local pid left=()
  for pid in /proc/[0-9]*; do
    [[ $(readlink "$pid/root" 2>/dev/null) == "$ROOT_DIR" ]] && left+=("${pid#/proc/}")
  done
  if ((${#left[@]})); then
    say "stopping ${#left[@]} process(es) left in the root"
    kill -TERM "${left[@]}" 2>/dev/null || true
    sleep 2
    kill -KILL "${left[@]}" 2>/dev/null || true
  fi
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || say "could not unmount ${mounted[i]}"
  done
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mount_in /proc -t proc proc
mount_in /sys -t sysfs sysfs
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts
mount_in /dev/shm -t tmpfs -o mode=1777 shm
mount_in /kcert --bind "$SRC"

# ---- the command ----
# Without debug info and benchmarks: the Debian 13 build (LibTorch 2.6, gcc 14) is the
# longest step of CI, and neither is needed to run the tests. KCERT_CMAKE_ARGS overrides.
env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
     TERM="${TERM:-dumb}" KCERT_BUILD_DIR=/kcert/build-debian13
     KCERT_CMAKE_ARGS="${KCERT_CMAKE_ARGS:--DKCERT_DEBUG_INFO=OFF -DKCERT_BUILD_BENCHMARKS=OFF}")
[[ -n ${KCERT_JOBS:-} ]] && env+=(KCERT_JOBS="$KCERT_JOBS")
if [[ $shell -eq 1 ]]; then
  chroot "$ROOT_DIR" /usr/bin/env -i "${env[@]}" bash -c 'cd /kcert && exec bash -i'
else
  say "running '$*' in $(. "$ROOT_DIR/etc/os-release"; echo "$PRETTY_NAME")"
  chroot "$ROOT_DIR" /usr/bin/env -i "${env[@]}" bash -c 'cd /kcert && exec "$@"' _ "$@"
fi

#!/usr/bin/env bash
# Cold and warm build times of kcert, as CI builds it (docs/benchmarks.md, "Build time").
#
#   bench/build-time.sh [SRC] [CMAKE-ARGS...]
#
#   SRC         a kcert checkout (default: this one); a worktree of an older commit measures
#               "before": git worktree add /var/tmp/kcert-before COMMIT
#   CMAKE-ARGS  extra configure options, e.g. the PyPI torch's (scripts/torch-source.sh) or
#               -DKCERT_BUILD_BENCHMARKS=OFF; without debug info, as scripts/test.sh builds
#               (since stop 67), unless they say -DKCERT_DEBUG_INFO=ON (the figures before it)
#
# cold: a fresh build folder and an empty private ccache: every translation unit compiles
#       (ccache only stores; its lookups all miss), as on a fresh CI machine.
# warm: another fresh build folder with that ccache: what rebuilding unchanged sources costs
#       on the same machine (ccache hits; linking, the precompiled headers' checks and the
#       man pages still run).
# one-file: in that folder, one source touched (a family file, then the engine): what an edit of
#       one translation unit costs, its compilation and the links that follow.
# Prints one line per build: seconds, build steps, ccache hits. Needs a quiet machine.
set -euo pipefail
SRC=$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)
shift || true
work=$(mktemp -d /var/tmp/kcert-build-time.XXXXXX)
trap 'rm -rf "$work"' EXIT
export CCACHE_DIR=$work/ccache CCACHE_MAXSIZE=20G
# Both builds in the same folder: with debug info ccache hashes the working directory, so a
# warm build elsewhere would miss every entry.
build_once() {
  local name=$1 dir=$work/build
  ccache -z >/dev/null
  local t0
  t0=$(date +%s.%N)
  cmake -S "$SRC" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKCERT_DEBUG_INFO=OFF "$@" >"$work/$name.configure.log" 2>&1 ||
    { tail -20 "$work/$name.configure.log"; exit 1; }
  cmake --build "$dir" --parallel "$(nproc)" >"$work/$name.build.log" 2>&1 || { tail -20 "$work/$name.build.log"; exit 1; }
  local t1 steps hits
  t1=$(date +%s.%N)
  steps=$(grep -c '^\[' "$work/$name.build.log" || true)
  hits=$(ccache -s 2>/dev/null | awk '/Hits:/ {print $2 "/" $4; exit}')
  printf '%-5s %7.1f s  %4d steps  ccache hits %s  (%s)\n' "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$steps" "${hits:-?}" "$SRC"
}
build_once cold "$@"
rm -rf "$work/build"
build_once warm "$@"
# ccache would answer a touched file from its cache; an edit is a miss.
one_file() {
  local file=$1 t0 t1 steps
  touch "$SRC/$file"
  t0=$(date +%s.%N)
  CCACHE_DISABLE=1 cmake --build "$work/build" --parallel "$(nproc)" >"$work/one-file.build.log" 2>&1 ||
    { tail -20 "$work/one-file.build.log"; exit 1; }
  t1=$(date +%s.%N)
  steps=$(grep -c '^\[' "$work/one-file.build.log" || true)
  printf '%-5s %7.1f s  %4d steps  touched %s\n' "edit" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$steps" "$file"
}
one_file harness/kernels/families/rmsnorm.cpp
one_file harness/engine/engine.cpp

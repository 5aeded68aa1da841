#!/usr/bin/env bash
# The test command of the README. On a fresh Debian 12 machine: installs what is missing,
# configures, builds and runs the whole CTest suite. Exits non-zero on any failure.
#
#   scripts/test.sh                 # everything, against Debian's LibTorch, in build/
#   KCERT_TORCH=pypi scripts/test.sh           # against PyPI's newest torch, in build-pypi-VERSION/
#   KCERT_TORCH=pypi=2.11.0 scripts/test.sh    # against a pinned torch release
#   KCERT_BUILD_DIR=out scripts/test.sh -R stats   # extra arguments go to ctest
#   scripts/test.sh --quick         # the developer loop: everything but the end-to-end runs
#                                   # (CTest label `slow`), a few minutes after a build
#   (--quick is ctest's -LE slow: with another -LE of yours, CTest excludes only the tests that
#   match both, so give one -LE with both, e.g. -LE '^(slow|stats)$', instead of --quick)
set -euo pipefail

quick=()
if [[ ${1:-} == --quick ]]; then
  quick=(-LE slow)
  shift
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="${KCERT_JOBS:-$(nproc)}"

"$ROOT/scripts/install-deps.sh" --tests
. "$ROOT/scripts/torch-source.sh"
kcert_torch_select
BUILD="${KCERT_BUILD_DIR:-$ROOT/$KCERT_TORCH_BUILD}"

start=$(date +%s)
# KCERT_CMAKE_ARGS: extra configure options, split on spaces (scripts/in-debian13.sh sets them),
# after the defaults, so they win. No debug info by default: the tests do not need it and -g
# costs a LibTorch translation unit about half its compile time again (docs/benchmarks.md,
# "Build time"); KCERT_CMAKE_ARGS=-DKCERT_DEBUG_INFO=ON builds a tree to debug in.
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKCERT_DEBUG_INFO=OFF "${KCERT_TORCH_CMAKE_ARGS[@]}" ${KCERT_CMAKE_ARGS:-}
cmake --build "$BUILD" --parallel "$JOBS"
echo "test.sh: build took $(( $(date +%s) - start )) s"

cd "$BUILD"
start=$(date +%s)
ctest --output-on-failure --parallel "$JOBS" "${quick[@]}" "$@"
echo "test.sh: tests took $(( $(date +%s) - start )) s${quick:+ (--quick: the end-to-end runs, label slow, left out)}"

#!/usr/bin/env bash
# The test command of the README. On a fresh Debian 12 machine: installs what is missing,
# configures, builds and runs the whole CTest suite. Exits non-zero on any failure.
#
#   scripts/test.sh                 # everything
#   KCERT_BUILD_DIR=out scripts/test.sh -R stats   # extra arguments go to ctest
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${KCERT_BUILD_DIR:-$ROOT/build}"
JOBS="${KCERT_JOBS:-$(nproc)}"

"$ROOT/scripts/install-deps.sh" --tests

start=$(date +%s)
# KCERT_CMAKE_ARGS: extra configure options, split on spaces (scripts/in-debian13.sh sets them).
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${KCERT_CMAKE_ARGS:-}
cmake --build "$BUILD" --parallel "$JOBS"
echo "test.sh: build took $(( $(date +%s) - start )) s"

cd "$BUILD"
ctest --output-on-failure --parallel "$JOBS" "$@"

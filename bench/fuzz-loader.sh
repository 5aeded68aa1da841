#!/usr/bin/env bash
# Fuzzes the case loader with libFuzzer under ASan/UBSan for a bounded time (not part of CI:
# the build alone takes ~15 min on 2 cores). Seeds: every control, every golden input and
# tests/fuzz/corpus (aliases; CTest fuzz_loader_corpus replays them all without libFuzzer).
#   bench/fuzz-loader.sh [SECONDS (default 600)] [BUILD_DIR (default build-fuzz)] [GCC_BUILD (default build)]
# Only the loader (with the schema checks and the file reader) is built with clang; the family
# schemas come from GCC_BUILD/libkcert.so.
# Exit 0: no crash, no sanitizer report, no exception other than LoadError. A finding is left
# as BUILD_DIR/crash-* (or leak-*, timeout-*): add it to tests/cli/golden/inputs with a test.
set -euo pipefail
seconds=${1:-600}
build=${2:-build-fuzz}
core_build=${3:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
command -v clang++ >/dev/null || { echo "needs clang++ and libFuzzer (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
core=$(cd "$src" && realpath "$core_build")/libkcert.so
[[ -f $core ]] || { echo "build kcert first (cmake --build $core_build): $core is missing" >&2; exit 2; }
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DKCERT_FUZZ=ON -DKCERT_FUZZ_CORE="$core" \
  -DKCERT_BUILD_TESTS=OFF -DKCERT_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target kcert_fuzz_loader
corpus="$build/corpus"
mkdir -p "$corpus"
find "$src/testcases" "$src/tests/cli/golden/inputs" "$src/tests/fuzz/corpus" -name '*.yaml' -exec cp {} "$corpus/" \;
cd "$build"
# LibTorch is not built with ASan: its allocations at exit are not this loader's leaks.
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ./kcert_fuzz_loader -max_total_time="$seconds" -max_len=8192 -timeout=10 -print_final_stats=1 corpus

#!/usr/bin/env bash
# Does a second intra-op thread help or hurt, idle and with one competing busy process, with
# kcert's thread policy (OMP_WAIT_POLICY=passive, one OpenBLAS thread; the default) and
# without it (KCERT_NO_REEXEC=1: libgomp spins, OpenBLAS runs a thread per core)? Prints wall
# seconds per cell and the ratio 2 threads / 1 thread, all from one run (issue 17).
#   bench/threads-under-load.sh [KCERT_BINARY] [CASE.yaml ...]
set -euo pipefail
kcert=${1:-build/kcert}
shift || true
src=$(cd "$(dirname "$0")/.." && pwd)
cases=("$@")
# BENCH_PROFILE=smoke (default) or "" for contract shapes.
profile=()
[[ -n ${BENCH_PROFILE-smoke} ]] && profile=(--profile "${BENCH_PROFILE-smoke}")
[[ ${#cases[@]} -gt 0 ]] || cases=("$src/testcases/positive/linear/real_matmul_long_k.yaml"
                                   "$src/testcases/negative/rmsnorm/n1_gemma_rmsnorm_offset_bf16.yaml")
wall() {  # wall seconds of one smoke run
  local start end
  start=$(date +%s.%N)
  env "$@" >/dev/null 2>&1 || true
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
printf '%-28s %-10s %-6s %9s %9s %7s\n' case policy load "1 thread" "2 threads" "2 / 1"
for c in "${cases[@]}"; do
  for policy in kcert none; do
    for load in idle busy; do
      pid=""
      if [[ $load == busy ]]; then
        # One competing process that keeps one core busy, as another CI job would.
        ( while :; do :; done ) &
        pid=$!
      fi
      extra=()
      [[ $policy == none ]] && extra=(KCERT_NO_REEXEC=1)
      t1=$(wall "${extra[@]}" "$kcert" run "$c" "${profile[@]}" --quiet --brief --threads 1)
      t2=$(wall "${extra[@]}" "$kcert" run "$c" "${profile[@]}" --quiet --brief --threads 2)
      [[ -n $pid ]] && kill "$pid" && wait "$pid" 2>/dev/null || true
      printf '%-28s %-10s %-6s %9.2f %9.2f %7.2f\n' "$(basename "$c" .yaml | cut -c1-28)" "$policy" "$load" "$t1" "$t2" \
        "$(echo "$t2 / $t1" | bc -l)"
    done
  done
done

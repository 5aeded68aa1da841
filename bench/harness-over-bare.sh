#!/usr/bin/env bash
# Harness time over bare kernel time (bench_engine) for a set of controls, one table from one
# run: the issue 17 aim is <= 1.15 on the RMSNorm controls. Contract shapes, R replicates
# each (the same on both sides), medians of REPS interleaved repetitions.
#   bench/harness-over-bare.sh [BENCH_ENGINE] [CASE.yaml ...]
#   R=256 REPS=5 (defaults: three repetitions left a cold first one in the median of the
#   controls under 0.1 s); with no cases, every RMSNorm and residual-RMSNorm control.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bench=${1:-$src/build/bench/bench_engine}
shift || true
cases=("$@")
[[ ${#cases[@]} -gt 0 ]] || mapfile -t cases < <(ls "$src"/testcases/*/rmsnorm/*.yaml "$src"/testcases/*/residual_rmsnorm/*.yaml)
R=${R:-256}
REPS=${REPS:-5}
printf '%-40s %6s %5s %9s %9s %9s %7s\n' case R batch "kcert s" "bare s" "waited s" "ratio"
for c in "${cases[@]}"; do
  # A case this build cannot run (real_aten_rms_norm needs LibTorch >= 2.4) prints why and is skipped.
  out=$("$bench" "$c" "$R" "$REPS" 2>&1) || { printf '%-40s skipped: %s\n' "$(basename "$c" .yaml | cut -c1-40)" "$(tail -1 <<<"$out" | sed 's/^ *what(): *//')"; continue; }
  field() { awk -v k="$1" 'index($0, k) { for (i = 1; i <= NF; ++i) if ($i ~ /^[0-9.]+$/) { print $i; exit } }' <<<"$out"; }
  batch=$(sed -n 's/.*batch \([0-9]*\).*/\1/p' <<<"$out" | head -1)
  printf '%-40s %6s %5s %9s %9s %9s %7s\n' "$(basename "$c" .yaml | cut -c1-40)" "$R" "$batch" \
    "$(field 'kcert run_case')" "$(field 'bare draw')" "$(field 'sweep and gates waited')" "$(field 'ratio harness / bare')"
done

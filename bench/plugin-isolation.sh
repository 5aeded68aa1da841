#!/usr/bin/env bash
# The cost of running a case in a forked child (issue 34; docs/benchmarks.md, "Cases in a
# child process"): N copies of one small RMSNorm case, run by one `kcert run` in process
# (--isolation none) and each in a child (--isolation all), interleaved ROUNDS times. Prints
# the wall time per case of each and the difference, the cost of a fork, a pipe and a wait.
#   bench/plugin-isolation.sh [BUILD_DIR] [N] [ROUNDS] [TOKENS]
set -euo pipefail
BUILD=${1:-build}
N=${2:-40}
ROUNDS=${3:-5}
TOKENS=${4:-16}
KCERT=$BUILD/kcert
WORK=$(mktemp -d /tmp/kcert-isolation-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/cases"
for i in $(seq 1 "$N"); do
  cat >"$WORK/cases/c$i.yaml" <<YAML
schema: 1
id: bench_case_$i
kind: positive
family: rmsnorm
mechanism: the same kernel on both sides
references: [bench/plugin-isolation.sh]
reference: {variant: fused_weight_fp32}
production: {variant: fused_weight_fp32}
probe: {dtype: bf16, seed: $i, shape: {tokens: $TOKENS, hidden: 256}}
gates: {replicates: 64}
expected: {algebra: PASS, bias: PASS, variance: PASS}
YAML
done
declare -A total=([none]=0 [all]=0)
for r in $(seq 1 "$ROUNDS"); do
  for mode in none all; do
    s=$(date +%s.%N)
    /usr/bin/time -f "%M" -o "$WORK/rss-$mode" "$KCERT" --isolation $mode run "$WORK/cases" --quiet --brief >/dev/null
    e=$(date +%s.%N)
    t=$(echo "$e - $s" | bc -l)
    total[$mode]=$(echo "${total[$mode]} + $t" | bc -l)
    printf 'round %d %-4s %6.3f s (max RSS %s KB)\n' "$r" "$mode" "$t" "$(cat "$WORK/rss-$mode")"
  done
done
none=$(echo "${total[none]} / ($ROUNDS * $N)" | bc -l)
all=$(echo "${total[all]} / ($ROUNDS * $N)" | bc -l)
printf 'per case: in process %.1f ms, in a child %.1f ms: +%.1f ms (x%.3f), %d cases x %d rounds\n' \
  "$(echo "$none * 1000" | bc -l)" "$(echo "$all * 1000" | bc -l)" "$(echo "($all - $none) * 1000" | bc -l)" \
  "$(echo "$all / $none" | bc -l)" "$N" "$ROUNDS"

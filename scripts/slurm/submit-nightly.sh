#!/usr/bin/env bash
# Submits the kcert nightly to Slurm as an N-task job array (one shard per task, one run),
# then a `kcert nightly --finish` job that runs after every task has ended.
#
#   KCERT_DB=postgresql://kcert@db/kcert scripts/slurm/submit-nightly.sh 8 [--profile smoke] [--device cuda]
#
# Prints the run id and the job ids; the report lands in $KCERT_REPORTS/RUN_ID (default
# .kcert/reports under the checkout, which must be on a filesystem the nodes share).
set -euo pipefail
[[ $# -ge 1 && $1 =~ ^[0-9]+$ && $1 -ge 1 ]] || { echo "usage: $0 N [kcert nightly arguments]" >&2; exit 2; }
n=$1; shift
: "${KCERT_DB:?set KCERT_DB to the PostgreSQL every shard writes to}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export KCERT_ROOT=${KCERT_ROOT:-$root}
kcert=${KCERT_BINARY:-$KCERT_ROOT/build/kcert}
[[ -x $kcert ]] || { echo "submit-nightly: $kcert not built (scripts/nightly.sh or cmake --build build)" >&2; exit 2; }
reports=${KCERT_REPORTS:-$KCERT_ROOT/.kcert/reports}
export KCERT_RUN_STAMP=${KCERT_RUN_STAMP:-$(date -u +%Y%m%dT%H%M%SZ)}
array=$(sbatch --parsable --array="1-$n" --export=ALL "$KCERT_ROOT/scripts/slurm/kcert-nightly.sbatch" "$@")
array=${array%%;*}
run_id=${KCERT_RUN_ID:-nightly-$KCERT_RUN_STAMP-$array}
finish=$(sbatch --parsable --job-name=kcert-nightly-finish --dependency="afterany:$array" --export=ALL \
  --output="kcert-nightly-$array-finish.out" \
  --wrap="'$kcert' nightly --finish '$run_id' --report '$reports/$run_id' --quiet")
finish=${finish%%;*}
echo "run $run_id: array job $array ($n shards), finish job $finish; report: $reports/$run_id/summary.md"

#!/usr/bin/env bash
# One family's controls at their smoke profile, as one nightly run (run id smoke-FAMILY) into
# the shared database of smoke_db.sh: fails when a control differs from its YAML expectation
# (exit 1), errors or the database does (exit 2). One CTest test per family, so CTest runs them
# side by side and names the family that broke; smoke_calibrate.sh then reads all the runs.
#   smoke_family.sh KCERT_BINARY SOURCE_DIR PG_DIR FAMILY
set -euo pipefail
kcert=$1 src=$2 pgdir=$3 family=$4
base=$(cat "$pgdir/conninfo")
export KCERT_DB="${base/dbname=kcert/dbname=kcert_smoke}"
folders=()
for kind in negative positive; do
  [[ -d $src/testcases/$kind/$family ]] && folders+=("$src/testcases/$kind/$family")
done
[[ ${#folders[@]} -gt 0 ]] || { echo "FAILED: no folder testcases/*/$family" >&2; exit 1; }
work=$(mktemp -d "/tmp/kcert-smoke-$family.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
start=$SECONDS
set +e
"$kcert" nightly "${folders[@]}" --profile smoke --run-id "smoke-$family" --report "$work/report" --quiet
status=$?
set -e
# What the run says of its controls, for the log CTest keeps of a failing test.
[[ -f $work/report/summary.md ]] && cat "$work/report/summary.md"
echo "smoke $family: exit $status in $((SECONDS - start)) s"
exit $status

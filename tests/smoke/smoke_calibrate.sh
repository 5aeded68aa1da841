#!/usr/bin/env bash
# Every family has its own positives (issue 30): the smoke runs of all families together
# calibrate each of them from the shipped thresholds, none refused (a dry run: nothing stored).
# Reads the runs smoke_family.sh stored; runs no kernel.
#   smoke_calibrate.sh KCERT_BINARY PG_DIR FAMILY...
set -euo pipefail
kcert=$1 pgdir=$2; shift 2
base=$(cat "$pgdir/conninfo")
export KCERT_DB="${base/dbname=kcert/dbname=kcert_smoke}"
fail() { echo "FAILED: $*" >&2; exit 1; }
runs=()
for family in "$@"; do
  [[ $(psql "$KCERT_DB" -qAtc "SELECT status FROM run WHERE id = 'smoke-$family'") == finished ]] ||
    fail "run smoke-$family is not in the database as finished: its test (controls_smoke_$family) failed or did not run"
  runs+=(--run "smoke-$family")
done
set +e; out=$("$kcert" calibrate --profile smoke "${runs[@]}" 2>&1); status=$?; set -e
[[ $status -eq 0 ]] || { echo "$out"; fail "kcert calibrate exited $status"; }
echo "$out"
for family in $("$kcert" list --json | /usr/bin/python3 -c 'import json,sys; print(" ".join(f["family"] for f in json.load(sys.stdin)["families"]))'); do
  grep -Eq "^ *$family .* calibrated" <<<"$out" || fail "family $family not calibrated from the smoke runs"
done
! grep -q "refused" <<<"$out" || fail "a family was refused"
grep -q "dry run" <<<"$out" || fail "calibrate without --apply must say it stored nothing"
[[ $(psql "$KCERT_DB" -qAtc "SELECT count(*) FROM calibration") == 0 ]] || fail "a dry run stored a calibration"
echo "every family calibrated from the smoke runs"

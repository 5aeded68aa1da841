#!/usr/bin/env bash
# Issue 53's done-when, as one run: a nightly, as root, over a controls folder holding a link to
# a root-only file, a 4 GiB file, a case whose id is NUL-escaped, and two plugin cases from two
# plugins beside ordinary controls. It must finish, report each bad file as an ERROR without
# quoting its content, store every other result in the (real) database, and exit 2.
# Skipped (77) when not root: the root-only file is what makes the link dangerous.
#   test_root_nightly.sh KCERT SOURCE_DIR PG_DIR HOSTILE_PLUGIN_SO SECOND_PLUGIN_SO
set -euo pipefail
kcert=$1 src=$2 pgdir=$3 hostile_so=$4 second_so=$5
[[ $(id -u) -eq 0 ]] || { echo "skipped: needs root"; exit 77; }
work=$(mktemp -d /tmp/kcert-root-nightly.XXXXXX)
cleanup() { rm -rf "$work"; [[ -n ${base:-} ]] && psql "$base" -qAtc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; }
trap cleanup EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

base=$(cat "$pgdir/conninfo")
db=kcert_root_nightly_$$
psql "$base" -qAtc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1
psql "$base" -qAtc "CREATE DATABASE $db" >/dev/null
export KCERT_DB="${base/dbname=kcert/dbname=$db}"
"$kcert" db migrate >/dev/null

mkdir -p "$work/plugins" "$work/controls"
install -m 0644 "$hostile_so" "$work/plugins/hostile.so"
install -m 0644 "$second_so" "$work/plugins/second.so"
# The root-only file: its first line must appear nowhere kcert writes.
secret=$work/secret
echo "root:SECRET-FIRST-LINE-7f3a:20228:0:99999:7:::" >"$secret"
chmod 0600 "$secret"
ln -s "$secret" "$work/controls/shadow.yaml"
truncate -s 4G "$work/controls/huge.yaml"

write_case() {  # write_case FILE ID PRODUCTION [PLUGIN]
  {
    [[ -n ${4:-} ]] && echo "plugins: [../plugins/$4]"
    cat <<YAML
schema: 1
id: $2
kind: positive
family: rmsnorm
mechanism: one-pass fp32 RMSNorm against the TransformerEngine-order reference
references: [tests/hostile/test_root_nightly.sh]
reference: {variant: fused_weight_fp32}
production: {variant: $3}
probe:
  dtype: bf16
  seed: 11
  shift: 0.5
  shape: {tokens: 16, hidden: 256}
  weights: {kind: around_one, spread: 0.1}
gates: {replicates: 64}
expected: {algebra: PASS, bias: PASS, variance: PASS}
YAML
  } >"$work/controls/$1"
}
write_case ordinary.yaml ordinary_builtin fused_weight_fp32
write_case first_plugin.yaml from_first_plugin hostile_ok hostile.so
write_case second_plugin.yaml from_second_plugin second_ok second.so
write_case nul_id.yaml "\"nul\\0id\"" fused_weight_fp32

set +e
KCERT_HOME="$work/home" "$kcert" nightly "$work/controls" --allow-case-plugins --run-id root-night \
  --report "$work/report" --quiet >"$work/out.txt" 2>"$work/err.txt"
code=$?
set -e
[[ $code -eq 2 ]] || fail "the nightly exited $code, not 2: $(cat "$work/out.txt" "$work/err.txt")"
! grep -rqa "SECRET-FIRST-LINE" "$work/out.txt" "$work/err.txt" "$work/report" "$work/home" ||
  fail "the root-only file's content reached kcert's output"
[[ -z $(psql "$KCERT_DB" -qAtc "SELECT 1 FROM result WHERE document::text LIKE '%SECRET-FIRST-LINE%' LIMIT 1") ]] ||
  fail "the root-only file's content reached the database"

/usr/bin/python3 - "$work/report/results.json" "$work/controls" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
controls = sys.argv[2]
assert doc["exit_status"] == 2, doc["exit_status"]
by_id = {r["id"]: r for r in doc["results"]}
want_error = {
    controls + "/shadow.yaml": "a symbolic link, not followed",
    controls + "/huge.yaml": "more than the 1 MiB a case file may hold",
    controls + "/nul_id.yaml": "a NUL character",
}
problems = []
for id, reason in want_error.items():
    r = by_id.get(id)
    if r is None or r["verdict"] != "ERROR" or reason not in r.get("error", ""):
        problems.append(f"{id}: {r and (r['verdict'], r.get('error'))!r} lacks {reason!r}")
want_pass = {"ordinary_builtin": None, "from_first_plugin": "hostile_kernels@1.0.0", "from_second_plugin": "second_kernels@2.0.0"}
for id, version in want_pass.items():
    r = by_id.get(id)
    if r is None or r["verdict"] != "PASS":
        problems.append(f"{id} did not run and PASS: {r and (r['verdict'], r.get('error'))}")
    elif version and r["production"]["version"] != version:
        problems.append(f"{id}'s production is {r['production']['version']}, not the plugin's {version}")
if len(by_id) != 6:
    problems.append(f"expected 6 results, got {sorted(by_id)}")
if problems:
    sys.exit("\n".join(problems))
print("6 results: 3 ERRORs with their reasons, 3 PASS (one built-in, one from each plugin)")
PY
# Every result is in the database, the bad files' ERRORs with them, and the run is finished.
stored=$(psql "$KCERT_DB" -qAtc "SELECT count(*) FROM result WHERE run_id = 'root-night'")
[[ $stored -eq 6 ]] || fail "the database holds $stored results of the run, not 6"
status=$(psql "$KCERT_DB" -qAtc "SELECT status FROM run WHERE id = 'root-night'")
[[ $status == finished ]] || fail "the run is '$status' in the database, not finished"
echo "root nightly: exit 2, 6 results stored, no byte of the root-only file anywhere"

#!/usr/bin/env bash
# The database the per-family smoke runs share (tests/CMakeLists.txt, "controls at smoke
# shapes"), in the CTest fixture's PostgreSQL: `create` drops and makes it anew and migrates
# it, so a second `ctest` starts from an empty one; `drop` removes it.
#   smoke_db.sh create|drop KCERT_BINARY PG_DIR
set -euo pipefail
action=$1 kcert=$2 pgdir=$3
base=$(cat "$pgdir/conninfo")
db=kcert_smoke
psql "$base" -qAtc "DROP DATABASE IF EXISTS $db" >/dev/null
if [[ $action == create ]]; then
  psql "$base" -qAtc "CREATE DATABASE $db" >/dev/null
  KCERT_DB="${base/dbname=kcert/dbname=$db}" "$kcert" db migrate >/dev/null
  echo "database $db created and migrated"
fi

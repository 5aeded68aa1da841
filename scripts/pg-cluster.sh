#!/usr/bin/env bash
# A private PostgreSQL cluster (15 on Debian 12, 17 on Debian 13) in a folder, reachable only through a unix socket in that
# folder (no TCP port is opened). Used by the tests (a throwaway cluster in the build tree)
# and by the nightly when KCERT_DB is unset (a cluster kept under .kcert/postgres).
#
#   scripts/pg-cluster.sh start DIR    # initdb if needed, start, create database kcert;
#                                      # prints the libpq connection string (also in DIR/conninfo)
#   scripts/pg-cluster.sh stop DIR
#   scripts/pg-cluster.sh status DIR
#
# Authentication is `trust` on that socket; the folder is mode 0700, so only its owner (and
# root) can reach it. Run as root, the server runs as the `postgres` system user.
set -euo pipefail

usage() { echo "usage: $0 start|stop|status DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
command=$1
dir=$(realpath -m "$2")
# The server that made the cluster, else the newest installed one, unless PGBIN names one.
if [[ -z ${PGBIN:-} && -r $dir/data/PG_VERSION ]]; then
  PGBIN=/usr/lib/postgresql/$(cat "$dir/data/PG_VERSION")/bin
fi
if [[ -z ${PGBIN:-} ]]; then
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
fi
[[ -x $PGBIN/pg_ctl ]] || { echo "pg-cluster: $PGBIN/pg_ctl not found; run scripts/install-deps.sh" >&2; exit 2; }

if [[ $(id -u) -eq 0 ]]; then
  owner=postgres
  as_owner() { runuser -u postgres -- "$@"; }
else
  owner=$(id -un)
  as_owner() { "$@"; }
fi

case $command in
  start)
    mkdir -p "$dir"
    [[ $(id -u) -eq 0 ]] && chown postgres "$dir"
    chmod 700 "$dir"
    if ! as_owner test -x "$dir"; then
      echo "pg-cluster: the $owner user cannot reach $dir (a parent folder is not traversable); choose a folder" \
           "it can reach, e.g. under /var/tmp" >&2
      exit 2
    fi
    if [[ ! -f $dir/data/PG_VERSION ]]; then
      as_owner "$PGBIN/initdb" -D "$dir/data" -U "$owner" --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    if [[ ! -f $dir/port ]]; then echo $((20000 + RANDOM % 20000)) >"$dir/port"; fi
    port=$(cat "$dir/port")
    if ! as_owner "$PGBIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      as_owner "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses='' -c unix_socket_directories='$dir' -p $port" start >/dev/null \
        || { tail -20 "$dir/server.log" >&2; exit 1; }
    fi
    if ! as_owner "$PGBIN/psql" -h "$dir" -p "$port" -U "$owner" -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'kcert'" | grep -q 1; then
      as_owner "$PGBIN/createdb" -h "$dir" -p "$port" -U "$owner" kcert
    fi
    echo "host=$dir port=$port user=$owner dbname=kcert" >"$dir/conninfo"
    cat "$dir/conninfo"
    ;;
  stop)
    if [[ -f $dir/data/PG_VERSION ]] && as_owner "$PGBIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      as_owner "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    fi
    ;;
  status)
    as_owner "$PGBIN/pg_ctl" -D "$dir/data" status
    ;;
  *) usage ;;
esac

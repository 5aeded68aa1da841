#!/usr/bin/env bash
# The main job of the README: install, build, and run the control suite into PostgreSQL.
#
#   scripts/nightly.sh                    # local PostgreSQL under $KCERT_HOME/postgres when KCERT_DB is unset
#   KCERT_DB=postgresql://... scripts/nightly.sh
#   scripts/nightly.sh --profile smoke    # extra arguments go to `kcert nightly`
#   KCERT_TORCH=pypi scripts/nightly.sh   # built against PyPI's newest torch (build-pypi-VERSION/);
#                                         # KCERT_TORCH=pypi=2.11.0 pins a release
#   scripts/nightly.sh --shard 2/4 --run-id nightly-42   # one shard of a run (docs/operations.md)
#
# Runs `kcert nightly testcases`: every result is spooled under $KCERT_HOME/spool, stored in
# PostgreSQL, compared with the last run in this environment, and reported under
# $KCERT_HOME/reports/RUN_ID/ (summary.md, results.json, tails/, html/). KCERT_HOME is kcert's
# state folder, default .kcert in the checkout.
# Exit status (kcert nightly's): 0 every control behaved as expected, 1 a negative escaped,
# a positive FAILed or a verdict flipped, 2 harness or input error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export KCERT_HOME="${KCERT_HOME:-$ROOT/.kcert}"

"$ROOT/scripts/install-deps.sh"
. "$ROOT/scripts/torch-source.sh"
kcert_torch_select
BUILD="${KCERT_BUILD_DIR:-$ROOT/$KCERT_TORCH_BUILD}"
# Configured as scripts/test.sh configures the same build folder (no debug info unless
# KCERT_CMAKE_ARGS, split on spaces, says otherwise): a folder this script configured first
# was built with -g, and the test command then rebuilt every LibTorch source without it (most
# of a cold build: 625 s on a 2-vCPU AVX2 EPYC).
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKCERT_DEBUG_INFO=OFF "${KCERT_TORCH_CMAKE_ARGS[@]}" ${KCERT_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" --parallel "$(nproc)" --target kcert
# The man pages (help2man, from the --help texts) are built with the binary, so that
# `cmake --install` installs them; a build without help2man has no such target.
if [[ -f $BUILD/build.ninja ]] && grep -q '^build kcert_man_pages:' "$BUILD/build.ninja"; then
  cmake --build "$BUILD" --target kcert_man_pages >/dev/null
fi
# The controls whose kernels are transformers' own modules (testcases/python/hf_references.py)
# run in `python -m kcert` workers where this build has the Python module (python/interpreter
# beside the binary); elsewhere they are SKIPped with the reason.
# Best effort: a module that does not build or import costs those controls (SKIPped, with the
# reason in the report), never the C++ controls' night.
python_args=()
hf="$ROOT/testcases/python/hf_references.py"
if [[ -f $BUILD/python/interpreter ]]; then
  if cmake --build "$BUILD" --parallel "$(nproc)" --target kcert_python >/dev/null &&
     "$BUILD/kcert" --python "$hf" list >/dev/null; then
    python_args=(--python "$hf")
  else
    echo "nightly.sh: the Python module does not build or import; the controls that name $hf will SKIP" >&2
  fi
fi

if [[ -z ${KCERT_DB:-} ]]; then
  # Kept under the checkout; as root the server runs as `postgres`, which must be able to
  # reach it, else a folder under /var/tmp is used (KCERT_PG_DIR chooses another).
  pgdir=${KCERT_PG_DIR:-$KCERT_HOME/postgres}
  if [[ -z ${KCERT_PG_DIR:-} && $(id -u) -eq 0 ]] && ! runuser -u postgres -- test -x "$ROOT"; then
    pgdir=/var/tmp/kcert-postgres-$(echo -n "$ROOT" | md5sum | cut -c1-12)
  fi
  KCERT_DB="$("$ROOT/scripts/pg-cluster.sh" start "$pgdir")"
  export KCERT_DB
  echo "nightly.sh: using the local PostgreSQL cluster in $pgdir (stop it with scripts/pg-cluster.sh stop $pgdir)"
fi
"$BUILD/kcert" db migrate

status=0
"$BUILD/kcert" "${python_args[@]}" nightly "$ROOT/testcases" "$@" || status=$?
newest=$(ls -1t "$KCERT_HOME/reports" 2>/dev/null | head -1)
echo "nightly.sh: report $KCERT_HOME/reports/$newest/html/index.html; results in the database (kcert history CASE), spool under $KCERT_HOME/spool/"
exit $status

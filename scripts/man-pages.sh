#!/usr/bin/env bash
# Writes the man pages of kcert from its own --help texts (help2man): kcert.1 and one
# kcert-COMMAND.1 per subcommand. The subcommand list is read from `kcert --help`, so a new
# command gets its page without editing this script. CMake runs it after building kcert.
#   scripts/man-pages.sh build/kcert OUTDIR
set -euo pipefail
kcert=$1
out=$2
mkdir -p "$out"
# No re-exec with the thread policy: --help runs no kernel, and the pages must not depend on it.
export KCERT_NO_REEXEC=1
version=$("$kcert" --version | awk '{print $2}')

# "  run    Run test cases ..." lines under "Subcommands:" -> "run<TAB>Run test cases ..."
commands=$("$kcert" --help | awk '/^Subcommands:/{s=1; next} s && /^  [a-z]/{n=$1; $1=""; sub(/^ +/, ""); print n "\t" $0} s && /^$/{exit}')
if [[ -z $commands ]]; then
  echo "man-pages.sh: found no subcommands in '$kcert --help'" >&2
  exit 1
fi

see_also=$(mktemp)
sections=$(mktemp)
trap 'rm -f "$see_also" "$sections"' EXIT
{
  echo "[SEE ALSO]"
  printf '.BR kcert (1)'
  while IFS=$'\t' read -r name _; do printf ',\n.BR kcert-%s (1)' "$name"; done <<<"$commands"
  echo
  echo
  echo "The method, the file formats and the controls are documented under"
  echo ".I /usr/share/doc/kcert"
  echo "(docs/method.md, docs/testcases.md, docs/results.md) in an installed kcert."
} >"$see_also"

# EXIT STATUS, ENVIRONMENT and FILES: the same for every command (harness/cli/exit_codes.hpp,
# the getenv calls of harness/, the folders of harness/runner/run_storage.cpp).
cat >"$sections" <<'ROFF'
[EXIT STATUS]
.TP
.B 0
success; for run, suite and nightly: nothing to act on
.TP
.B 1
a finding: a FAIL or INCONCLUSIVE verdict (run), a control that did not behave as its
expectation says (run --expect, suite, nightly)
.TP
.B 2
bad input or a harness error: a file, flag or value kcert refuses (one
.B kcert: error:
line says what and why), a case that ended in ERROR

[ENVIRONMENT]
.TP
.B KCERT_DB
the results database: a postgresql:// URL or a libpq key=value string; else libpq's
.B PG*
variables and ~/.pg_service.conf. Passwords belong in ~/.pgpass.
.TP
.B KCERT_DB_STATEMENT_TIMEOUT
seconds a database statement may take (default 60; 0 turns the limit off)
.TP
.B KCERT_HOME
kcert's state folder (default .kcert): spool files and nightly reports
.TP
.B KCERT_PLUGINS
kernel plugins to load, colon-separated (as --plugin)
.TP
.B KCERT_MEMORY_LIMIT
as --memory-limit
.TP
.B KCERT_WORKER_PYTHON
the Python whose kcert package runs a --python file's kernels
.TP
.B KCERT_ENVIRONMENT_FILE
a JSON file that overrides or adds environment identity fields
.TP
.B KCERT_NO_REEXEC
1: run under the libraries' own thread settings instead of re-executing with kcert's
.TP
.BR OMP_NUM_THREADS ", " SLURM_CPUS_PER_TASK
the default of --threads
.TP
.B OPENBLAS_CORETYPE
kept when set; else kcert chooses one where Debian's OpenBLAS needs it

[FILES]
.TP
.I $KCERT_HOME/spool/RUN_ID.jsonl
every result of a run with a database, written before the database sees it
.RB ( "kcert upload"
inserts it after an outage)
.TP
.I $KCERT_HOME/reports/RUN_ID/
a nightly's report: html/index.html, results.json, summary.md, JUnit XML
.TP
.I PREFIX/share/kcert/testcases
the installed controls, run by a nightly given no folder
.TP
.I ~/.cache/kcert/completion/
the bash completion's copy of kcert's --help texts
ROFF

common=(--no-info --section=1 --source="kcert $version" --manual="kcert manual" --include="$sections" --include="$see_also")
help2man "${common[@]}" --name="certify kernel migrations numerically" \
  --version-string="kcert $version" --output="$out/kcert.1" "$kcert"
while IFS=$'\t' read -r name description; do
  help2man "${common[@]}" --name="$description" --help-option="$name --help" \
    --version-string="kcert-$name $version" --output="$out/kcert-$name.1" "$kcert"
done <<<"$commands"
echo "man-pages.sh: wrote $(ls "$out"/*.1 | wc -l) pages to $out"

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
trap 'rm -f "$see_also"' EXIT
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

common=(--no-info --section=1 --source="kcert $version" --manual="kcert manual" --include="$see_also")
help2man "${common[@]}" --name="certify kernel migrations numerically" \
  --version-string="kcert $version" --output="$out/kcert.1" "$kcert"
while IFS=$'\t' read -r name description; do
  help2man "${common[@]}" --name="$description" --help-option="$name --help" \
    --version-string="kcert-$name $version" --output="$out/kcert-$name.1" "$kcert"
done <<<"$commands"
echo "man-pages.sh: wrote $(ls "$out"/*.1 | wc -l) pages to $out"

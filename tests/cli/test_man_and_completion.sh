#!/usr/bin/env bash
# The man pages and the bash completion are both derived from kcert's --help texts; this
# checks that every command has a page that documents its options, and that completion
# offers subcommands, options, option choices and profiles.
#   test_man_and_completion.sh KCERT BUILD_DIR SOURCE_DIR
set -euo pipefail
KCERT=$1
BUILD=$2
SRC=$3
fail() { echo "FAIL: $*" >&2; exit 1; }

# --- man pages: one per subcommand listed by `kcert --help`, plus kcert.1 ---
commands=$(KCERT_NO_REEXEC=1 "$KCERT" --help | awk '/^Subcommands:/{s=1; next} s && /^  [a-z]/{print $1} s && /^$/{exit}')
(( $(wc -w <<<"$commands") >= 10 )) || fail "expected at least 10 subcommands, got: $commands"
[[ -s $BUILD/man/kcert.1 ]] || fail "no kcert.1"
grep -q -- '--memory-limit' <(sed 's/\\-/-/g' "$BUILD/man/kcert.1") || fail "kcert.1 lacks the global option --memory-limit"
for c in $commands; do
  page=$BUILD/man/kcert-$c.1
  [[ -s $page ]] || fail "no man page for '$c' ($page)"
  grep -q "^\.TH KCERT-${c^^} \"1\"" "$page" || fail "$page: title is not KCERT-${c^^}"
  # Every long option of the command's --help appears in its page.
  # (The page is read whole first: grep -q leaving a pipeline early would kill its writer.)
  text=$(sed 's/\\-/-/g' "$page")
  for opt in $(KCERT_NO_REEXEC=1 "$KCERT" "$c" --help | grep -oE '^  (-[a-zA-Z],)?--[a-z][a-z0-9-]*' | sed -E 's/^  (-[a-zA-Z],)?//'); do
    grep -q -- "$opt" <<<"$text" || fail "$page lacks $opt"
  done
  grep -q '^.BR kcert-run (1)' "$page" || fail "$page: no SEE ALSO"
  for section in '"EXIT STATUS"' ENVIRONMENT FILES; do
    grep -q "^\.SH $section\$" "$page" || fail "$page: no $section section"
  done
done
[[ $(ls "$BUILD"/man/*.1 | wc -l) -eq $(( $(wc -w <<<"$commands") + 1 )) ]] || fail "stray pages in $BUILD/man"

# --- bash completion ---
# Its disk cache goes to a folder of the test's own, never the user's ~/.cache.
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
export XDG_CACHE_HOME=$home/cache
complete_words() {  # complete_words WORD... : what completion offers for the last word
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _kcert; echo "${COMPREPLY[*]}"' \
    _ "$SRC/scripts/completion/kcert.bash" "$@"
}
expect() {  # expect "WANTED" WORD...
  local want=$1; shift
  local got
  got=$(cd "$SRC" && complete_words "$@")
  [[ $got == "$want" ]] || fail "completing '$*': expected '$want', got '$got'"
}
expect "nightly" "$KCERT" ni
expect "migrate status abandon" "$KCERT" db ""
expect "--device" "$KCERT" run --dev
expect "cpu cuda" "$KCERT" run --device ""
expect "--profile" "$KCERT" --threads 2 suite --pro      # a global option's value is skipped
expect "smoke" "$KCERT" run testcases --profile ""       # profiles from the case files
expect "--quiet" "$KCERT" run --json out.json --qu
expect "--help" "$KCERT" db migrate --
expect "n1_gemma_rmsnorm_offset_bf16 n1_gemma_rmsnorm_offset_bf16_transformers" "$KCERT" history n1_gemma  # case ids
expect "rmsnorm" "$KCERT" list rms                        # families
mkdir -p "$home/spool" "$home/reports/20261201T010203Z-0badc0de"
: >"$home/spool/20261202T010203Z-1a2b3c4d-shard2.jsonl"
# A file name with a command substitution is not a word (compgen -W would run it).
: >"$home/spool/2026\$(touch ran).jsonl"
got=$(cd "$home" && KCERT_HOME=$home complete_words "$KCERT" db abandon 2026)
[[ $got == "20261202T010203Z-1a2b3c4d 20261201T010203Z-0badc0de" ]] || fail "run ids: got '$got'"
[[ ! -e $home/ran ]] || fail "completing run ids ran a command named in a file name"

# The texts are cached per binary, on disk: a new shell's TAB runs no kcert at all, and a
# rebuilt binary (other size or time) is asked again. A wrapper counts kcert's runs.
wrapper=$home/bin/kcert
mkdir -p "$home/bin"
printf '#!/bin/sh\necho run >>"%s"\nexec "%s" "$@"\n' "$home/calls" "$KCERT" >"$wrapper"
chmod +x "$wrapper"
XDG_CACHE_HOME=$home/cache2
[[ $(complete_words "$wrapper" run --json out.json --qu) == --quiet ]] || fail "completion through the wrapper"
first=$(wc -l <"$home/calls")
(( first >= 2 )) || fail "expected the first TAB to read kcert's texts, it ran kcert $first times"
[[ $(complete_words "$wrapper" run --json out.json --qu) == --quiet ]] || fail "completion from the cache"
[[ $(wc -l <"$home/calls") -eq $first ]] || fail "a second shell's TAB ran kcert again ($(wc -l <"$home/calls") runs after $first)"
touch -d '2001-01-01' "$wrapper"
complete_words "$wrapper" run --qu >/dev/null
(( $(wc -l <"$home/calls") > first )) || fail "a changed binary was not asked again"
echo "ok: $(wc -w <<<"$commands") man pages and completion"

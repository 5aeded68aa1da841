#!/usr/bin/env bash
# Files kcert creates in folders it does not own (issue 34), with real symlinks: kcert runs as
# root from systemd and Slurm, and a report folder or KCERT_HOME prepared by another user
# turned its writes into writes through that user's links.
#   test_file_safety.sh KCERT_BINARY SOURCE_DIR
set -euo pipefail
kcert=$1 src=$2
case_file=$src/tests/hostile/report/hostile_links.yaml
work=$(mktemp -d /tmp/kcert-file-safety.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
victim=$work/victim
echo "precious" >"$victim"
chmod 600 "$victim"
intact() { [[ $(cat "$victim") == precious ]] || fail "$1: the file behind the link was written"; }
# Exit 1 is a result (the case's expectation), anything else but 0 a harness error.
night() { set +e; KCERT_HOME=$work/home "$kcert" nightly "$case_file" --no-db --quiet "$@" >run.txt 2>&1; rc=$?; set -e; }

# 1. Links at the temporaries' old names (PATH.tmp) and at the files themselves, in a folder of
#    our own: the report is written, the links are replaced, the victim is untouched.
mkdir -p own/tails
for f in summary.md results.json tails/hostile_links.csv; do ln -s "$victim" "own/$f.tmp"; ln -s "$victim" "own/$f.tmp.XXXXXX"; done
ln -s "$victim" own/summary.md
night --report own
[[ $rc == 0 || $rc == 1 ]] || { cat run.txt >&2; fail "nightly into a folder with planted links (exit $rc)"; }
intact "links at PATH.tmp and PATH"
[[ -f own/summary.md && ! -L own/summary.md ]] || fail "summary.md is still a link"
grep -q "hostile_links" own/summary.md || fail "no summary written"

# 2. A spool file that is a link: refused, nothing appended to the victim.
mkdir -p home/spool
ln -s "$victim" home/spool/linked-run.jsonl
night --run-id linked-run --report r2
[[ $rc == 2 ]] || { cat run.txt >&2; fail "a spool link was accepted (exit $rc)"; }
grep -q "linked-run.jsonl: is a symbolic link" run.txt || { cat run.txt >&2; fail "no reason for the refused spool link"; }
intact "spool link"

# 3. A report folder that is a link, or writable by every user: refused.
mkdir real && ln -s real linked
night --report linked
[[ $rc == 2 ]] && grep -q "linked: is a symbolic link" run.txt || { cat run.txt >&2; fail "a linked report folder was accepted"; }
mkdir open && chmod 777 open
night --report open
[[ $rc == 2 ]] && grep -q "open: writable by every user" run.txt || { cat run.txt >&2; fail "a world-writable report folder was accepted"; }
"$kcert" report own --no-db --out open >rep.txt 2>&1 && fail "kcert report wrote into a world-writable folder"
grep -q "writable by every user" rep.txt || { cat rep.txt >&2; fail "kcert report: no reason"; }

# 4. A folder owned by another user (root only can prepare one here).
if [[ $(id -u) == 0 ]]; then
  mkdir foreign && ln -s "$victim" foreign/summary.md.tmp && chown -R nobody foreign
  night --report foreign
  [[ $rc == 2 ]] && grep -q "foreign: owned by uid $(id -u nobody), not by this user" run.txt ||
    { cat run.txt >&2; fail "a report folder owned by another user was accepted"; }
  intact "foreign folder"
else
  echo "not root: the foreign-owner case is skipped"
fi

# 4b. Plot data at names taken by links in the plots folder (issue 53: std::ofstream followed
#     them and truncated the target): replaced, never written through.
for f in tail gpd mrl stability qq bias-0 bias-1 bias-2 bias-3 bias-4 bias-5 history; do
  ln -sf "$victim" "own/html/plots/hostile_links-$f.dat"
done
"$kcert" report own --no-db >rep.txt 2>&1 || { cat rep.txt >&2; fail "kcert report over planted .dat links"; }
intact "links at the plots' .dat names"
# The bias plane's six series are written for every control (the other plots need K-hat data).
for g in 0 1 2 3 4 5; do
  [[ -f own/html/plots/hostile_links-bias-$g.dat && ! -L own/html/plots/hostile_links-bias-$g.dat ]] ||
    fail "hostile_links-bias-$g.dat is still a link"
done

# 4c. A folder above the report folder that another user owns, or that its group may write
#     (issue 53): its owner could rename the report folder away after kcert's checks and put
#     their own in its place. Refused, naming that folder, for --report, KCERT_HOME and
#     `kcert report --out`.
mkdir -p grp && chmod 775 grp
night --report grp/rep
[[ $rc == 2 ]] && grep -q "its parent folder $work/grp is writable by its group (mode 0775)" run.txt ||
  { cat run.txt >&2; fail "a report folder under a group-writable folder was accepted"; }
if [[ $(id -u) == 0 ]]; then
  mkdir -p share && chown nobody share
  night --report share/rep
  [[ $rc == 2 ]] && grep -q "its parent folder $work/share is owned by uid $(id -u nobody)" run.txt ||
    { cat run.txt >&2; fail "a report folder under another user's folder was accepted"; }
  set +e; KCERT_HOME=$work/share/home "$kcert" nightly "$case_file" --no-db --quiet >run.txt 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -q "its parent folder $work/share is owned by uid" run.txt ||
    { cat run.txt >&2; fail "KCERT_HOME under another user's folder was accepted"; }
  "$kcert" report own --no-db --out share/site >rep.txt 2>&1 && fail "kcert report wrote under another user's folder"
  grep -q "its parent folder $work/share is owned by uid" rep.txt || { cat rep.txt >&2; fail "kcert report: no reason"; }
  [[ ! -e share/rep && ! -e share/home && ! -e share/site ]] || fail "a folder was created under another user's folder"
else
  echo "not root: the foreign-parent case is skipped"
fi

# 5. A file-size limit: SIGXFSZ killed the nightly with no message; now a write error naming
#    the file and errno (exit 2).
set +e
(ulimit -f 1; KCERT_HOME=$work/home5 "$kcert" nightly "$case_file" --no-db --quiet --report r5 >run.txt 2>&1)
rc=$?
set -e
[[ $rc == 2 ]] || { cat run.txt >&2; fail "under ulimit -f 1 the nightly exited $rc (153: killed by SIGXFSZ)"; }
grep -q "File too large" run.txt || { cat run.txt >&2; fail "no errno in the write failure"; }
echo "file safety test passed"

#!/usr/bin/env bash
# The report as an attack surface (issue 34), with the real gnuplot:
#  - a result's `source` names a secret file, a FIFO, /proc/self/environ: the report renders
#    the case text the result carries and never opens the path (it published the file, and
#    hung forever on the FIFO);
#  - an output folder whose name holds a quote, a newline and `!touch FILE` (gnuplot ran the
#    line after the newline as a command); a run id like that is refused;
#  - `javascript:`/`data:` references and raw HTML stay text in the HTML and in controls-doc;
#  - a crafted results.json (100,000-deep nesting, fields of the wrong type) is exit 2 with the
#    file and the field named, not a segfault or nlohmann's internal error.
#   test_report_hostile.sh KCERT_BINARY SOURCE_DIR
set -euo pipefail
kcert=$1 src=$2
work=$(mktemp -d /tmp/kcert-report-hostile.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
command -v gnuplot >/dev/null || fail "needs gnuplot (scripts/install-deps.sh --tests)"
export KCERT_HOME=$work/.kcert

echo "SECRET-MARKER-7c1e" >secret.txt
chmod 600 secret.txt
mkfifo fifo
"$kcert" nightly "$src/tests/hostile/report/hostile_links.yaml" --no-db --report night --quiet \
  >out.txt 2>&1 || { [[ $? == 1 ]] || { cat out.txt >&2; fail "nightly"; }; }

# A crafted folder: the result's source points at the secret, a copy of it at the FIFO and at
# /proc/self/environ (with a password in the environment), one without case_text at all.
KCERT_TEST_PASSWORD=ENV-SECRET-55aa /usr/bin/python3 - <<'PY'
import json, os
d = json.load(open("night/results.json"))
r = d["results"][0]
r["source"] = os.path.abspath("secret.txt")
fifo = json.loads(json.dumps(r)); fifo["id"] = "via_fifo"; fifo["source"] = os.path.abspath("fifo")
env = json.loads(json.dumps(r)); env["id"] = "via_environ"; env["source"] = "/proc/self/environ"; del env["case_text"]
d["results"] += [fifo, env]
json.dump(d, open("night/results.json", "w"))
PY
hostile_out="$work/out'
!touch $work/pwned
'"
KCERT_TEST_PASSWORD=ENV-SECRET-55aa timeout 60 "$kcert" report night --no-db --out "$hostile_out" >report.txt 2>&1 ||
  { cat report.txt >&2; fail "kcert report on the crafted folder (exit $?; 124: it hung)"; }
[[ ! -e $work/pwned ]] || fail "gnuplot ran a command from the folder name"
ls "$hostile_out"/plots/*.svg >/dev/null 2>&1 || fail "no plots drawn in a folder with a newline in its name"
grep -rq "SECRET-MARKER\|ENV-SECRET" "$hostile_out" && fail "the report published a file named by a result's source"
page="$hostile_out/hostile_links.html"
grep -q "schema: 1" "$page" || fail "the case text the result carries is not shown"
grep -q "carries no case text" "$hostile_out/via_environ.html" || fail "a result without case_text does not say so"

# Links only for http(s); raw HTML escaped.
grep -qi 'href="javascript:\|href="data:' "$page" && fail "a javascript:/data: reference became a link"
grep -q '<a href="https://example.org/a-real-reference">' "$page" || fail "the https reference is not a link"
grep -q "<script>\|<img src=x" "$page" && fail "raw HTML from the case reached the page"
grep -q "&lt;script&gt;alert" "$page" || fail "the mechanism is not shown escaped"

"$kcert" controls-doc "$src/tests/hostile/report/hostile_links.yaml" >controls.md
grep -qi '](javascript:\|](data:' controls.md && fail "controls-doc made a javascript:/data: link"
grep -q "<script>\|<img src=x" controls.md && fail "controls-doc passed raw HTML into Markdown"
grep -q "&lt;script&gt;" controls.md || fail "controls-doc does not show the mechanism escaped"
grep -q "(https://example.org/a-real-reference)" controls.md || fail "controls-doc lost the https link"

# A run id becomes a folder and a spool name: one with a newline or a '/' is refused.
for bad in $'x\n!touch '"$work"'/pwned' "../escape" ""; do
  set +e
  "$kcert" nightly --no-db --run-id "$bad" "$src/tests/hostile/report/hostile_links.yaml" >bad.txt 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] || { cat bad.txt >&2; fail "run id '$bad' was accepted (exit $rc)"; }
  grep -q "a run id is 1-128 characters" bad.txt || { cat bad.txt >&2; fail "run id '$bad': no reason given"; }
done
[[ ! -e $work/pwned && ! -e $work/.kcert/escape.jsonl ]] || fail "a refused run id left a file"
# A crafted results.json: 100,000-deep nesting (segfaulted the parse), fields of the wrong
# type at the top, in a result and deep in one (a plot's settings and floors, once
# nlohmann's internal error), invalid JSON. Each is exit 2 with the file and the field named,
# no crash, no "[json.exception".
/usr/bin/python3 - "$work" <<'PY'
import copy, json, os, sys
work = sys.argv[1]
base = json.load(open(os.path.join(work, "night/results.json")))
def folder(name, doc=None, text=None):
    d = os.path.join(work, "crafted", name)
    os.makedirs(d)
    with open(os.path.join(d, "results.json"), "w") as f:
        f.write(text if text is not None else json.dumps(doc))
folder("deep", text='{"results": ' + "[" * 100000 + "]" * 100000 + "}")
d = copy.deepcopy(base); d["environments"] = [1, 2]; folder("environments_numbers", d)
d = copy.deepcopy(base); d["results"][0]["gates"] = "PASS"; folder("gates_string", d)
d = copy.deepcopy(base); d["results"][0]["gates"]["variance"]["tail"]["settings"]["warn_K"] = "two"; folder("warn_k_string", d)
d = copy.deepcopy(base); d["results"][0]["gates"]["bias"]["thresholds"] = {"c": [1]}; folder("threshold_list", d)
d = copy.deepcopy(base); d["results"][0]["gates"]["variance"]["tail"]["settings"]["horizon"] = None; folder("horizon_null", d)
d = copy.deepcopy(base); d["results"] = {"a": 1}; folder("results_object", d)
folder("not_json", text='{"results": [')
PY
check_crafted() {  # NAME EXPECTED-TEXT
  set +e
  timeout 60 "$kcert" report "crafted/$1" --no-db >"crafted/$1.txt" 2>&1
  local rc=$?
  set -e
  [[ $rc == 2 ]] || { cat "crafted/$1.txt" >&2; fail "kcert report on crafted/$1: exit $rc, not 2 (139: a segfault)"; }
  grep -qF "crafted/$1/results.json: $2" "crafted/$1.txt" || { cat "crafted/$1.txt" >&2; fail "crafted/$1: expected '$2' after the file name"; }
  grep -q "json.exception\|internal error" "crafted/$1.txt" && { cat "crafted/$1.txt" >&2; fail "crafted/$1: an internal error message"; }
  return 0
}
check_crafted deep "nested deeper than 64 levels"
check_crafted environments_numbers "environments: expected a list of strings"
check_crafted gates_string "results[0] (id 'hostile_links').gates: expected an object"
check_crafted warn_k_string "results[0] (id 'hostile_links').gates.variance.tail.settings.warn_K: expected a number"
check_crafted threshold_list "results[0] (id 'hostile_links').gates.bias.thresholds.c: expected a number"
# null where a plot draws a line: refused, not drawn from a default
check_crafted horizon_null "results[0] (id 'hostile_links').gates.variance.tail.settings.horizon: expected a number"
check_crafted results_object "results: expected a list of results"
check_crafted not_json "not valid JSON (at byte"
# results.json as a FIFO or a link to /dev/zero (issue 53, item 9): `kcert report` waited for a
# writer forever, or read zeros until memory ran out. Both are refused at once, exit 2.
for kind in fifo zero; do
  mkdir -p "special/$kind"
  if [[ $kind == fifo ]]; then mkfifo "special/$kind/results.json"; else ln -s /dev/zero "special/$kind/results.json"; fi
  set +e
  timeout 20 "$kcert" report "special/$kind" --no-db >"special/$kind.txt" 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] || { cat "special/$kind.txt" >&2; fail "kcert report with results.json a $kind: exit $rc, not 2 (124: it blocked)"; }
  grep -qF "special/$kind/results.json: not a regular file (a FIFO, device or folder), not read" "special/$kind.txt" ||
    { cat "special/$kind.txt" >&2; fail "results.json a $kind: no clear refusal"; }
done
# Two nightlies given one --report folder interleaved their pages (issue 53, item 9): while one
# writes it (here: a process holding the folder's lock for 4 s), another waits for it, says so,
# and then writes its report whole.
mkdir -p shared
flock shared/.kcert-report.lock sleep 4 &
holder=$!
for _ in $(seq 50); do [[ -e shared/.kcert-report.lock ]] && break; sleep 0.1; done
sleep 0.5
set +e
"$kcert" nightly "$src/tests/hostile/report/hostile_links.yaml" --no-db --report shared --quiet >shared.txt 2>&1
rc=$?
set -e
wait "$holder" 2>/dev/null || true
[[ $rc == 0 || $rc == 1 ]] || { cat shared.txt >&2; fail "a nightly into a report folder another kcert is writing: exit $rc"; }
grep -qF "report folder shared is being written by another kcert; waiting for it" shared.txt || { cat shared.txt >&2; fail "no word about the wait"; }
[[ -s shared/results.json && -s shared/html/index.html ]] || fail "the nightly that waited wrote no report"
echo "hostile report test passed"

#!/usr/bin/env bash
# The nightly's HTML report in a real headless browser: a smoke nightly (RMSNorm controls,
# no database) writes html/; Chromium opens the index and a negative control's page, logs no
# error, and renders every plot; `kcert report` rebuilds the same site from the folder.
# Screenshots are kept in OUT_DIR (an artifact of the test run).
#   test_report.sh KCERT_BINARY SOURCE_DIR OUT_DIR
set -euo pipefail
kcert=$1 src=$2 out=$3
work=$(mktemp -d /tmp/kcert-report-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }

"$kcert" nightly --profile smoke --filter rmsnorm "$src/testcases" --no-db --report night --quiet >out.txt 2>err.txt ||
  { cat out.txt err.txt >&2; fail "nightly"; }
grep -q "html: .*/night/html/index.html" out.txt || fail "the nightly did not say where its HTML report is"
page=night/html/n1_gemma_rmsnorm_offset_bf16.html
[[ -s night/html/index.html && -s $page ]] || fail "index or control page missing"
# What a reader must find: the table, the links, the plots with captions, the case file.
grep -q "negatives detected" night/html/index.html || fail "no falsifiability table"
grep -q 'href="n1_gemma_rmsnorm_offset_bf16.html"' night/html/index.html || fail "no link to the control page"
for plot in tail bias; do
  grep -q "plots/n1_gemma_rmsnorm_offset_bf16-$plot.svg" "$page" || fail "no $plot plot on the N1 page"
done
grep -q "<figcaption>The K-hat tail" "$page" || fail "plot without caption"
# The bias plane names N1's strongest flagged buckets in the family's terms (issue 32, item 4).
grep -qE '>channel [0-9]+<' night/html/plots/n1_gemma_rmsnorm_offset_bf16-bias.svg ||
  fail "the bias plane does not name the flagged channels"
grep -q "History needs the results database" "$page" || fail "--no-db history note"
grep -q "schema: 1" "$page" || fail "case file not shown"

# The index says when the run started and how long it ran, and links the run's files.
grep -qE '<p>started 20[0-9-]+T[0-9:.]+Z, ran [0-9]+ (s|min)</p>' night/html/index.html || fail "the index lacks the run's start and duration"
for f in results.json summary.md tails/; do
  grep -q "href=\"../$f\"" night/html/index.html || fail "the index does not link $f"
  [[ -e night/$f ]] || fail "the index links night/$f, which is missing"
done
grep -q "<b>Expected:</b> algebra PASS; bias" "$page" || fail "the control page does not show its expectation"
/usr/bin/python3 "$src/tests/report/check_pages.py" "$out" night/html/index.html "$page"

# A control this LibTorch cannot run (at::rms_norm on 1.13) has its page, saying it was
# skipped and why, never a PASS badge; on 2.x it ran and says nothing of the kind.
skip_page=night/html/real_aten_rms_norm.html
[[ -s $skip_page ]] || fail "no page for real_aten_rms_norm"
if /usr/bin/python3 -c 'import json,sys; d=json.load(open("night/results.json")); sys.exit(0 if any(r["id"] == "real_aten_rms_norm" and r["verdict"] == "SKIP" for r in d["results"]) else 1)'; then
  grep -q "Skipped, not run in this environment:</b> aten_rms_norm: needs LibTorch" "$skip_page" || fail "the skipped control's page does not say why"
  grep -q 'badge pass' "$skip_page" && fail "the skipped control's page shows a PASS badge"
  grep -q 'SKIP</span> <code>real_aten_rms_norm</code>' night/html/index.html || fail "the index does not list the skipped control"
  grep 'href="real_aten_rms_norm.html"' night/html/index.html | grep -q '<td>not run</td>' ||
    fail "the index row of the skipped control claims an expectation met or missed"
else
  grep -q "Skipped, not run" "$skip_page" && fail "a control that ran is reported as skipped"
fi

# The data behind it follows its published schemas (docs/schema).
/usr/bin/python3 "$src/tests/cli/validate_json.py" kcert-nightly-1.schema.json night/results.json
/usr/bin/python3 "$src/tests/cli/validate_json.py" --lines kcert-spool-1.schema.json .kcert/spool/*.jsonl

# The command rebuilds the same pages from the folder.
"$kcert" report night --no-db --out again >report.txt
# One page per result (forward and backward controls alike) and the index.
pages=$(/usr/bin/python3 -c 'import json; print(len(json.load(open("night/results.json"))["results"]) + 1)')
grep -q "again/index.html ($pages pages" report.txt || { cat report.txt >&2; fail "kcert report: expected $pages pages"; }
# A backward control's page shows its gate set per gradient.
grep -q "<h2>Gradients</h2>" night/html/bn30_rmsnorm_dw_bf16_accumulation.html || fail "no Gradients table on a backward control's page"
# Same page but for why there is no history (spool vs --no-db), same plots.
diff <(grep -v "History needs" "$page") <(grep -v "History needs" again/n1_gemma_rmsnorm_offset_bf16.html) >/dev/null ||
  fail "kcert report's page differs from the nightly's"
cmp -s night/html/plots/n1_gemma_rmsnorm_offset_bf16-tail.svg again/plots/n1_gemma_rmsnorm_offset_bf16-tail.svg ||
  fail "kcert report's tail plot differs from the nightly's"
# gnuplot's own messages go to a log beside the control's script, not to the console. The
# real gnuplot draws; a wrapper in front of it on PATH adds a warning of its own.
real_gnuplot=$(command -v gnuplot)
mkdir -p shim
printf '#!/bin/sh\necho "planted gnuplot warning" >&2\nexec "%s" "$@"\n' "$real_gnuplot" >shim/gnuplot
chmod +x shim/gnuplot
PATH=$work/shim:$PATH "$kcert" report night --no-db --out loud >loud.txt 2>loud.err || { cat loud.err >&2; fail "kcert report with a warning gnuplot"; }
grep -q "planted" loud.txt loud.err && fail "gnuplot's warning reached the console"
grep -q "planted gnuplot warning" loud/plots/n1_gemma_rmsnorm_offset_bf16-gnuplot.log || fail "gnuplot's warning is not in the control's log"
cmp -s loud/plots/n1_gemma_rmsnorm_offset_bf16-tail.svg again/plots/n1_gemma_rmsnorm_offset_bf16-tail.svg || fail "the plots differ under the wrapper"
grep -E 'line [0-9]+: (warning|error)' err.txt report.txt && fail "gnuplot's messages reached the nightly's console"
for log in again/plots/*-gnuplot.log; do
  [[ ! -e $log || -s $log ]] || fail "an empty gnuplot log was left: $log"
done

echo "report test passed: $(du -sh night/html | cut -f1) for $(ls night/html/*.html | wc -l) pages and $(ls night/html/plots/*.svg | wc -l) plots"

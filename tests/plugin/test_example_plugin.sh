#!/usr/bin/env bash
# Builds examples/plugin the way a user would — against an installed kcert, not the source
# tree — runs its two cases, and checks the plugin loader's errors.
#   test_example_plugin.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
WORK=$(mktemp -d /tmp/kcert-plugin-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_contains() { grep -qF -- "$2" <<<"$1" || fail "expected '$2' in: $1"; }

cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
KCERT="$WORK/prefix/bin/kcert"
cmake -S "$SRC/examples/plugin" -B "$WORK/plugin" -G Ninja -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null
cmake --build "$WORK/plugin" >/dev/null
PLUGIN="$WORK/plugin/libfused_rmsnorm_example.so"
[[ -f $PLUGIN ]] || fail "the example plugin was not built"

# 0. The installed kcert is complete: controls and docs are installed, and a nightly run
# outside any checkout (no ./testcases) uses the installed controls.
[[ -s $WORK/prefix/share/kcert/testcases/negative/rmsnorm/n1_gemma_rmsnorm_offset_bf16.yaml ]] || fail "controls not installed"
[[ -s $WORK/prefix/share/doc/kcert/method.md ]] || fail "docs not installed"
[[ -s $WORK/prefix/share/man/man1/kcert-nightly.1 ]] || fail "man pages not installed"
[[ -s $WORK/prefix/share/bash-completion/completions/kcert ]] || fail "bash completion not installed"
mkdir -p "$WORK/elsewhere"
(cd "$WORK/elsewhere" && "$KCERT" nightly --profile smoke --filter n1_gemma --no-db --quiet --report r >"$WORK/n.txt" 2>&1) ||
  fail "installed nightly without a folder: $(cat "$WORK/n.txt")"
expect_contains "$(cat "$WORK/n.txt")" "using the installed controls in $WORK/prefix/share/kcert/testcases"
grep -q '"id": "n1_gemma_rmsnorm_offset_bf16"' "$WORK/elsewhere/r/results.json" || fail "installed controls did not run"

# 0b. Where the build has the Python module, the installed package imports from the prefix,
# with the prefix's libkcert (its RUNPATH), and runs kcert's command line (docs/python.md).
PYTHON=$(sed -n 's/^KCERT_PYTHON_INTERPRETER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
if [[ -n $PYTHON && -d $BUILD/python/kcert ]]; then
  module=$(find "$WORK/prefix" -path '*/kcert/_C.*.so' | head -1)
  [[ -n $module ]] || fail "the Python module was not installed"
  site=$(dirname "$(dirname "$module")")
  (cd "$WORK/elsewhere" && PYTHONPATH=$site "$PYTHON" - "$WORK/prefix" <<'PY') || fail "the installed Python package"
import sys
import kcert
prefix = sys.argv[1]
assert kcert.__file__.startswith(prefix), kcert.__file__
maps = open("/proc/self/maps").read()
libkcert = {line.split()[-1] for line in maps.splitlines() if "libkcert.so" in line}
assert libkcert and all(p.startswith(prefix) for p in libkcert), libkcert
PY
  out=$(cd "$WORK/elsewhere" && PYTHONPATH=$site "$PYTHON" -m kcert list rmsnorm 2>&1) || fail "python -m kcert list: $out"
  expect_contains "$out" "gemma_offset_in_w"
  # An installed distribution (issue 33): importlib.metadata knows kcert and its pytest11 entry
  # point, and pytest loads the plugin with no conftest; a conftest that still names it does
  # not register it twice (the entry point is named after the module).
  (cd "$WORK/elsewhere" && PYTHONPATH=$site "$PYTHON" - <<'PY') || fail "the installed distribution's metadata"
from importlib import metadata
d = metadata.distribution("kcert")
assert d.version, d.version
eps = [e for e in d.entry_points if e.group == "pytest11"]
assert [(e.name, e.value) for e in eps] == [("kcert.pytest_plugin", "kcert.pytest_plugin")], eps
files = {str(f) for f in d.files}
assert any(f.startswith("kcert/_C.") for f in files) and "kcert/pytest_plugin.py" in files, files
PY
  mkdir -p "$WORK/pytest/plain" "$WORK/pytest/conftest"
  cat >"$WORK/pytest/plain/test_certify.py" <<'PY'
def test_same_kernel_both_sides(kcert):
    c = kcert.certify(family="rmsnorm", reference="llama", production="llama",
                      probe={"shape": {"tokens": 16, "hidden": 64}}, replicates=16)
    assert c.result["verdict"] in ("PASS", "INCONCLUSIVE"), c.result["verdict"]
PY
  cp "$WORK/pytest/plain/test_certify.py" "$WORK/pytest/conftest/"
  echo 'pytest_plugins = ["kcert.pytest_plugin"]' >"$WORK/pytest/conftest/conftest.py"
  for dir in plain conftest; do
    out=$(cd "$WORK/pytest/$dir" && PYTHONPATH=$site "$PYTHON" -m pytest -q -p no:cacheprovider 2>&1) ||
      fail "pytest with the installed plugin ($dir): $out"
    expect_contains "$out" "1 passed"
    help=$(cd "$WORK/pytest/$dir" && PYTHONPATH=$site "$PYTHON" -m pytest --help 2>&1) || fail "pytest --help ($dir): $help"
    expect_contains "$help" "--kcert-replicates"
  done
  echo "installed Python package: $site"
fi

# 1. Its correct variant passes and its defective one is flagged, as the YAML expects.
"$KCERT" --plugin "$PLUGIN" run "$SRC/examples/plugin/cases" --expect --quiet --brief --json "$WORK/r.json" >"$WORK/out.txt" \
  || fail "cases did not meet their expectations: $(cat "$WORK/out.txt")"
python3 - "$WORK/r.json" <<'PY'
import json, sys
d = {r["id"]: r for r in json.load(open(sys.argv[1]))["results"]}
ok, bad = d["example_fused_rmsnorm_ok"], d["example_fused_rmsnorm_truncating_store"]
assert ok["verdict"] == "PASS", ok["verdict"]
assert bad["gates"]["bias"]["verdict"] == "FAIL", bad["gates"]["bias"]
assert ok["production"]["version"] == "fused_rmsnorm_example@0.3.1", ok["production"]
assert bad["production"]["version"] == "fused_rmsnorm_example@0.3.1", bad["production"]
assert ok["reference"]["version"] == "kcert-builtin/1", ok["reference"]
PY

# 2. The same through KCERT_PLUGINS and through a case's `plugins:` key.
KCERT_PLUGINS="$PLUGIN" "$KCERT" run "$SRC/examples/plugin/cases" --expect --quiet --brief >/dev/null \
  || fail "KCERT_PLUGINS did not load the plugin"
mkdir -p "$WORK/cases"
{ echo "plugins: [\"$PLUGIN\"]"; cat "$SRC/examples/plugin/cases/fused_rmsnorm_ok.yaml"; } >"$WORK/cases/ok.yaml"
# A case file does not load code on its own: refused before any library is opened ...
out=$("$KCERT" run "$WORK/cases/ok.yaml" --expect --quiet --brief 2>&1) && fail "a case's plugins: key loaded code unasked"
expect_contains "$out" "a case file does not load code on its own"
expect_contains "$out" "--allow-case-plugins"
# ... unless the user names the plugin, or trusts case files.
"$KCERT" --plugin "$PLUGIN" run "$WORK/cases/ok.yaml" --expect --quiet --brief >/dev/null \
  || fail "a case's plugins: key named by --plugin too was refused"
"$KCERT" --allow-case-plugins run "$WORK/cases/ok.yaml" --expect --quiet --brief >/dev/null \
  || fail "--allow-case-plugins did not let the case's plugins: key load the plugin"
# A plugin others can write is refused before dlopen runs any of its code.
mkdir -p "$WORK/shared" && cp "$PLUGIN" "$WORK/shared/w.so" && chmod o+w "$WORK/shared/w.so"
out=$("$KCERT" --plugin "$WORK/shared/w.so" list 2>&1) && fail "a world-writable plugin was loaded"
expect_contains "$out" "writable by everyone"
chmod o-w "$WORK/shared/w.so" && chmod o+w "$WORK/shared"
out=$("$KCERT" --plugin "$WORK/shared/w.so" list 2>&1) && fail "a plugin in a world-writable folder was loaded"
expect_contains "$out" "without the sticky bit"
chmod o-w "$WORK/shared"

# 3. Clear errors.
out=$("$KCERT" --plugin "$WORK/missing.so" list 2>&1) && fail "a missing plugin was accepted"
expect_contains "$out" "missing.so: no such file"
# A real shared library that is not a plugin: yaml-cpp's (0.7 on Debian 12, 0.8 on 13).
yaml_lib=$(ls /usr/lib/x86_64-linux-gnu/libyaml-cpp.so.0.* | head -1)
out=$("$KCERT" --plugin "$yaml_lib" list 2>&1) && fail "a non-plugin library was accepted"
expect_contains "$out" "not a kcert plugin"
echo "not a library" >"$WORK/text.so"
out=$("$KCERT" --plugin "$WORK/text.so" list 2>&1) && fail "a text file was accepted"
expect_contains "$out" "cannot load"
cat >"$WORK/old.c" <<'C'
struct info { int abi_version; const char* name; const char* version; };
const struct info* kcert_plugin_info(void) { static const struct info i = {99, "old_plugin", "0.0.1"}; return &i; }
void kcert_plugin_register(void* registry) { (void)registry; }
C
gcc -shared -fPIC -o "$WORK/old.so" "$WORK/old.c"
out=$("$KCERT" --plugin "$WORK/old.so" list 2>&1) && fail "another ABI version was accepted"
expect_contains "$out" "built against kcert plugin ABI 99, but this kcert has ABI 5"
cp "$PLUGIN" "$WORK/copy.so"
out=$("$KCERT" --plugin "$PLUGIN" --plugin "$WORK/copy.so" list 2>&1) && fail "a duplicate variant was accepted"
expect_contains "$out" "variant 'fused_rmsnorm' of family 'rmsnorm' is already registered"
out=$("$KCERT" run "$SRC/examples/plugin/cases" 2>&1) && fail "cases ran without their plugin"
expect_contains "$out" "family 'rmsnorm' has no variant 'fused_rmsnorm' (available: aten_rms_norm, "
expect_contains "$out" ", fused_weight_fp32, gemma, "
sed 's/production: {variant: fused_rmsnorm}/production: {variant: fused_rmsnorm, version: "9"}/' \
  "$SRC/examples/plugin/cases/fused_rmsnorm_ok.yaml" >"$WORK/versioned.yaml"
out=$("$KCERT" --plugin "$PLUGIN" run "$WORK/versioned.yaml" 2>&1) && fail "a YAML version for a plugin variant was accepted"
expect_contains "$out" "comes from plugin fused_rmsnorm_example@0.3.1"
out=$("$KCERT" --plugin "$PLUGIN" list rmsnorm)
expect_contains "$out" "fused_rmsnorm_trunc"
echo "1 passed, 0 failed"

#!/usr/bin/env bash
# What a Python variant costs (issue 33; docs/benchmarks.md, "Python variants"): N1 with its
# C++ pair (gemma, gemma_offset_in_w) and with the Python twins of tests/python/rmsnorm_kernels.py,
# which give the same results bit for bit. Three runs, interleaved ROUNDS times:
#   cpp      the kcert binary, C++ variants
#   py-cpp   python -m kcert, the same C++ variants (the front end's own cost)
#   py-py    python -m kcert, the Python twins, in process (--isolation none)
#   py-spawn python -m kcert, the Python twins in a spawned Python worker (the default)
# Prints the kernel seconds (runtime.kernel_seconds: the kernels' calls, both sides) and the
# wall seconds of each, and the ratios to cpp from the same rounds.
#   bench/python-over-cpp.sh [BUILD_DIR] [PROFILE] [ROUNDS]
set -euo pipefail
BUILD=$(realpath "${1:-build}")
PROFILE=${2:-smoke}
ROUNDS=${3:-3}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=$(sed -n 's/^KCERT_PYTHON_INTERPRETER:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
PY=${PY:-/usr/bin/python3}
[[ -d $BUILD/python/kcert ]] || { echo "no Python module in $BUILD (docs/python.md)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/kcert-python-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
N1=$SRC/testcases/negative/rmsnorm/n1_gemma_rmsnorm_offset_bf16.yaml
mkdir -p "$WORK/cpp" "$WORK/py"
cp "$N1" "$WORK/cpp/n1.yaml"
sed -e 's/^reference: .*/reference: {variant: py_gemma}/' -e 's/^production: .*/production: {variant: py_gemma_offset_in_w}/' \
  "$N1" >"$WORK/py/n1.yaml"
kernels=$SRC/tests/python/rmsnorm_kernels.py
run() {  # NAME CMD...
  local name=$1; shift
  local s e
  s=$(date +%s.%N)
  "$@" --json "$WORK/$name.json" >/dev/null 2>&1 || [[ $? -eq 1 ]]  # N1 FAILs: exit 1
  e=$(date +%s.%N)
  python3 - "$WORK/$name.json" "$name" "$(echo "$e - $s" | bc -l)" >>"$WORK/rows" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(sys.argv[2], r["runtime"]["kernel_seconds"], sys.argv[3])
PY
}
for r in $(seq 1 "$ROUNDS"); do
  run cpp "$BUILD/kcert" run "$WORK/cpp/n1.yaml" --profile "$PROFILE" --quiet --brief
  PYTHONPATH=$BUILD/python run py-cpp "$PY" -m kcert run "$WORK/cpp/n1.yaml" --profile "$PROFILE" --quiet --brief
  PYTHONPATH=$BUILD/python run py-py "$PY" -m kcert --python "$kernels" --isolation none run "$WORK/py/n1.yaml" --profile "$PROFILE" --quiet --brief
  PYTHONPATH=$BUILD/python run py-spawn "$PY" -m kcert --python "$kernels" run "$WORK/py/n1.yaml" --profile "$PROFILE" --quiet --brief
done
python3 - "$WORK/rows" "$PROFILE" "$ROUNDS" <<'PY'
import collections, sys
k, w = collections.defaultdict(float), collections.defaultdict(float)
for line in open(sys.argv[1]):
    name, ks, ws = line.split()
    k[name] += float(ks); w[name] += float(ws)
n = int(sys.argv[3])
print(f"N1 at profile {sys.argv[2]}, {n} round(s), means")
print(f"{'run':<9} {'kernel s':>9} {'ratio':>6} {'wall s':>8} {'ratio':>6}")
for name in ("cpp", "py-cpp", "py-py", "py-spawn"):
    print(f"{name:<9} {k[name]/n:>9.3f} {k[name]/k['cpp']:>6.2f} {w[name]/n:>8.2f} {w[name]/w['cpp']:>6.2f}")
PY

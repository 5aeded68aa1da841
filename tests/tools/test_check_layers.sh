#!/usr/bin/env bash
# The include check (tools/check-layers.py) passes on this tree and fails on each kind of
# planted back-edge: a lower layer including a higher one, a torch-free layer including
# LibTorch directly or through a project header, Python outside its face.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
check="$here/tools/check-layers.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 "$check" "$here"

fresh() {  # a copy of the folders the check reads
  rm -rf "$work/tree" && mkdir -p "$work/tree"
  (cd "$here" && tar cf - harness eval include python/src) | (cd "$work/tree" && tar xf -)
}
expect_finding() {  # expect_finding NAME PATTERN: the check fails and names the planted edge
  local out rc=0
  out=$(python3 "$check" "$work/tree" 2>&1) || rc=$?
  if [ "$rc" -ne 1 ]; then
    echo "FAIL ($1): exit $rc, expected 1"; echo "$out"; exit 1
  fi
  if ! grep -qE -- "$2" <<<"$out"; then
    echo "FAIL ($1): no finding matching '$2'"; echo "$out"; exit 1
  fi
  echo "ok: $1: $(grep -E -- "$2" <<<"$out" | head -1)"
}

fresh
echo '#include "harness/engine/engine.hpp"' >> "$work/tree/harness/stats/ulp.hpp"
expect_finding "stats includes the engine" \
  '^harness/stats/ulp.hpp:[0-9]+: layer: harness/stats \(layer 1\) includes harness/engine/engine.hpp'

fresh
echo '#include "harness/runner/suite.hpp"' >> "$work/tree/harness/engine/engine.cpp"
expect_finding "engine includes the runner" '^harness/engine/engine.cpp:[0-9]+: layer: .*harness/runner/suite.hpp'

fresh
echo '#include <ATen/ATen.h>' >> "$work/tree/harness/gates/bias_gate.cpp"
expect_finding "a gate includes ATen" '^harness/gates/bias_gate.cpp:[0-9]+: torch-free: harness/gates includes <ATen/ATen.h>'

fresh  # through an allowed header that gains a LibTorch include
echo '#include "harness/numerics/torch_api.hpp"' >> "$work/tree/harness/kernels/schema.hpp"
expect_finding "the loader reaches LibTorch through kernels/schema.hpp" \
  'torch-free: harness/(contract|testcase) reaches LibTorch through harness/kernels/schema.hpp -> harness/numerics/torch_api.hpp'

fresh
echo '#include "harness/numerics/runtime.hpp"' >> "$work/tree/eval/calibration.cpp"
expect_finding "eval includes a LibTorch layer's header" \
  '^eval/calibration.cpp:[0-9]+: torch-free: eval includes harness/numerics/runtime.hpp from harness/numerics'

fresh
echo '#include <pybind11/pybind11.h>' >> "$work/tree/harness/store/json.cpp"
expect_finding "pybind11 outside python/" '^harness/store/json.cpp:[0-9]+: python: includes <pybind11/pybind11.h>'

fresh  # a project header in angle brackets is on every target's include path too
echo '#include <harness/runner/suite.hpp>' >> "$work/tree/harness/stats/ulp.hpp"
expect_finding "an angle-bracket back-edge" '^harness/stats/ulp.hpp:[0-9]+: layer: .*harness/runner/suite.hpp'

fresh
echo '#include <kcert/plugin.hpp>' >> "$work/tree/eval/calibration.cpp"
expect_finding "eval includes the plugin header through include/" \
  '^eval/calibration.cpp:[0-9]+: torch-free: eval includes include/kcert/plugin.hpp'

fresh  # a relative include resolves beside the including file, as the compiler does
echo '#include "../engine/engine.hpp"' >> "$work/tree/harness/gates/bias_gate.cpp"
expect_finding "a relative back-edge" '^harness/gates/bias_gate.cpp:[0-9]+: layer: .*harness/engine/engine.hpp'

fresh  # a folder without a layer is a finding, and LibTorch reached through it is another
mkdir -p "$work/tree/harness/newdir"
printf '#pragma once\n#include <torch/torch.h>\n' > "$work/tree/harness/newdir/x.hpp"
echo '#include "harness/newdir/x.hpp"' >> "$work/tree/eval/calibration.cpp"
expect_finding "a folder without a layer" '^harness/newdir: layer: a folder of sources'
expect_finding "LibTorch through a folder without a layer" \
  '^eval/calibration.cpp:[0-9]+: torch-free: eval reaches LibTorch through harness/newdir/x.hpp -> <torch/torch.h>'

fresh  # an include cycle does not hide LibTorch behind the header that closes it
printf '#pragma once\n#include "harness/kernels/cycle_b.hpp"\n#include "harness/numerics/torch_api.hpp"\n' \
  > "$work/tree/harness/kernels/cycle_a.hpp"
printf '#pragma once\n#include "harness/kernels/cycle_a.hpp"\n' > "$work/tree/harness/kernels/cycle_b.hpp"
echo '#include "harness/kernels/cycle_a.hpp"' >> "$work/tree/harness/kernels/schema.hpp"
echo '#include "harness/kernels/cycle_b.hpp"' >> "$work/tree/harness/contract/test_case.hpp"
expect_finding "LibTorch behind an include cycle" \
  '^harness/contract/test_case.hpp:[0-9]+: torch-free: harness/contract reaches LibTorch through harness/kernels/cycle_b.hpp'

fresh  # a command function of 62 lines (a signature on two lines, 59 statements, the brace) is too long
{
  echo 'int long_command(int x,'
  echo '                 int y) {'
  for i in $(seq 1 58); do echo "  x += y + $i;"; done
  echo '  return x;'
  echo '}'
} >> "$work/tree/harness/cli/main.cpp"
expect_finding "a command function over 60 lines" \
  '^harness/cli/main.cpp:[0-9]+: thin commands: long_command is 62 lines \(at most 60 in harness/cli/\)'

fresh  # 60 lines is allowed, and the same function outside cli/ is not the rule's business
{
  echo 'int command_of_sixty(int x) {'
  for i in $(seq 1 57); do echo "  x += $i;"; done
  echo '  return x;'
  echo '}'
} | tee -a "$work/tree/harness/cli/main.cpp" >> "$work/tree/harness/runner/suite.cpp"
for i in $(seq 1 10); do sed -i 's/^  return x;$/  x += 1;\n  return x;/' "$work/tree/harness/runner/suite.cpp"; done
python3 "$check" "$work/tree" >/dev/null || { echo "FAIL: a 60-line command function or a long runner function was refused"; python3 "$check" "$work/tree"; exit 1; }
echo "ok: 60 lines in cli/ and a longer function in runner/ pass"

echo "include check: passes on the tree, fails on each planted back-edge and on a long command function"

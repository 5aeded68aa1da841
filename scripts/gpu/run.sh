#!/usr/bin/env bash
# One command for a borrowed GPU machine (docs/gpu.md): builds kcert against that machine's
# Python torch (a CUDA wheel), runs the smoke suite with --device cuda and with --device cpu,
# then the contract-shape suite on the GPU, compares the verdicts control by control, and
# leaves everything in OUT.
#
#   scripts/gpu/run.sh OUT
#
# Made for the machines this project borrows (Ubuntu 24.04, 16 cores, torch 2.11+cu130 in a
# venv, nvcc, CMake and ninja; no network; about 15 minutes in all), so it:
#   - needs nothing from a network: the libraries the machine lacks (libpqxx, libpq, yaml-cpp,
#     fmt, CLI11, nlohmann-json, Eigen, Boost headers) travel with the working tree as Debian
#     packages in .gpu-debs/ (scripts/gpu/fetch-debs.sh .gpu-debs, on a Debian 12 machine);
#     without them the machine's own -dev packages must be there;
#   - stores nothing in a database (no PostgreSQL there): results are JSON files;
#   - keeps to a deadline: KCERT_GPU_DEADLINE seconds from its start (default 540, under the
#     device tool's 10 minutes a command); a stage that would start with too little time left
#     is skipped and said so, and a suite cut by the deadline keeps what it finished;
#   - writes at most 8 files, none in subfolders (what the device tool brings back):
#       OUT/summary.txt          what ran, how long, the environment, the verdict differences
#       OUT/build.log            configure and build output
#       OUT/smoke-cuda.json      kcert suite --profile smoke --device cuda --json
#       OUT/smoke-cpu.json       the same on the machine's CPU
#       OUT/contract-cuda.json   kcert suite (contract shapes) --device cuda --json
#       OUT/tables.txt           the falsifiability tables of the three suites
#       OUT/compare.txt          scripts/compare-suite.py: smoke cpu vs cuda; contract cuda vs
#                                KCERT_GPU_CPU_REFERENCE (a contract-shape CPU suite JSON) if set
#
# On a machine without a GPU (this project's CI and developers' machines) the same script
# builds and runs the CPU part, so everything but the GPU itself is checked before a lease:
# KCERT_GPU_ALLOW_NO_GPU=1 scripts/gpu/run.sh OUT.
# Exit status: 0 when it built and every stage that ran finished; 1 otherwise.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${1:?usage: scripts/gpu/run.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
trap 'rm -rf "$out/.build"' EXIT
start=$(date +%s)
deadline=$((start + ${KCERT_GPU_DEADLINE:-540}))
py=${KCERT_PYTHON:-python3}
build=${KCERT_GPU_BUILD:-$ROOT/build-gpu}
summary=$out/summary.txt
: >"$summary"
say() { echo "run.sh: $*" | tee -a "$summary"; }
left() { echo $((deadline - $(date +%s))); }
status=0

say "started $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs; deadline in $(left) s"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  sed 's/^/run.sh: GPU /' | tee -a "$summary"
"$py" -c 'import torch; print("run.sh: torch", torch.__version__, "CUDA", torch.version.cuda, "GPUs", torch.cuda.device_count())' \
  2>/dev/null | tee -a "$summary"
has_gpu=$("$py" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
if [[ $has_gpu != 1 && -z ${KCERT_GPU_ALLOW_NO_GPU:-} ]]; then
  say "no usable CUDA device (set KCERT_GPU_ALLOW_NO_GPU=1 to build and run the CPU part only)"
  exit 1
fi

# ---- build ----
debs_args=()
debs=${KCERT_GPU_DEBS:-$ROOT/.gpu-debs}
if compgen -G "$debs/*.deb" >/dev/null; then
  debs_args=(--debs "$debs")
  say "libraries from $(ls "$debs"/*.deb | wc -l) Debian packages in $debs"
fi
t0=$(date +%s)
if ! KCERT_PYTHON=$py "$ROOT/scripts/gpu/build-cuda.sh" "${debs_args[@]}" --build "$build" --out "$out/.build" --no-run \
    >"$out/build.log" 2>&1; then
  cat "$out/.build/configure.log" "$out/.build/build.log" >>"$out/build.log" 2>/dev/null
  say "build FAILED after $(( $(date +%s) - t0 )) s (build.log)"
  tail -30 "$out/build.log"
  rm -rf "$out/.build"
  exit 1
fi
cat "$out/.build/configure.log" "$out/.build/build.log" >>"$out/build.log" 2>/dev/null
rm -rf "$out/.build"
say "built in $(( $(date +%s) - t0 )) s"
if ((${#debs_args[@]})); then
  export LD_LIBRARY_PATH="$debs/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
kcert=$build/kcert
"$kcert" list --json >/dev/null 2>&1 || { say "the built kcert does not start: $("$kcert" list 2>&1 | tail -3)"; exit 1; }

# ---- suites ----
: >"$out/tables.txt"
# suite NAME SECONDS-NEEDED ARGS...: runs `kcert suite` into OUT/NAME.json under the
# deadline, appends its falsifiability table to tables.txt.
suite() {
  local name=$1 need=$2
  shift 2
  local budget
  budget=$(left)
  if ((budget < need)); then
    say "$name: SKIPPED, $budget s left and it needs about $need s"
    return 0
  fi
  local t0 rc
  t0=$(date +%s)
  timeout --signal=INT --kill-after=20 "$budget" "$kcert" suite "$ROOT/testcases" "$@" --json "$out/$name.json" \
    --quiet >"$out/.$name.txt" 2>&1
  rc=$?
  # 0: every control as expected; 1: a control not as expected (a finding, reported); 124:
  # the deadline cut it (the JSON holds what finished).
  say "$name: exit $rc in $(( $(date +%s) - t0 )) s"
  { echo "==== $name ($*) exit $rc"; sed -n '/^falsifiability/,$p' "$out/.$name.txt"; } >>"$out/tables.txt"
  ((rc == 0 || rc == 1)) || { status=1; tail -5 "$out/.$name.txt" | tee -a "$summary"; }
  rm -f "$out/.$name.txt"
}
if [[ $has_gpu == 1 ]]; then
  suite smoke-cuda 60 --profile smoke --device cuda
fi
suite smoke-cpu 90 --profile smoke --device cpu
if [[ $has_gpu == 1 ]]; then
  suite contract-cuda 120 --device cuda
fi

# ---- comparisons ----
: >"$out/compare.txt"
compare() {
  [[ -s $1 && -s $2 ]] || return 0
  { echo "==== $(basename "$1") -> $(basename "$2")"; "$py" "$ROOT/scripts/compare-suite.py" "$1" "$2" --fields-only; } \
    >>"$out/compare.txt" 2>&1
}
compare "$out/smoke-cpu.json" "$out/smoke-cuda.json"
if [[ -n ${KCERT_GPU_CPU_REFERENCE:-} ]]; then compare "$KCERT_GPU_CPU_REFERENCE" "$out/contract-cuda.json"; fi
{
  echo "---- environment"
  "$kcert" environment 2>&1
  "$kcert" environment --json 2>/dev/null | "$py" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["identity"], indent=1))' 
  echo "---- verdict differences (compare.txt has every field)"
  grep -E "verdict|^====" "$out/compare.txt" || echo "(none)"
} >>"$summary" 2>&1
say "done in $(( $(date +%s) - start )) s, exit $status"
exit $status

#!/usr/bin/env bash
# Builds kcert against the CUDA LibTorch of a Python torch install (docs/gpu.md), then runs
# the smoke suite on the GPU and on the CPU of the same machine and compares the verdicts.
#
#   scripts/gpu/build-cuda.sh [--debs DIR] [--build DIR] [--out DIR] [--no-run]
#
#   --debs DIR   Debian packages from scripts/gpu/fetch-debs.sh, unpacked with dpkg -x into
#                DIR/root for libraries the machine lacks (libpqxx, libpq); not needed when
#                the machine has libpqxx-dev
#   --build DIR  build folder (default build-cuda)
#   --out DIR    where the suite JSON, logs and the comparison go (default DIR of --build)
#   KCERT_PYTHON the Python whose torch to build against (default python3)
#
# Exit status: 0 built (and, unless --no-run, both suites ran), non-zero otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
debs="" build="$ROOT/build-cuda" out="" run=1
while (($#)); do
  case "$1" in
    --debs) debs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-run) run=0; shift ;;
    *) echo "build-cuda: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${out:-$build}
mkdir -p "$build" "$out"
py=${KCERT_PYTHON:-python3}

# LibTorch and its C++ ABI from the Python install (a pip wheel ships both). The prefix is
# the torch package folder, not its share/cmake: TorchConfig's find_library calls then find
# the wheel's libraries before any system libtorch (scripts/torch-source.sh says more).
torch_prefix=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
abi=$("$py" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null)
"$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "devices", torch.cuda.device_count())' 2>/dev/null
echo "build-cuda: Torch prefix $torch_prefix, _GLIBCXX_USE_CXX11_ABI=$abi"
[[ $abi == 1 ]] || { echo "build-cuda: this torch uses the pre-C++11 ABI; kcert links libraries built with the C++11 ABI" >&2; exit 1; }
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
[[ -n $nvcc ]] || { echo "build-cuda: no nvcc: a CUDA wheel's CMake config needs the CUDA toolkit" >&2; exit 1; }
cuda_root=$(dirname "$(dirname "$(realpath "$nvcc")")")

prefix_path="$torch_prefix"
ld_path=""
if [[ -n $debs ]]; then
  root="$debs/root"
  rm -rf "$root" && mkdir -p "$root"
  for d in "$debs"/*.deb; do dpkg -x "$d" "$root"; done
  libdir="$root/usr/lib/x86_64-linux-gnu"
  # The .pc files say prefix=/usr; point them at the unpacked tree.
  for pc in "$libdir"/pkgconfig/*.pc; do sed -i "s#^prefix=/usr\$#prefix=$root/usr#" "$pc"; done
  export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  prefix_path="$prefix_path;$root/usr"
  ld_path="$libdir"
  echo "build-cuda: unpacked $(ls "$debs"/*.deb | wc -l) Debian packages into $root"
fi

export CMAKE_POLICY_VERSION_MINIMUM=3.5  # CMake 4 refuses older minimums in third-party configs
start=$(date +%s)
# TORCH_CUDA_ARCH_LIST: without it the wheel's config try_runs a GPU probe at configure
# time; kcert compiles no CUDA code, so it only has to be valid (9.0: H100/H200).
cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
  -DKCERT_BUILD_TESTS=OFF -DKCERT_BUILD_BENCHMARKS=OFF -DCUDAToolkit_ROOT="$cuda_root" \
  -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" \
  ${ld_path:+-DCMAKE_BUILD_RPATH=$ld_path} > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
cmake --build "$build" --parallel "$(nproc)" > "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -60; exit 1; }
echo "build-cuda: built in $(( $(date +%s) - start )) s"
((run)) || exit 0

export LD_LIBRARY_PATH="${ld_path}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for device in cuda cpu; do
  t0=$(date +%s)
  set +e
  "$build/kcert" suite "$ROOT/testcases" --profile smoke --device "$device" --json "$out/suite-$device.json" --quiet \
    > "$out/suite-$device.txt" 2>&1
  rc=$?
  set -e
  echo "build-cuda: smoke suite on $device: exit $rc in $(( $(date +%s) - t0 )) s"
  sed -n '/^falsifiability/,$p' "$out/suite-$device.txt"
done
"$py" "$ROOT/scripts/compare-suite.py" "$out/suite-cpu.json" "$out/suite-cuda.json" --fields-only > "$out/cpu-vs-cuda.txt" || true
tail -60 "$out/cpu-vs-cuda.txt"

# Sourced by scripts/test.sh and scripts/nightly.sh, after scripts/install-deps.sh: the
# CMake options and the default build folder for the LibTorch that KCERT_TORCH selects
# (docs/platforms.md).
#
#   KCERT_TORCH=debian         Debian's libtorch-dev (the default): build/
#   KCERT_TORCH=pypi           the newest torch wheel from PyPI: build-pypi-VERSION/
#   KCERT_TORCH=pypi=2.11.0    a pinned release: build-pypi-2.11.0/
#
# Sets KCERT_TORCH_CMAKE_ARGS (an array) and KCERT_TORCH_BUILD (a folder name under the
# checkout). A wheel that is a CUDA build needs the CUDA toolkit to configure (its CMake
# config finds CUDAToolkit); kcert then links libtorch_cuda and can run with --device cuda.
kcert_torch_select() {
  KCERT_TORCH_CMAKE_ARGS=()
  KCERT_TORCH_BUILD=build
  [[ ${KCERT_TORCH:-debian} == debian ]] && return 0
  local home=${KCERT_HOME:-$ROOT/.kcert}
  local venv
  # A pinned release names its venv; the newest is the one install-deps.sh just selected.
  if [[ $KCERT_TORCH == pypi=* ]]; then
    venv=$home/torch/pypi-${KCERT_TORCH#pypi=}
  else
    venv=$(cat "$home/torch/selected" 2>/dev/null) ||
      { echo "torch-source: no PyPI torch selected; run scripts/install-deps.sh --torch $KCERT_TORCH" >&2; return 2; }
  fi
  [[ -f $venv/.complete ]] || { echo "torch-source: $venv is not a complete torch venv; run scripts/install-deps.sh --torch $KCERT_TORCH" >&2; return 2; }
  local py=$venv/bin/python info prefix abi cuda version
  # torch's import warns on stderr without NumPy (kcert uses none of it).
  info=$("$py" -c 'import torch, torch.utils
print(torch.utils.cmake_prefix_path, int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.version.cuda or "-", torch.__version__)' 2>/dev/null) ||
    { echo "torch-source: $py cannot import torch; remove $venv and run scripts/install-deps.sh again" >&2; return 2; }
  read -r prefix abi cuda version <<<"$info"
  if [[ $abi != 1 ]]; then
    # Debian's libpqxx, yaml-cpp and fmt use the C++11 ABI; a pre-C++11-ABI wheel (torch <
    # 2.7 on manylinux2014) cannot be linked with them.
    echo "torch-source: torch $version was built with _GLIBCXX_USE_CXX11_ABI=0; kcert links Debian's libraries (ABI 1): use torch >= 2.7" >&2
    return 2
  fi
  # The prefix is the torch package itself, not its share/cmake: TorchConfig's find_library
  # calls search CMAKE_PREFIX_PATH/lib before the system, so with Debian's libtorch-dev also
  # installed they would otherwise find /usr/lib's libtorch.so (CMakeLists.txt checks).
  prefix=$(dirname "$(dirname "$prefix")")
  KCERT_TORCH_CMAKE_ARGS=(-DCMAKE_PREFIX_PATH="$prefix")
  # The Python module (python/CMakeLists.txt) is built for the venv's Python, whose torch is
  # this LibTorch.
  KCERT_TORCH_CMAKE_ARGS+=(-DKCERT_PYTHON_EXECUTABLE="$py")
  if [[ $cuda != - ]]; then
    local nvcc
    nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
    [[ -n $nvcc ]] || { echo "torch-source: torch $version is a CUDA $cuda build; its CMake config needs the CUDA toolkit (nvcc), which is not on PATH or in /usr/local/cuda" >&2; return 2; }
    # TORCH_CUDA_ARCH_LIST: the wheel's CMake config otherwise try_runs a program to find the
    # GPUs (none here; CMake 3.25 also cannot compile it: "CUDA20"). kcert compiles no CUDA
    # code, so the list only has to be valid; 9.0 is the H100/H200 this project borrows.
    KCERT_TORCH_CMAKE_ARGS+=(-DCUDAToolkit_ROOT="$(dirname "$(dirname "$(realpath "$nvcc")")")"
                             -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}")
  fi
  # One folder per release: CMake caches Torch_DIR, Caffe2_DIR and the libraries it found, so
  # a folder configured for one venv would go on building against it after a version change.
  KCERT_TORCH_BUILD=build-pypi-${version%%+*}
  echo "torch-source: LibTorch $version from PyPI (CUDA ${cuda/-/none}) in $prefix"
}

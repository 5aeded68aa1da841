#!/usr/bin/env bash
# Installs (idempotently) every Debian 12 or 13 package that kcert's build, tests and nightly need,
# and, with --torch pypi, PyTorch from PyPI into a venv under kcert's state folder.
# Safe to run repeatedly: packages already present are skipped without touching apt.
#   scripts/install-deps.sh                       # build, nightly (Debian's LibTorch)
#   scripts/install-deps.sh --tests               # also what only the tests need (a local Slurm)
#   scripts/install-deps.sh --torch pypi          # LibTorch from PyPI's newest torch wheel
#   scripts/install-deps.sh --torch pypi=2.11.0   # ... from a pinned release
# --torch defaults to $KCERT_TORCH, else debian. The PyPI venv is $KCERT_HOME/torch/pypi-VERSION
# (KCERT_HOME defaults to .kcert in the checkout); its path is written to
# $KCERT_HOME/torch/selected, which scripts/torch-source.sh reads (docs/platforms.md).
set -euo pipefail

tests=0
torch=${KCERT_TORCH:-debian}
while (($#)); do
  case $1 in
    --tests) tests=1; shift ;;
    --torch) torch=${2:?--torch needs debian, pypi or pypi=VERSION}; shift 2 ;;
    --torch=*) torch=${1#--torch=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown argument '$1' (--tests, --torch debian|pypi|pypi=VERSION)" >&2; exit 2 ;;
  esac
done
case $torch in
  debian|pypi|pypi=[0-9]*) ;;
  *) echo "install-deps: --torch (or KCERT_TORCH) must be debian, pypi or pypi=VERSION, not '$torch'" >&2; exit 2 ;;
esac

# The package names that differ between releases. Debian 12 (bookworm): LibTorch 1.13,
# PostgreSQL 15, Catch2 2. Debian 13 (trixie): LibTorch 2.6, PostgreSQL 17, Catch2 3.
. /etc/os-release
case "${VERSION_CODENAME:-}" in
  bookworm) PG=15 ;;
  trixie) PG=17 ;;
  *)
    echo "install-deps: Debian 12 (bookworm) and 13 (trixie) are supported; this is '${PRETTY_NAME:-unknown}'." >&2
    echo "install-deps: trying the Debian 13 package names." >&2
    PG=17 ;;
esac

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # the man pages are written from the --help texts at build time
  help2man
  # libraries the build links (LibTorch: below, from Debian or PyPI)
  libpqxx-dev libpq-dev libyaml-cpp-dev libboost-math-dev libeigen3-dev
  libcli11-dev catch2 nlohmann-json3-dev libfmt-dev libbenchmark-dev
  # Without OpenBLAS, Debian's LibTorch runs fp32/fp64 GEMMs ~30x slower (reference BLAS).
  libopenblas0-pthread
  # the results database (server for the local cluster and the tests, client tools)
  postgresql-$PG postgresql-client-$PG
  # independent reference implementation used to regenerate statistics fixtures
  python3 python3-scipy python3-numpy
  # the plots of the nightly's HTML report (SVG)
  gnuplot-nox
)
if [[ $torch == debian ]]; then
  PACKAGES+=(libtorch-dev)
  # The Python module (`python3 -m kcert`, docs/python.md) is built against Debian's torch for
  # Python, which is the same LibTorch; torch's tensor caster needs the pybind11 headers.
  PACKAGES+=(python3-torch python3-dev pybind11-dev)
else
  # The venv's interpreter is Debian's python3 (a pyenv python3 on PATH may lack venv or
  # differ by machine); the wheel's Python ABI follows it. python3-pip asks PyPI for the
  # newest release before the venv exists.
  PACKAGES+=(python3-venv python3-pip)
  # The Python module is built for the venv's Python (Debian's python3): its headers.
  PACKAGES+=(python3-dev)
  # A PyPI torch is a CUDA build whose CMake config needs the CUDA toolkit: say so before a
  # 5 GB download rather than at configure time. (Debian has no CUDA 13 toolkit package; this
  # project's machines and CI come with /usr/local/cuda.)
  if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
    echo "install-deps: --torch $torch: PyPI's torch is a CUDA build, and configuring kcert against it needs the CUDA toolkit (nvcc on PATH or in /usr/local/cuda); none found" >&2
    exit 2
  fi
fi
if ((tests)); then
  # The Slurm job-array test starts a private single-node cluster (scripts/slurm/local-cluster.sh).
  # Not installed for the nightly alone: on a systemd machine the packages enable services.
  PACKAGES+=(slurmctld slurmd slurm-client munge)
  # pgrep/pkill for the local cluster's start and stop (a minimal Debian 13 root lacks procps).
  PACKAGES+=(procps)
  # The HTML report is tested in a real headless browser (tests/report/check_pages.py).
  PACKAGES+=(chromium chromium-driver python3-selenium fonts-liberation)
  # JUnit output is validated against docs/junit.xsd with xmllint.
  PACKAGES+=(libxml2-utils)
  # JSON outputs are validated against docs/schema with python3-jsonschema.
  PACKAGES+=(python3-jsonschema)
  # The Python module's tests (tests/python) run under pytest.
  PACKAGES+=(python3-pytest)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has no package lists; refresh them only when we actually install.
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[[ $torch == pypi* ]] || exit 0

# ---- PyTorch from PyPI: a venv per release under $KCERT_HOME/torch ----
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
home=${KCERT_HOME:-$ROOT/.kcert}
mkdir -p "$home/torch"
version=${torch#pypi}
version=${version#=}
if [[ -z $version ]]; then
  # The newest release on PyPI; offline, the newest venv already made here.
  version=$(/usr/bin/python3 -m pip index versions torch 2>/dev/null | sed -n 's/^torch (\(.*\))$/\1/p' || true)
  if [[ -z $version ]]; then
    version=$( (ls -d "$home"/torch/pypi-*/.complete 2>/dev/null || true) | sed 's#.*/pypi-\([^/]*\)/.complete#\1#' | sort -V | tail -1)
    [[ -n $version ]] || { echo "install-deps: cannot ask PyPI for torch's newest release, and no venv is made yet; pin one: --torch pypi=2.15.0" >&2; exit 2; }
    echo "install-deps: PyPI not reachable; using the newest venv made here, torch $version"
  fi
fi
venv=$home/torch/pypi-$version
if [[ ! -f $venv/.complete ]]; then
  # Made beside and renamed when whole: an interrupted install is never used.
  rm -rf "$venv" "$venv.partial"
  echo "install-deps: installing torch==$version from PyPI into $venv"
  start=$(date +%s)
  /usr/bin/python3 -m venv "$venv.partial"
  # The wheel's CMake config and libraries sit in site-packages; the venv's own path is
  # baked into its scripts, so it is made under its final name's parent and moved whole.
  "$venv.partial/bin/python" -m pip install -q --no-warn-script-location "torch==$version"
  "$venv.partial/bin/python" - 2>"$venv.partial/import.log" <<'PY' || { cat "$venv.partial/import.log" >&2; echo "install-deps: torch $version from PyPI does not import or has no CMake config" >&2; exit 2; }
import os, torch, torch.utils
cfg = os.path.join(torch.utils.cmake_prefix_path, "Torch", "TorchConfig.cmake")
assert os.path.exists(cfg), cfg
PY
  mv "$venv.partial" "$venv"
  # A venv's scripts name their interpreter by path; the moved venv's python still runs
  # (bin/python is a link to /usr/bin/python3), which is all kcert uses.
  touch "$venv/.complete"
  echo "install-deps: torch $version installed in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1) on disk"
fi
# The Python module's tests (tests/python) run under pytest, in the venv whose torch the module
# is built against.
# NumPy only quiets torch's import warning ("Failed to initialize NumPy") in the tests' output.
# transformers, pinned: its modules are the references of the controls that name
# testcases/python/hf_references.py (the nightly runs them), of
# tests/python/test_transformers_reference.py and of examples/python (docs/python.md).
KCERT_TRANSFORMERS=${KCERT_TRANSFORMERS:-5.25.0}
# The main job goes on without it (those controls SKIP, saying why); the tests need it.
if ! "$venv/bin/python" -c "import numpy, transformers
assert transformers.__version__ == '$KCERT_TRANSFORMERS'" 2>/dev/null; then
  if ! "$venv/bin/python" -m pip install -q --no-warn-script-location numpy "transformers==$KCERT_TRANSFORMERS"; then
    ((tests)) && { echo "install-deps: transformers $KCERT_TRANSFORMERS could not be installed" >&2; exit 2; }
    echo "install-deps: transformers $KCERT_TRANSFORMERS could not be installed; its controls will SKIP" >&2
  fi
fi
if ((tests)) && ! "$venv/bin/python" -c "import pytest" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --no-warn-script-location pytest
fi
echo "$venv" > "$home/torch/selected"
echo "install-deps: LibTorch from PyPI torch $version ($venv)"

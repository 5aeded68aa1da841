#!/usr/bin/env bash
# Installs (idempotently) every Debian 12 or 13 package that kcert's build, tests and nightly need.
# Safe to run repeatedly: packages already present are skipped without touching apt.
#   scripts/install-deps.sh           # build, nightly
#   scripts/install-deps.sh --tests   # also what only the tests need (a local Slurm)
set -euo pipefail

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
  # libraries the build links
  libtorch-dev libpqxx-dev libpq-dev libyaml-cpp-dev libboost-math-dev libeigen3-dev
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
if [[ ${1:-} == --tests ]]; then
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
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine has no package lists; refresh them only when we actually install.
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

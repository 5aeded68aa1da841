#!/usr/bin/env bash
# On a networked Debian 12 or 13 machine: downloads (apt-get download, nothing is installed)
# the Debian packages of every library kcert builds against except LibTorch, which on a GPU
# machine comes from its Python torch install. build-cuda.sh --debs DIR unpacks them with
# dpkg -x where the GPU machine has no package access.
#   scripts/gpu/fetch-debs.sh DIR
# Download on the release the GPU machine runs (or one whose glibc it has): the shared
# libraries (libpqxx, libpq, yaml-cpp, fmt) are linked against that release's glibc.
set -euo pipefail
dir=${1:?usage: fetch-debs.sh DIR}
mkdir -p "$dir"
cd "$dir"
# The direct dependencies of PACKAGE whose names match REGEX, from apt's own data: the
# versioned packages behind the unversioned names (libpqxx-dev -> libpqxx-7.10 on 13,
# libpqxx-6.4 on 12; libboost-math-dev -> libboost-math1.83-dev), so no release is spelled here.
depends_matching() { apt-cache depends "$1" 2>/dev/null | awk -v re="$2" '$1 == "Depends:" && $2 ~ re {print $2}'; }
packages=(libpqxx-dev libpq-dev libpq5 libyaml-cpp-dev libfmt-dev libcli11-dev nlohmann-json3-dev libeigen3-dev
          libboost-dev libboost-math-dev)
packages+=($(depends_matching libpqxx-dev '^libpqxx-[0-9]') $(depends_matching libyaml-cpp-dev '^libyaml-cpp[0-9]')
           $(depends_matching libfmt-dev '^libfmt[0-9]') $(depends_matching libboost-dev '^libboost[0-9.]*-dev$')
           $(depends_matching libboost-math-dev '^libboost-math[0-9.]*-dev$'))
# libpq links libldap; its package name carries the soname (libldap-2.5-0 on 12, libldap2 on 13).
packages+=($(depends_matching libpq5 '^libldap'))
# kcert's SHA-256 is OpenSSL's (libcrypto): libssl-dev for the headers and the link, and the
# runtime library behind it (libssl3 on 12 and 13, named from apt's data).
packages+=(libssl-dev $(depends_matching libssl-dev '^libssl[0-9]'))
echo "fetch-debs: ${packages[*]}"
apt-get download "${packages[@]}"
ls -l "$dir"

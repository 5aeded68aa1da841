#!/usr/bin/env bash
# On a networked Debian 12 machine: downloads the Debian packages of the libraries a GPU
# machine may lack (libpqxx and libpq, with libldap that libpq links), for build-cuda.sh to
# unpack with dpkg -x where there is no package access. Nothing is installed.
#   scripts/gpu/fetch-debs.sh DIR
set -euo pipefail
dir=${1:?usage: fetch-debs.sh DIR}
mkdir -p "$dir"
cd "$dir"
apt-get download libpqxx-6.4 libpqxx-dev libpq5 libpq-dev libldap-2.5-0
ls -l "$dir"

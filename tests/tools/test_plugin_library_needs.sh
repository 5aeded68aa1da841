#!/usr/bin/env bash
# libkcert (what a plugin links) holds numerics and kernels only: the store's PostgreSQL and
# OpenSSL and the loader's yaml-cpp stay in the kcert executable (issue 51, layers as build
# targets). Fails when libkcert needs one of them, and shows the check can see such a library
# by requiring the kcert executable to need it.
#
#   test_plugin_library_needs.sh LIBKCERT KCERT_EXECUTABLE
set -euo pipefail
lib=$1 exe=$2
higher='^lib(pq|pqxx[^ ]*|yaml-cpp|crypto|ssl)\.so'
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
lib_needs=$(needed "$lib")
exe_needs=$(needed "$exe")
if ! grep -Eq "$higher" <<<"$exe_needs"; then
  echo "FAIL: the check sees none of the store's or loader's libraries in $exe; it could not fail"
  echo "$exe needs:"; echo "$exe_needs"
  exit 1
fi
if grep -E "$higher" <<<"$lib_needs"; then
  echo "FAIL: $lib (what plugins link) needs the libraries above; they belong to the store or loader"
  exit 1
fi
echo "ok: $(basename "$lib") needs $(wc -l <<<"$lib_needs") libraries, none of the store's or loader's;"
echo "    $(basename "$exe") needs: $(grep -E "$higher" <<<"$exe_needs" | tr '\n' ' ')"

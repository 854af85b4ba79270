#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs tests/consumer, a program that uses snug as an outside
# project would, both ways snug can be consumed:
#   (a) installed:  cmake --install <snug build> --prefix P; find_package(snug) with CMAKE_PREFIX_PATH=P
#   (b) in-tree:    add_subdirectory(<snug source>) via -DSNUG_SOURCE_DIR
#
#   scripts/build_consumer.sh [SNUG_BUILD_DIR]
# With SNUG_BUILD_DIR (an already configured snug build, e.g. build/release),
# (a) installs from it, which also checks the package of a CUDA-enabled build.
# Without, (a) builds a minimal snug (no CUDA, tests, examples or benchmarks).
# (b) always uses SNUG_CUDA=OFF. Everything goes under build/consumer/.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SNUG_ROOT"

out="$SNUG_ROOT/build/consumer"
jobs="$(snug_jobs)"
mkdir -p "$out"
gen_for() { snug_generator "$1"; }

# ---- (a) find_package against an install prefix --------------------------------
if [ $# -ge 1 ]; then
  lib_build="$(cd "$1" && pwd)"
  [ -f "$lib_build/CMakeCache.txt" ] || { echo "build_consumer: $1 is not a configured build dir" >&2; exit 1; }
else
  lib_build="$out/snug"
  cmake -S "$SNUG_ROOT" -B "$lib_build" -G "$(gen_for "$lib_build")" -DCMAKE_BUILD_TYPE=Release \
    -DSNUG_CUDA=OFF -DSNUG_TESTS=OFF -DSNUG_EXAMPLES=OFF -DSNUG_BENCH=OFF
fi
# snug_plugins: libsnug-cuda.so / libsnug-mpi.so, when that build has them (installed beside libsnug.so).
cmake --build "$lib_build" --target snug snug_plugins -j"$jobs"
rm -rf "$out/prefix"
cmake --install "$lib_build" --prefix "$out/prefix" >/dev/null
echo "build_consumer: installed $(find "$out/prefix" -type f | wc -l) files from $lib_build into $out/prefix"
test -f "$out/prefix/include/snug/snug.h"
test -f "$out/prefix/include/snug/core/tensor.h"

rm -rf "$out/find"
cmake -S tests/consumer -B "$out/find" -G "$(gen_for "$out/find")" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$out/prefix"
cmake --build "$out/find" -j"$jobs"
"$out/find/consumer"
# The consumer asks for cuda::device_count(): an installed CUDA plugin must be
# what the installed libsnug loads for it (glibc's LD_DEBUG lists the files opened).
plugin="$(find "$out/prefix" -name 'libsnug-cuda.so' | head -n1)"
if [ -n "$plugin" ]; then
  opened="$(LD_DEBUG=files "$out/find/consumer" 2>&1 >/dev/null)"
  grep -q "file=$plugin " <<<"$opened" ||
    { echo "build_consumer: the installed libsnug did not load $plugin" >&2; exit 1; }
  echo "build_consumer: the installed consumer loaded $plugin"
fi

# ---- (b) add_subdirectory of the source tree -------------------------------------
cmake -S tests/consumer -B "$out/subdir" -G "$(gen_for "$out/subdir")" -DCMAKE_BUILD_TYPE=Release \
  -DSNUG_SOURCE_DIR="$SNUG_ROOT" -DSNUG_CUDA=OFF
cmake --build "$out/subdir" -j"$jobs"
"$out/subdir/consumer"

echo "build_consumer: both consumers built and ran"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs tests/consumer, a program that uses snug as an outside
# project would, every way snug can be consumed:
#   (a) installed:  cmake --install <snug build> --prefix P; find_package(snug) with CMAKE_PREFIX_PATH=P
#   (b) in-tree:    add_subdirectory(<snug source>) via -DSNUG_SOURCE_DIR
#   (c) pkg-config: a plain Makefile against P's lib/pkgconfig/snug.pc
# The consumer sets no C++ standard, and its sources fail to compile if Eigen
# is reachable; its CMakeLists fails if snug::snug's interface carries build
# flags or private dependencies. The installed tree is checked the same way.
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

# CMake 3.22 is snug's minimum (Ubuntu 22.04, JetPack 6): the consumers configure
# and build with it, from PyPI's cmake 3.22.6 wheel cached in build/cmake-3.22
# (SNUG_MIN_CMAKE=/path/to/cmake to use another). Without network and cache the
# system's CMake is used, and the script says so.
min_cmake() {
  if [ -n "${SNUG_MIN_CMAKE:-}" ]; then echo "$SNUG_MIN_CMAKE"; return; fi
  local dir="$SNUG_ROOT/build/cmake-3.22"
  local bin="$dir/cmake/data/bin/cmake"
  if [ ! -x "$bin" ]; then
    rm -rf "$dir" && mkdir -p "$dir/wheel"
    if timeout 120 python3 -m pip download -q --no-deps "cmake==3.22.6" -d "$dir/wheel" >/dev/null 2>&1 &&
      (cd "$dir" && python3 -m zipfile -e wheel/*.whl . && chmod +x cmake/data/bin/*); then
      :
    else
      echo "build_consumer: could not fetch CMake 3.22.6 from PyPI; the consumers use $(command -v cmake)" >&2
      echo cmake
      return
    fi
  fi
  echo "$bin"
}
ccmake_min="$(min_cmake)"
echo "build_consumer: consumers configure with $("$ccmake_min" --version | head -n1)"

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
test -f "$out/prefix/include/snug/version.h"
test -f "$out/prefix/include/snug/core/tensor.h"
fail() { echo "build_consumer: $*" >&2; exit 1; }
# Internal headers stay out of the prefix; the exported files carry no build flags.
if [ -n "$(find "$out/prefix/include" -path '*/core/cpu/*')" ]; then fail "the CPU backend's internal headers (core/cpu/) were installed"; fi
exported="$(cat "$out"/prefix/lib*/cmake/snug/snugTargets*.cmake "$out"/prefix/lib*/pkgconfig/snug.pc)"
for bad in -march -fsanitize -Wall Eigen eigen3; do
  if grep -q -- "$bad" <<<"$exported"; then fail "the installed package mentions '$bad'"; fi
done
lib="$(find "$out/prefix" -name 'libsnug.so.*' -type f | head -n1)"
if [ -n "$lib" ]; then
  soname="$(objdump -p "$lib" | awk '/SONAME/ {print $2}')"
  [[ "$soname" =~ ^libsnug\.so\.[0-9]+ ]] || fail "libsnug has no versioned SONAME ($soname)"
  echo "build_consumer: $lib, SONAME $soname"
fi

rm -rf "$out/find" "$out/subdir"
"$ccmake_min" -S tests/consumer -B "$out/find" -G "$(gen_for "$out/find")" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$out/prefix"
"$ccmake_min" --build "$out/find" -j"$jobs"
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
"$ccmake_min" -S tests/consumer -B "$out/subdir" -G "$(gen_for "$out/subdir")" -DCMAKE_BUILD_TYPE=Release \
  -DSNUG_SOURCE_DIR="$SNUG_ROOT" -DSNUG_CUDA=OFF
"$ccmake_min" --build "$out/subdir" -j"$jobs"
"$out/subdir/consumer"

# ---- (c) pkg-config and a plain Makefile ------------------------------------------
mkdir -p "$out/pc"
PKG_CONFIG_PATH="$(dirname "$(find "$out/prefix" -name snug.pc | head -n1)")" \
  make -s -C tests/consumer OUT="$out/pc" run

echo "build_consumer: the three consumers built and ran"

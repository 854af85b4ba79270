# SPDX-License-Identifier: MIT
# Cross-compiling snug for aarch64 Linux with Debian's toolchain
# (g++-aarch64-linux-gnu; zlib1g-dev:arm64 from `dpkg --add-architecture
# arm64`; scripts/install_deps.sh --aarch64 installs both). The preset
# `aarch64` uses this file; ctest runs each test under qemu-aarch64 (Debian
# qemu-user) through CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Programs run under the emulator with the target's libraries (/usr/aarch64-linux-gnu).
# One OpenMP thread under the emulator: a two-thread libgomp region does not
# finish under Debian 12's qemu-aarch64 (7.2) user mode (a plain `omp
# parallel for num_threads(2)` hangs too); threads are tested on x86.
# SNUG_TEST_ONE_THREAD=1 makes the tests that force two threads skip and say
# so (tests/test_util.h).
set(CMAKE_CROSSCOMPILING_EMULATOR env OMP_NUM_THREADS=1 SNUG_TEST_ONE_THREAD=1 qemu-aarch64 -L /usr/aarch64-linux-gnu)
# Libraries come from the target's multiarch folders; header-only packages
# (Eigen, doctest, CLI11, nlohmann-json) are found where the host installed them.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

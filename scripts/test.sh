#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite: installs what is missing (a no-op when all is there),
# configures the `release` preset (CUDA when nvcc and cuDNN are found; CUDA
# tests skip themselves without a GPU), builds everything, and runs ctest.
# Exits non-zero on any failure.
#   scripts/test.sh [extra ctest arguments, e.g. -R test_softmax]
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SNUG_ROOT"

scripts/install_deps.sh
snug_configure_preset release
cmake --build --preset release -j"$(snug_jobs)"
ctest --preset release -j2 "$@"

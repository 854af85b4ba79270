#!/usr/bin/env bash
# The README's first command: installs what is missing, builds the demo in the
# `release` preset and runs it. Arguments go to the demo (e.g. --json).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SNUG_ROOT"

scripts/install_deps.sh
snug_configure_preset release
cmake --build --preset release -j"$(snug_jobs)" --target demo
exec build/release/examples/demo "$@"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's first command: installs what is missing, builds the main demo
# (examples/charlm, the W-GPT char-level transformer on the bundled tiny
# shakespeare) in the `release` preset and trains it for a short run. Extra
# arguments go to charlm (e.g. --steps 3000 for the full quality run, --json).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SNUG_ROOT"

scripts/install_deps.sh
snug_configure_preset release
cmake --build --preset release -j"$(snug_jobs)" --target charlm
exec build/release/examples/charlm --steps 200 --eval-every 100 --eval-batches 10 --generate 200 "$@"

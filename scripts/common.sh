# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Sourced by scripts/*.sh and .ci/run: the repository root, ccache settings and
# the CMake generator. Not meant to be run on its own.

SNUG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SNUG_ROOT

# ccache: keep the caller's cache dir if set (default ~/.cache/ccache, which
# survives clean clones); BASEDIR makes paths relative so two clones share hits.
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$SNUG_ROOT}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"

# snug_generator <build dir>: the generator a build dir was configured with (a
# build dir cannot switch), else Ninja when installed, else CMake's default.
snug_generator() {
  local cache="$1/CMakeCache.txt"
  if [ -f "$cache" ]; then
    sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$cache"
  elif command -v ninja >/dev/null 2>&1; then
    echo Ninja
  else
    echo "Unix Makefiles"
  fi
}

# snug_configure_preset <preset>: cmake --preset with the generator chosen above.
snug_configure_preset() {
  local preset="$1"
  shift
  cmake --preset "$preset" -G "$(snug_generator "$SNUG_ROOT/build/$preset")" "$@"
}

snug_jobs() { nproc 2>/dev/null || echo 2; }

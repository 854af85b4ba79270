#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks, without a GPU, that every kernel the host code of cuda/*.cu launches
# was compiled into device code. A launch that nvcc's device pass cannot see
# (say, behind `#if !defined(__CUDA_ARCH__)`) instantiates no kernel: it still
# compiles and links, and fails only on a GPU, with
# cudaErrorInvalidDeviceFunction. That happened once to every unary and
# binary op; this catches it in CI.
#
#   tools/check_kernels.sh BUILD_DIR     (a configured build with the CUDA backend on)
#
# For each cuda/*.cu it takes the build's own nvcc command, asks for PTX for
# the first architecture instead of an object, and looks for an `.entry` of
# every __global__ function the file defines and of every elementwise body
# type (struct ...Body) it defines. Exit status 1 names what is missing.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:?usage: tools/check_kernels.sh BUILD_DIR}"
[ -f "$build/build.ninja" ] || { echo "check_kernels: $build has no build.ninja (configure with -G Ninja)" >&2; exit 2; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0 checked=0
for cu in "$ROOT"/cuda/*.cu; do
  name="$(basename "$cu")"
  obj="cuda/CMakeFiles/snug_cuda.dir/$name.o"
  cmd="$(cd "$build" && ninja -t commands "$obj" 2>/dev/null | tail -1)"
  [ -n "$cmd" ] || { echo "check_kernels: no build command for $obj" >&2; fail=1; continue; }
  # One architecture, PTX only: drop the launcher, the targets, the depfile and the output.
  arch="$(printf '%s' "$cmd" | grep -o 'arch=compute_[0-9]*' | head -1 | cut -d= -f2)"
  cmd="$(printf '%s' "$cmd" | sed -e 's/^[^ ]*ccache //' -e 's/--generate-code=[^ ]*//g' -e 's/ -MD / /' \
        -e 's/ -MT [^ ]*//' -e 's/ -MF [^ ]*//' -e 's/ -c / /' -e 's/ -o [^ ]*$//')"
  ptx="$tmp/$name.ptx"
  if ! (cd "$build" && eval "$cmd -arch=${arch:-compute_90} -ptx -o $ptx") > "$tmp/$name.log" 2>&1; then
    echo "check_kernels: could not compile $name to PTX:"; cat "$tmp/$name.log"; fail=1; continue
  fi
  # The entries go to a file, not through a pipe into `grep -q`: grep -q exits
  # at its first match, and under pipefail the writer's SIGPIPE then reads as
  # "not found" (it did, once, in CI).
  entries="$tmp/$name.entries"
  grep -E '^\.(visible )?\.?entry|\.entry ' "$ptx" > "$entries"
  # The kernels this file defines, and the elementwise body types (struct
  # ...Body) it defines: each of those exists to be launched.
  wanted="$(grep -oE '__global__ void [A-Za-z_][A-Za-z0-9_]*' "$cu" | awk '{print $3}')
$(grep -oE 'struct [A-Z][A-Za-z0-9]*Body\b' "$cu" | awk '{print $2}')"
  for k in $(printf '%s\n' "$wanted" | sort -u); do
    checked=$((checked + 1))
    # Mangled names carry the identifier with its length in front.
    if ! grep -q -- "${#k}$k" "$entries"; then
      echo "check_kernels: $name launches $k, but its device code has no such kernel"
      fail=1
    fi
  done
done
echo "check_kernels: $checked kernels and elementwise bodies checked in $(ls "$ROOT"/cuda/*.cu | wc -l) files: $([ $fail = 0 ] && echo ok || echo MISSING)"
exit $fail

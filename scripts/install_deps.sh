#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs snug's build dependencies from Debian's packages (nothing is
# vendored). Idempotent and fast when everything is already there: it asks dpkg
# first and runs apt-get (and apt-get update) only for what is missing.
# Needs root (or sudo) only when something is missing.
#
# The CUDA toolkit (nvcc, cuBLAS, cuDNN) is not installed here; it is found at
# /usr/local/cuda when present, and snug builds without it otherwise.
set -euo pipefail

#   scripts/install_deps.sh [--mpi] [--fuzz|--tsan] [--qemu] [--aarch64] [--cudnn-frontend]
required=(cmake g++ make ccache libeigen3-dev doctest-dev zlib1g-dev nlohmann-json3-dev libcli11-dev pkgconf python3)
for arg in "$@"; do
  case "$arg" in
    # Open MPI, only when asked: the MPI process group of distributed/ and its
    # tests under mpirun (docs/distributed.md). snug builds and runs without it
    # (SNUG_MPI finds nothing); .ci/run asks for it so those tests run.
    --mpi) required+=(openmpi-bin libopenmpi-dev) ;;
    # clang with libFuzzer and its OpenMP runtime (tools/fuzz.sh). The tsan
    # preset needs the same: clang with LLVM's OpenMP and its Archer tool
    # (libarcher.so), which makes OpenMP's barriers visible to TSan.
    --fuzz | --tsan) required+=(clang libclang-rt-14-dev libomp-14-dev) ;;
    # qemu-user: runs programs on an AVX2-only CPU model (qemu-x86_64 -cpu
    # Haswell) and aarch64 programs (qemu-aarch64); NOTE [ CPU levels ].
    --qemu) required+=(qemu-user) ;;
    # The aarch64 cross build (preset aarch64): the cross g++ and the target's
    # zlib (the arm64 architecture is added to dpkg for it).
    --aarch64) required+=(qemu-user g++-aarch64-linux-gnu zlib1g-dev:arm64) ;;
    # cuDNN's C++ frontend, header-only (attention through cuDNN's fused flash
    # attention, cuda/attention_cudnn.cpp): the pinned version's headers from
    # PyPI's nvidia-cudnn-frontend wheel, unpacked into ~/.cache/snug (or
    # $SNUG_CUDNN_FRONTEND_DIR), where cuda/CMakeLists.txt looks. Optional: on
    # failure the CUDA build compiles that path out.
    --cudnn-frontend) want_cudnn_frontend=1 ;;
    *) echo "install_deps: unknown option $arg (known: --mpi --fuzz --tsan --qemu --aarch64 --cudnn-frontend)" >&2; exit 2 ;;
  esac
done

cudnn_frontend_version=1.32.0
if [ "${want_cudnn_frontend:-0}" = 1 ]; then
  dest="${SNUG_CUDNN_FRONTEND_DIR:-$HOME/.cache/snug/cudnn_frontend}"
  if [ -f "$dest/include/cudnn_frontend.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$cudnn_frontend_version" ]; then
    echo "install_deps: cuDNN frontend $cudnn_frontend_version present in $dest"
  else
    tmp=$(mktemp -d)
    if python3 -m pip download -q --no-deps --only-binary=:all: "nvidia-cudnn-frontend==$cudnn_frontend_version" -d "$tmp" &&
      python3 -m zipfile -e "$tmp"/nvidia_cudnn_frontend-*.whl "$tmp/wheel" && [ -f "$tmp/wheel/include/cudnn_frontend.h" ]; then
      mkdir -p "$dest" && rm -rf "$dest/include" && cp -r "$tmp/wheel/include" "$dest/" &&
        echo "$cudnn_frontend_version" > "$dest/VERSION" &&
        echo "install_deps: cuDNN frontend $cudnn_frontend_version headers in $dest/include"
    else
      echo "install_deps: could not fetch nvidia-cudnn-frontend==$cudnn_frontend_version from PyPI; attention through cuDNN will be compiled out" >&2
    fi
    rm -rf "$tmp"
  fi
fi
optional=(ninja-build)  # faster builds; the scripts use it when present

is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${required[@]}" "${optional[@]}"; do
  is_installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all dependencies present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install_deps: missing packages (${missing[*]}) and not root; run as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
case " ${missing[*]} " in
  *":arm64 "*) dpkg --print-foreign-architectures | grep -qx arm64 || "${sudo[@]}" dpkg --add-architecture arm64 ;;
esac
"${sudo[@]}" apt-get update -qq
# Required packages must install; an optional one failing is only a warning.
req_missing=()
for p in "${missing[@]}"; do
  case " ${optional[*]} " in *" $p "*) ;; *) req_missing+=("$p") ;; esac
done
if [ ${#req_missing[@]} -gt 0 ]; then
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${req_missing[@]}"
fi
for p in "${optional[@]}"; do
  if ! is_installed "$p"; then
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$p" ||
      echo "install_deps: optional package $p could not be installed; continuing" >&2
  fi
done
echo "install_deps: done"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU check of issues 8 and 28, in one run on the device machine (one
# H100/H200; nvcc 13, CMake, ninja, Python with PyTorch + pip cuDNN; no Debian
# packages, no network): build with CUDA, run every test, train the examples
# on the GPU (charlm 3000 steps beside a CPU run, mnist's CNN one epoch, f16
# master weights, kill-and-resume, checkpoints across devices), run the GPU
# benchmarks beside PyTorch, and write one JSON file, all within a time budget
# (default 480 s).
#
#   tools/gpu_check.sh [--out DIR] [--third-party DIR] [--build-dir DIR] [--budget SECONDS]
#                      [--jobs N] [--skip-build] [--tests-cap SECONDS] [--no-bench] [--no-torch] [--quick]
#                      [--no-memcheck] [--no-train] [--train-steps N] [--mnist DIR]
#   tools/gpu_check.sh --pack DIR    (here: copy Eigen, doctest, CLI11, zlib and cuDNN frontend headers, and
#                                     MNIST when found, into DIR, the folder to put beside the
#                                     tree on the GPU machine)
#
# --out defaults to $OUT; the JSON is $OUT/gpu_check.json, logs beside it.
# --third-party defaults to $SNUG_THIRD_PARTY_DIR, else the first of
# ../third_party, third_party/, shared/third_party/ that exists (else the
# system's packages are used).
# Every stage runs under `timeout` with what is left of the budget, and the
# JSON is written even when a stage fails or is cut short (it says which).
# Exit status: 0 when the build and every test passed, 1 otherwise.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-}"
third_party="${SNUG_THIRD_PARTY_DIR:-}"
build_dir=""
budget=480
jobs="$(nproc 2>/dev/null || echo 4)"
skip_build=0 bench=1 torch_peer=1 quick=0 pack="" tests_cap=150 sanitize=1 train=1 train_steps=3000 mnist_dir=""

die() { echo "gpu_check: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --third-party) third_party="${2:?--third-party needs a directory}"; shift 2 ;;
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --tests-cap) tests_cap="${2:?--tests-cap needs seconds}"; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --no-torch) torch_peer=0; shift ;;
    --no-memcheck) sanitize=0; shift ;;
    --no-train) train=0; shift ;;
    --train-steps) train_steps="${2:?--train-steps needs a number}"; shift 2 ;;
    --mnist) mnist_dir="${2:?--mnist needs a directory}"; shift 2 ;;
    --quick) quick=1; shift ;;
    --pack) pack="${2:?--pack needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,/^set /p' "$0" | grep '^#'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
case "$budget" in ''|*[!0-9]*) die "--budget must be a whole number of seconds, got '$budget'" ;; esac
case "$tests_cap" in ''|*[!0-9]*) die "--tests-cap must be a whole number of seconds, got '$tests_cap'" ;; esac
case "$jobs" in ''|*[!0-9]*) die "--jobs must be a number, got '$jobs'" ;; esac
case "$train_steps" in ''|*[!0-9]*) die "--train-steps must be a number, got '$train_steps'" ;; esac

# ---- --pack: build the third-party folder on a machine that has the packages ----
if [ -n "$pack" ]; then
  eigen_src="$(dirname "$(find /usr/include /usr/local/include -maxdepth 3 -path '*/Eigen/Core' 2>/dev/null | head -1)")"
  doctest_src="$(find /usr/include /usr/local/include -maxdepth 2 -name doctest.h -path '*doctest/doctest.h' 2>/dev/null | head -1)"
  [ -n "$eigen_src" ] && [ -d "$eigen_src" ] || die "--pack: Eigen headers not found under /usr/include"
  [ -n "$doctest_src" ] || die "--pack: doctest/doctest.h not found under /usr/include"
  mkdir -p "$pack/eigen3" "$pack/doctest/doctest" "$pack/zlib/include" "$pack/zlib/lib"
  cp -r "$eigen_src" "$pack/eigen3/" && cp -r "$(dirname "$eigen_src")/unsupported" "$pack/eigen3/" 2>/dev/null
  cp "$(dirname "$doctest_src")"/*.h "$pack/doctest/doctest/"
  # CLI11: the programs' command lines (cmake/cli.cmake); header-only.
  cli11_src="$(find /usr/include /usr/local/include -maxdepth 2 -name CLI.hpp -path '*CLI/CLI.hpp' 2>/dev/null | head -1)"
  [ -n "$cli11_src" ] || die "--pack: CLI/CLI.hpp not found under /usr/include (apt-get install libcli11-dev)"
  mkdir -p "$pack/cli11" && cp -r "$(dirname "$cli11_src")" "$pack/cli11/"
  for h in zlib.h zconf.h; do [ -f "/usr/include/$h" ] && cp "/usr/include/$h" "$pack/zlib/include/"; done
  cp -P /usr/lib/x86_64-linux-gnu/libz.so* "$pack/zlib/lib/" 2>/dev/null
  # cuDNN's C++ frontend, header-only (scripts/install_deps.sh --cudnn-frontend).
  fe="${SNUG_CUDNN_FRONTEND_DIR:-$HOME/.cache/snug/cudnn_frontend}"
  if [ -f "$fe/include/cudnn_frontend.h" ]; then
    mkdir -p "$pack/cudnn_frontend" && cp -r "$fe/include" "$pack/cudnn_frontend/"
  else
    echo "gpu_check: --pack: no cuDNN frontend headers in $fe (scripts/install_deps.sh --cudnn-frontend); attention through cuDNN will not be built there" >&2
  fi
  # MNIST for `mnist --device cuda` (the GPU machine has no ../shared).
  for d in "$ROOT/datasets/mnist" "$ROOT/../shared/data/mnist"; do
    if [ -f "$d/train-images-idx3-ubyte.gz" ]; then mkdir -p "$pack/mnist" && cp "$d"/*-ubyte.gz "$pack/mnist/"; break; fi
  done
  echo "gpu_check: packed $(du -sh "$pack" | cut -f1) into $pack (eigen3/, doctest/, cli11/, zlib/$([ -d "$pack/cudnn_frontend" ] && echo ", cudnn_frontend/")$([ -d "$pack/mnist" ] && echo ", mnist/"))"
  exit 0
fi

[ -n "$out" ] || die "no output folder: pass --out DIR or set \$OUT"
mkdir -p "$out" || die "cannot create $out"
out="$(cd "$out" && pwd)"
if [ -z "$third_party" ]; then
  for d in "$ROOT/../third_party" "$ROOT/third_party" "$ROOT/shared/third_party"; do
    if [ -d "$d" ]; then third_party="$(cd "$d" && pwd)"; break; fi
  done
fi
[ -z "$build_dir" ] && build_dir="$ROOT/build/gpucheck"
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
log() { echo "[gpu_check $(( $(date +%s) - start ))s] $*"; }
results="$out/gpu_check.results"  # key<TAB>json-or-text lines, turned into JSON at the end
: > "$results"
put() { printf '%s\t%s\n' "$1" "$2" >> "$results"; }

# run_stage NAME SECONDS_CAP CMD...: runs under timeout (capped by the budget), log in $out/NAME.log.
run_stage() {
  local name="$1" cap="$2"; shift 2
  local t=$(( $(left) < cap ? $(left) : cap ))
  if [ "$t" -lt 5 ]; then put "skipped.$name" "\"out of time\""; log "$name: skipped (out of time)"; return 124; fi
  local s0=$(date +%s)
  timeout --kill-after=5 "$t" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  put "seconds.$name" "$(( $(date +%s) - s0 ))"
  put "rc.$name" "$rc"
  log "$name: rc $rc in $(( $(date +%s) - s0 ))s (limit ${t}s)"
  return $rc
}

# ---- toolchain: nvcc, cuDNN from the pip wheel, PyTorch ---------------------------
py="$(command -v python3 || command -v python || true)"
nvcc="$(command -v nvcc || true)"
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
cudnn_root=""
if [ -n "$py" ]; then
  # pip's cuDNN: site-packages/nvidia/cudnn/{include,lib}; search every nvidia/ folder on sys.path.
  cudnn_root="$("$py" - <<'PY' 2>/dev/null
import glob, os, sys
for p in sys.path:
    for h in glob.glob(os.path.join(p, "nvidia", "**", "include", "cudnn.h"), recursive=True):
        print(os.path.dirname(os.path.dirname(h))); sys.exit(0)
PY
)"
fi
# NCCL (the NCCL process group, docs/distributed.md): the toolkit's when it has
# nccl.h, else pip's site-packages/nvidia/nccl.
nccl_root=""
if [ -n "$nvcc" ] && [ ! -f "$(dirname "$nvcc")/../include/nccl.h" ] && [ -n "$py" ]; then
  nccl_root="$("$py" - <<'PY' 2>/dev/null
import glob, os, sys
for p in sys.path:
    for h in glob.glob(os.path.join(p, "nvidia", "**", "include", "nccl.h"), recursive=True):
        print(os.path.dirname(os.path.dirname(h))); sys.exit(0)
PY
)"
fi
put "toolchain.nccl_root" "\"${nccl_root:-toolkit}\""
put "toolchain.nvcc" "\"${nvcc:-none}\""
put "toolchain.cudnn_root" "\"${cudnn_root:-none}\""
put "toolchain.third_party" "\"${third_party:-system packages}\""
if [ -n "$cudnn_root" ]; then export LD_LIBRARY_PATH="$cudnn_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
if [ -n "$nccl_root" ]; then export LD_LIBRARY_PATH="$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
put "machine.gpu" "\"${gpu:-none visible}\""
put "machine.cores" "$(nproc 2>/dev/null || echo 0)"
log "nvcc: ${nvcc:-none}; cuDNN: ${cudnn_root:-toolkit/system}; third party: ${third_party:-system}; GPU: ${gpu:-none}"

# ---- build -------------------------------------------------------------------------
build_ok=0
if [ "$skip_build" = 0 ]; then
  cfg=(-S "$ROOT" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSNUG_CUDA=AUTO -DSNUG_CUDA_ARCHITECTURES=90
       -DSNUG_TESTS=ON -DSNUG_BENCH=ON -DSNUG_EXAMPLES=ON)
  [ -n "$nvcc" ] && cfg+=(-DCMAKE_CUDA_COMPILER="$nvcc")
  [ -n "$cudnn_root" ] && cfg+=(-DSNUG_CUDNN_ROOT="$cudnn_root")
  [ -n "$nccl_root" ] && cfg+=(-DSNUG_NCCL_ROOT="$nccl_root")
  [ -n "$third_party" ] && cfg+=(-DSNUG_THIRD_PARTY_DIR="$third_party")
  # cuDNN's C++ frontend (attention through cuDNN): packed beside the rest, or
  # where scripts/install_deps.sh --cudnn-frontend put it.
  [ -n "$third_party" ] && [ -f "$third_party/cudnn_frontend/include/cudnn_frontend.h" ] &&
    cfg+=(-DSNUG_CUDNN_FRONTEND_DIR="$third_party/cudnn_frontend")
  if run_stage configure 120 cmake "${cfg[@]}" && run_stage build 300 cmake --build "$build_dir" -j"$jobs"; then
    build_ok=1
  fi
else
  [ -f "$build_dir/CMakeCache.txt" ] && build_ok=1
fi
cuda_on="$(sed -n 's/^SNUG_CUDA_ENABLED:INTERNAL=//p' "$build_dir/CMakeCache.txt" 2>/dev/null)"
put "build.ok" "$([ $build_ok = 1 ] && echo true || echo false)"
put "build.cuda" "\"${cuda_on:-unknown}\""

# ---- tests ---------------------------------------------------------------------------
tests_ok=0
if [ $build_ok = 1 ]; then
  run_stage tests "$tests_cap" ctest --test-dir "$build_dir" -j"$jobs" --output-on-failure --timeout 120 && tests_ok=1
  summary="$(grep -E 'tests passed|tests failed' "$out/tests.log" | tail -1)"
  put "tests.summary" "\"$summary\""
  put "tests.failed" "\"$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) .*/\1/p' "$out/tests.log" | tr '\n' ' ')\""
  # Were the CUDA tests run or skipped? (doctest prints the skip message.)
  # test_nccl is the one-GPU NCCL smoke run (a world of one through NCCL,
  # DataParallel included; docs/distributed.md); it skips without NCCL.
  for t in test_cuda test_cuda_parity test_nccl test_cuda_host test_stream test_update_math test_pipeline \
           test_device_prefetch test_alloc_policies; do
    if [ -x "$build_dir/tests/$t" ]; then
      timeout 120 "$build_dir/tests/$t" > "$out/$t.log" 2>&1
      trc=$?
      put "tests.$t" "\"rc $trc ; $(grep -c 'skipped: no' "$out/$t.log") skipped cases; $(grep -E 'test cases' "$out/$t.log" | tail -1 | tr -s ' ')\""
      # A crash or a sticky CUDA error ends the whole binary and hides the
      # cases after it: when it failed, run each case alone, one line each.
      if [ "$trc" != 0 ] && [ "$(left)" -gt 20 ]; then
        "$build_dir/tests/$t" --list-test-cases --no-version 2>/dev/null | grep -v '^\[doctest\]' | grep -v '^=*$' |
        while IFS= read -r tc; do
          [ -n "$tc" ] || continue
          [ "$(left)" -gt 10 ] || break
          # doctest's filters are wildcards: escape the characters it treats as such.
          pat="$(printf '%s' "$tc" | sed 's/[][*?,\\]/\\&/g')"
          timeout 60 "$build_dir/tests/$t" --test-case="$pat" >> "$out/$t.cases.log" 2>&1
          echo "rc $? : $tc" >> "$out/$t.cases.txt"
        done
        put "cases.$t" "\"$(tr '\n' ';' < "$out/$t.cases.txt" 2>/dev/null | sed 's/"/'"'"'/g')\""
      fi
    fi
  done
  put "build.nccl" "\"$(sed -n 's/^SNUG_NCCL_ENABLED:INTERNAL=//p' "$build_dir/CMakeCache.txt" 2>/dev/null)\""
fi
put "tests.ok" "$([ $tests_ok = 1 ] && echo true || echo false)"

# ---- training on the GPU (issue 28; docs/cuda.md "Training on a GPU") ------------------
# Each program's last stdout line is its JSON. The CPU run of charlm, the
# reference for the GPU's validation loss and speed, runs in the background on
# the cores the GPU runs leave free, from the start of this section.
last_json() { grep '^{' "$out/$1.log" 2>/dev/null | tail -1 || true; }
ch="$build_dir/examples/charlm" mn="$build_dir/examples/mnist"
if [ "$train" = 1 ] && [ $build_ok = 1 ] && [ -x "$ch" ] && [ -n "$py" ]; then
  cores="$(nproc 2>/dev/null || echo 4)"
  cpu_threads=$(( cores > 4 ? cores - 2 : 2 ))
  ( timeout "$(left)" env OMP_WAIT_POLICY=passive "$ch" --steps "$train_steps" --threads "$cpu_threads" --generate 0 \
      --json > "$out/charlm_cpu.log" 2>&1 ) &
  cpu_pid=$!
  run_stage charlm_cuda 120 "$ch" --device cuda --steps "$train_steps" --generate 100 --json \
    --profile "$out/charlm_cuda_trace.json" --profile-steps 3
  put "train.charlm_cuda" "$(last_json charlm_cuda)"
  run_stage charlm_cuda_f16_master 120 "$ch" --device cuda --steps "$train_steps" --amp f16 --half-params --generate 0 --json
  put "train.charlm_cuda_f16_master" "$(last_json charlm_cuda_f16_master)"
  # The memory features together on the GPU: bf16, accumulation, the planner.
  run_stage charlm_cuda_combo 60 "$ch" --device cuda --steps 200 --amp bf16 --half-params --accum 4 \
    --checkpoint auto --memory-budget 20MiB --generate 0 --json
  put "train.charlm_cuda_combo" "$(last_json charlm_cuda_combo)"
  [ -z "$mnist_dir" ] && for d in "$ROOT/datasets/mnist" "$ROOT/../shared/data/mnist" "${third_party:-/nonexistent}/mnist"; do
    [ -f "$d/train-images-idx3-ubyte.gz" ] && { mnist_dir="$d"; break; }
  done
  if [ -x "$mn" ] && [ -n "$mnist_dir" ]; then
    run_stage mnist_cnn_cuda 90 "$mn" --model cnn --device cuda --epochs 1 --workers 4 --data "$mnist_dir" --json
    put "train.mnist_cnn_cuda" "$(last_json mnist_cnn_cuda)"
  else
    put "train.mnist_cnn_cuda" "\"no MNIST (pass --mnist DIR or pack it with --pack)\""
  fi
  run_stage kill_resume_cuda 90 "$py" "$ROOT/tools/kill_resume_test.py" --charlm "$ch" --device cuda --kills 5 --steps 40
  put "train.kill_resume_cuda" "$(last_json kill_resume_cuda)"
  for pair in cuda:cuda cuda:cpu cpu:cuda; do
    run_stage "resume_${pair/:/_}" 60 "$py" "$ROOT/tools/device_resume_test.py" --charlm "$ch" \
      --save-device "${pair%%:*}" --resume-device "${pair##*:}"
    put "train.resume_${pair/:/_}" "$(last_json "resume_${pair/:/_}")"
  done
  # The CPU reference: waited for while the budget lasts.
  while kill -0 "$cpu_pid" 2>/dev/null && [ "$(left)" -gt 5 ]; do sleep 2; done
  kill "$cpu_pid" 2>/dev/null
  put "train.charlm_cpu" "$(last_json charlm_cpu)"
fi

# ---- compute-sanitizer's memcheck over the parity suite (out-of-bounds and
# misaligned device accesses that a passing comparison can still hide) ----
sanitizer="$(command -v compute-sanitizer || true)"
[ -z "$sanitizer" ] && [ -n "$nvcc" ] && [ -x "$(dirname "$nvcc")/compute-sanitizer" ] && sanitizer="$(dirname "$nvcc")/compute-sanitizer"
if [ "$sanitize" = 1 ] && [ $build_ok = 1 ] && [ -n "$sanitizer" ] && [ -x "$build_dir/tests/test_cuda_parity" ]; then
  run_stage memcheck 100 "$sanitizer" --tool memcheck --error-exitcode 3 "$build_dir/tests/test_cuda_parity"
  put "memcheck.errors" "\"$(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)\""
fi

# ---- benchmarks: snug beside PyTorch ---------------------------------------------------
sb="$build_dir/bench/snug-bench"
peer="$ROOT/bench/peers/gpu_torch.py"
bench_pair() {  # KEY CAP SNUG_ARGS... -- TORCH_ARGS...
  local key="$1" cap="$2"; shift 2
  local sargs=() targs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sargs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  targs=("$@")
  if [ -x "$sb" ] && [ ${#sargs[@]} -gt 0 ]; then
    run_stage "snug_$key" "$cap" "$sb" "${sargs[@]}" --json
    put "bench.$key.snug" "$(tail -1 "$out/snug_$key.log" | grep '^{' || echo '"no JSON (see log)"')"
  fi
  if [ "$torch_peer" = 1 ] && [ -n "$py" ] && [ ${#targs[@]} -gt 0 ]; then
    run_stage "torch_$key" "$cap" "$py" "$peer" "${targs[@]}"
    put "bench.$key.torch" "$(tail -1 "$out/torch_$key.log" | grep '^{' || echo '"no JSON (see log)"')"
  fi
}
if [ "$bench" = 1 ] && [ $build_ok = 1 ]; then
  n=8192 steps=10 big_steps=5
  [ "$quick" = 1 ] && n=2048 steps=3 big_steps=2
  bench_pair gemm_f32 60 cuda_gemm --n $n --dtype f32 -- gemm --n $n --dtype f32
  bench_pair gemm_bf16 60 cuda_gemm --n $n --dtype bf16 -- gemm --n $n --dtype bf16
  bench_pair alloc 30 cuda_alloc --bytes 1048576 --reps 2000 --
  bench_pair charlm 60 cuda_gpt --steps $steps -- gpt --steps $steps
  # The larger GPT with --amp bf16 on both sides, as the issue asks; then both in
  # f32, which still gives a like-for-like ratio if the autocast run fails.
  big=(--layers 12 --embd 768 --heads 12 --block 1024 --batch 8 --steps $big_steps --warmup 2)
  bench_pair gpt_large 120 cuda_gpt "${big[@]}" --amp bf16 -- gpt "${big[@]}" --amp bf16
  bench_pair gpt_large_f32 120 cuda_gpt "${big[@]}" -- gpt "${big[@]}"
  # GPT-2 (124M)'s shape: its vocabulary and tanh GELU (the cuBLASLt GELU epilogues); tokens/s and
  # model FLOPs utilisation (mfu) on both sides.
  gpt2=(--vocab 50257 --layers 12 --embd 768 --heads 12 --block 1024 --batch 8 --gelu tanh --steps $big_steps
        --warmup 2 --amp bf16)
  bench_pair gpt2_124m 120 cuda_gpt "${gpt2[@]}" -- gpt "${gpt2[@]}"
  # Where the larger GPT's bf16 step goes, op by op: two profiled steps with
  # every launch waiting for its kernels (docs/lab/gpu-performance-log.md).
  if [ -x "$sb" ]; then
    run_stage profile_gpt_large 60 env CUDA_LAUNCH_BLOCKING=1 "$sb" cuda_gpt --layers 12 --embd 768 --heads 12 \
      --block 1024 --batch 8 --steps 1 --warmup 1 --amp bf16 --profile "$out/profile_gpt_large.json"
  fi
fi

# ---- the JSON ----------------------------------------------------------------------
put "elapsed_seconds" "$(( $(date +%s) - start ))"
put "budget_seconds" "$budget"
# "+dirty" when the tree differs from that commit (a copied tree may carry an older .git).
dirty="$(git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || echo +dirty)"
put "commit" "\"$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$dirty\""
json="$out/gpu_check.json"
if [ -n "$py" ]; then
  "$py" - "$results" "$json" <<'PY'
import json, sys
res, path = {}, sys.argv[2]
for line in open(sys.argv[1]):
    key, _, val = line.rstrip("\n").partition("\t")
    try:
        v = json.loads(val)
    except ValueError:
        v = val
    d = res
    parts = key.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = v
def get(*ks):
    d = res
    for k in ks:
        if not isinstance(d, dict) or k not in d: return None
        d = d[k]
    return d
def ratio(a, b, field):
    if isinstance(a, dict) and isinstance(b, dict) and a.get(field) and b.get(field):
        return a[field] / b[field]
    return None
t = {}
r = ratio(get("bench", "gemm_bf16", "snug"), get("bench", "gemm_bf16", "torch"), "tflops")
t["gemm_bf16_vs_torch"] = {"ratio": r, "target": 0.7, "met": None if r is None else r >= 0.7}
a = get("bench", "alloc", "snug")
s = a.get("speedup") if isinstance(a, dict) else None
t["alloc_speedup"] = {"ratio": s, "target": 100, "met": None if s is None else s >= 100}
sg, tg = get("bench", "gpt_large", "snug"), get("bench", "gpt_large", "torch")
r = ratio(sg, tg, "tokens_per_s")
lower = None
if isinstance(sg, dict) and isinstance(tg, dict) and "peak_allocated_bytes" in sg and "peak_allocated_bytes" in tg:
    lower = sg["peak_allocated_bytes"] < tg["peak_allocated_bytes"]
# Issue 29: at least 1.0x PyTorch's tokens/s under bf16 with a peak at most PyTorch's (stretch
# 1.15x, llm.c's margin), at least 0.9x in f32 (TF32 off), W-GPT at least 1.4x.
no_higher = None
if isinstance(sg, dict) and isinstance(tg, dict) and "peak_allocated_bytes" in sg and "peak_allocated_bytes" in tg:
    no_higher = sg["peak_allocated_bytes"] <= tg["peak_allocated_bytes"]
t["gpt_large_vs_torch_amp"] = {"ratio": r, "target": 1.0, "stretch": 1.15, "lower_peak": lower,
                               "peak_at_most_torch": no_higher,
                               "met": None if r is None else (r >= 1.0 and bool(no_higher)),
                               "note": "both sides run --amp bf16 (autocast); gpt_large_f32 has both in f32"}
r32 = ratio(get("bench", "gpt_large_f32", "snug"), get("bench", "gpt_large_f32", "torch"), "tokens_per_s")
t["gpt_large_vs_torch_f32"] = {"ratio": r32, "target": 0.9, "met": None if r32 is None else r32 >= 0.9}
rw = ratio(get("bench", "charlm", "snug"), get("bench", "charlm", "torch"), "tokens_per_s")
t["wgpt_vs_torch"] = {"ratio": rw, "target": 1.4, "met": None if rw is None else rw >= 1.4}
s2, t2 = get("bench", "gpt2_124m", "snug"), get("bench", "gpt2_124m", "torch")
t["gpt2_124m"] = {"ratio": ratio(s2, t2, "tokens_per_s"),
                  "snug_tokens_per_s": s2.get("tokens_per_s") if isinstance(s2, dict) else None,
                  "torch_tokens_per_s": t2.get("tokens_per_s") if isinstance(t2, dict) else None,
                  "snug_mfu": s2.get("mfu") if isinstance(s2, dict) else None,
                  "torch_mfu": t2.get("mfu") if isinstance(t2, dict) else None,
                  "note": "reported beside PyTorch's (no target)"}
par = get("tests", "test_cuda_parity") or ""
t["parity_tests_pass"] = ("not run" if not par else "skipped: no GPU" if " 0 skipped cases" not in par else
                          bool(get("tests", "ok")) and par.startswith("rc 0 "))
# Issue 28: training on the GPU.
tr = res.get("train") if isinstance(res.get("train"), dict) else {}
def run_of(k):
    v = tr.get(k)
    return v if isinstance(v, dict) else None
gc, cc = run_of("charlm_cuda"), run_of("charlm_cpu")
if gc and cc:
    dv, sp = abs(gc["val_loss"] - cc["val_loss"]), gc["tokens_per_s"] / cc["tokens_per_s"]
    t["charlm_cuda_vs_cpu"] = {"val_loss_diff": dv, "speedup": sp, "target": "diff <= 0.02, speedup >= 5",
                               "met": dv <= 0.02 and sp >= 5}
else:
    t["charlm_cuda_vs_cpu"] = {"met": None, "note": "a run is missing (see charlm_cuda.log, charlm_cpu.log)"}
mc = run_of("mnist_cnn_cuda")
t["mnist_cnn_cuda"] = {"accuracy": mc and mc.get("test_accuracy"), "target": 0.985,
                       "met": None if not mc else mc["test_accuracy"] >= 0.985}
fm = run_of("charlm_cuda_f16_master")
if fm and gc:
    pb, dv = fm["param_bytes"] / gc["param_bytes"], abs(fm["val_loss"] - gc["val_loss"])
    t["f16_master_weights"] = {"param_bytes_ratio": pb, "val_loss_diff": dv, "target": "ratio 0.5, diff <= 0.03",
                               "met": abs(pb - 0.5) < 1e-9 and dv <= 0.03}
else:
    t["f16_master_weights"] = {"met": None}
rc = res.get("rc") if isinstance(res.get("rc"), dict) else {}
t["resume_gpu_bitwise"] = {"kill_resume_rc": rc.get("kill_resume_cuda"), "resume_cuda_cuda_rc": rc.get("resume_cuda_cuda"),
                           "met": None if "kill_resume_cuda" not in rc else
                           rc.get("kill_resume_cuda") == 0 and rc.get("resume_cuda_cuda") == 0}
t["resume_across_devices"] = {"cuda_to_cpu_rc": rc.get("resume_cuda_cpu"), "cpu_to_cuda_rc": rc.get("resume_cpu_cuda")}
pl = get("tests", "test_pipeline") or ""
t["placement_cuda_offload"] = {"test_pipeline": pl, "met": None if "; 0 skipped cases" not in pl else pl.startswith("rc 0 ")}
# The prefetcher's copy/compute overlap in charlm's trace: a copy interval (tid 1001)
# inside a compute-stream step (tid 1000).
import os
trace = os.path.join(os.path.dirname(path), "charlm_cuda_trace.json")
ov = None
if os.path.exists(trace):
    try:
        ev = json.load(open(trace))["traceEvents"]
        comp = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "device" and e.get("tid") == 1000]
        cop = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "device" and e.get("tid") == 1001]
        ov = {"copies": len(cop), "steps": len(comp),
              "copies_inside_a_step": sum(any(a >= s and b <= e for s, e in comp) for a, b in cop)}
    except (ValueError, KeyError) as err:
        ov = {"error": str(err)}
t["copy_compute_overlap"] = {"trace": ov, "met": None if not isinstance(ov, dict) or "copies" not in ov else
                             ov["copies_inside_a_step"] > 0}
res["targets"] = t
json.dump(res, open(path, "w"), indent=2, sort_keys=True)
PY
else
  # No Python: key/value lines as a JSON object of strings.
  { echo "{"; sed 's/\\/\\\\/g; s/"/\\"/g; s/^\([^\t]*\)\t\(.*\)$/  "\1": "\2",/' "$results"; echo '  "_": null'; echo "}"; } > "$json"
fi
log "wrote $json"
[ $build_ok = 1 ] && [ $tests_ok = 1 ]

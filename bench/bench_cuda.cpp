// SPDX-License-Identifier: MIT
// snug-bench cuda_gemm | cuda_alloc | cuda_gpt: the GPU numbers issue 8 asks
// for (tools/gpu_check.sh runs them beside bench/peers/gpu_torch.py). Each
// needs a GPU; without one it prints why (and {"skipped": ...} with --json)
// and exits 0, so scripts can run them anywhere.
//   snug-bench cuda_gemm  [--n 8192] [--dtype f32|bf16|f16] [--tf32] [--reps 10] [--json]
//   snug-bench cuda_alloc [--bytes 1048576] [--reps 2000] [--json]
//   snug-bench cuda_gpt   [--layers 4 --embd 128 --heads 4 --block 128 --batch 16] [--steps 10 --warmup 3]
//                         [--amp bf16|f16] [--profile FILE] [--json]
// cuda_gpt --profile FILE records two more steps after the timed ones with
// snug's profiler, prints the op table to stderr and writes a Chrome trace to
// FILE. Kernels are queued, so an op's time is its launch unless the process
// runs with CUDA_LAUNCH_BLOCKING=1, which makes each op wait for its kernels.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <snug/autograd/autocast.h>
#include <snug/core/backend.h>
#include <snug/core/generator.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/cuda/cuda_api.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include "bench/bench.h"

namespace snug::bench {
namespace {

const Device kGpu("cuda:0");

bool no_gpu(const Args& a, const char* name) {
  if (cuda::device_count() > 0) return false;
  const char* why = cuda::compiled() ? "no CUDA GPU is visible" : "this build of snug has no CUDA";
  if (a.json())
    std::printf("{\"bench\": \"%s\", \"skipped\": \"%s\"}\n", name, why);
  else
    std::printf("%s: skipped (%s)\n", name, why);
  return true;
}

void sync() { backend_for(kGpu).synchronize(kGpu); }

}  // namespace

SNUG_BENCH(cuda_gemm, "CUDA GEMM TFLOP/s through cuBLAS (--n 8192 --dtype f32|bf16|f16 [--tf32] --reps 10)",
           int_flag("n", 8192, "n x n x n"), choice_flag("dtype", "f32", {"f32", "bf16", "f16"}, "element type"),
           switch_flag("tf32", "let f32 products use TF32 tensor cores"),
           int_flag("reps", 10, "timed products (the median is reported)")) {
  if (no_gpu(args, "cuda_gemm")) return 0;
  const int64_t n = args.get_int("n"), reps = args.get_int("reps");
  const DType dt = parse_dtype(args.get("dtype"));
  cuda::set_allow_tf32(args.has("tf32"));
  manual_seed(1);
  const Tensor a = randn({n, n}, TensorOptions(dt, kGpu)), b = randn({n, n}, TensorOptions(dt, kGpu));
  for (int i = 0; i < 2; ++i) (void)raw::matmul(a, b);  // warm up: cuBLAS heuristics, workspace
  sync();
  std::vector<double> s;
  for (int64_t i = 0; i < reps; ++i) {
    const double t0 = now_seconds();
    Tensor c = raw::matmul(a, b);
    sync();
    s.push_back(now_seconds() - t0);
  }
  const double tflops = 2.0 * double(n) * double(n) * double(n) / median(s) / 1e12;
  if (args.json())
    std::printf(
        "{\"bench\": \"cuda_gemm\", \"n\": %lld, \"dtype\": \"%s\", \"tf32\": %s, \"tflops\": %.2f, "
        "\"ms\": %.3f}\n",
        (long long)n, dtype_name(dt), cuda::allow_tf32() ? "true" : "false", tflops, median(s) * 1e3);
  else
    std::printf("cuda_gemm %s n=%lld%s: %.1f TFLOP/s (median %.3f ms)\n", dtype_name(dt), (long long)n,
                cuda::allow_tf32() ? " tf32" : "", tflops, median(s) * 1e3);
  cuda::set_allow_tf32(false);
  return 0;
}

SNUG_BENCH(cuda_alloc, "cached allocate+free on cuda:0 vs cudaMalloc+cudaFree (--bytes 1048576 --reps 2000)",
           bytes_flag("bytes", "1048576", "size of each allocation (e.g. 1048576, 4MiB)"),
           int_flag("reps", 2000, "cached pairs timed (cudaMalloc gets a tenth, at least 10)")) {
  if (no_gpu(args, "cuda_alloc")) return 0;
  cuda::ensure_registered();
  const std::size_t bytes = std::size_t(args.get_int("bytes"));
  const int64_t reps = args.get_int("reps");
  memory::deallocate(kGpu, memory::allocate(kGpu, bytes));  // the segment is now cached
  double t0 = now_seconds();
  for (int64_t i = 0; i < reps; ++i) memory::deallocate(kGpu, memory::allocate(kGpu, bytes));
  const double cached_ns = (now_seconds() - t0) / double(reps) * 1e9;
  const int64_t raw_reps = std::max<int64_t>(reps / 10, 10);  // cudaMalloc is slow: fewer reps
  t0 = now_seconds();
  for (int64_t i = 0; i < raw_reps; ++i) cuda::device_free(cuda::device_malloc(bytes));
  const double raw_ns = (now_seconds() - t0) / double(raw_reps) * 1e9;
  if (args.json())
    std::printf(
        "{\"bench\": \"cuda_alloc\", \"bytes\": %zu, \"cached_ns\": %.1f, \"cudamalloc_ns\": %.1f, "
        "\"speedup\": %.1f}\n",
        bytes, cached_ns, raw_ns, raw_ns / cached_ns);
  else
    std::printf("cuda_alloc %zu bytes: cached %.0f ns, cudaMalloc+cudaFree %.0f ns (%.0fx)\n", bytes, cached_ns, raw_ns,
                raw_ns / cached_ns);
  return 0;
}

// A GPT training step on cuda:0 (AdamW as in docs/workloads.md). --amp bf16|f16
// runs the forward pass and the loss under autocast, as bench/peers/gpu_torch.py
// does with torch.autocast; parameters, gradients and AdamW stay f32. f16 adds
// a GradScaler (bf16 has f32's exponent range and needs none).
SNUG_BENCH(
    cuda_gpt,
    "GPT training step on cuda:0: tokens/s and peak memory (--layers --embd --heads --block --batch [--amp bf16|f16])",
    int_flag("layers", 4, "GPT layers"), int_flag("embd", 128, "channels (a multiple of --heads)"),
    int_flag("heads", 4, "attention heads"), int_flag("block", 128, "sequence length"),
    int_flag("vocab", 65, "vocabulary size"), int_flag("batch", 16, "batch size"),
    int_flag("steps", 10, "timed steps (the median is reported)"), int_flag("warmup", 3, "untimed steps first", 0),
    choice_flag("amp", "none", {"none", "bf16", "f16"}, "autocast the forward pass and loss (f16 with loss scaling)"),
    text_flag("profile", "", "profile two more steps: the op table to stderr, a Chrome trace to FILE", "FILE"),
    switch_flag("tf32", "let f32 products use TF32 tensor cores"),
    choice_flag("gelu", "none", {"none", "tanh"}, "the MLP's GELU: exact (erf) or the tanh approximation (GPT-2's)"),
    num_flag("peak-tflops", 0, "the GPU's dense peak TFLOP/s for the step's math, for mfu (0: H100/H200 known)",
             {0, 1e6})) {
  const std::string amp = args.get("amp");
  const bool autocast = amp != "none";
  const DType amp_dtype = amp == "f16" ? DType::f16 : DType::bf16;
  nn::models::GPTConfig cfg;
  cfg.layers = args.get_int("layers");
  cfg.embd = args.get_int("embd");
  cfg.heads = args.get_int("heads");
  cfg.block = args.get_int("block");
  cfg.vocab = args.get_int("vocab");
  cfg.gelu = args.get("gelu") == "tanh" ? GeluApprox::tanh : GeluApprox::none;
  check_gpt_flags(cfg);  // before the GPU check: a bad command line is an error anywhere
  if (no_gpu(args, "cuda_gpt")) return 0;
  const int64_t B = args.get_int("batch"), T = cfg.block, steps = args.get_int("steps"),
                warmup = args.get_int("warmup");
  cuda::set_allow_tf32(args.has("tf32"));
  manual_seed(1337);
  nn::models::GPT net(cfg);
  net.to(kGpu);
  nn::optim::AdamW opt(net.parameters(), {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  nn::amp::GradScaler scaler({.enabled = amp == "f16"});
  memory::reset_peak(kGpu);
  std::vector<double> ms;
  double loss_first = 0, loss_last = 0;
  const std::string prof_path = args.get("profile");
  std::unique_ptr<profiler::Profile> prof;
  const int64_t prof_steps = prof_path.empty() ? 0 : 2;
  for (int64_t s = 0; s < warmup + steps + prof_steps; ++s) {
    if (s == warmup + steps && prof_steps > 0) prof = std::make_unique<profiler::Profile>();
    Tensor seq = randint(0, cfg.vocab, Shape{B, T + 1}).to(kGpu);
    Tensor x = seq.narrow(1, 0, T).contiguous(), y = seq.narrow(1, 1, T).contiguous();
    sync();
    const double t0 = now_seconds();
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard ac(amp_dtype, autocast);
      loss = net.loss(x, y);
    }
    scaler.scale(loss).backward();  // the identity unless f16
    scaler.step(opt);
    scaler.update();
    const double l = loss.item();  // copies to the host: waits for the step
    if (s == 0) loss_first = l;
    if (s >= warmup + steps) continue;  // a profiled step
    loss_last = l;
    if (s >= warmup) ms.push_back((now_seconds() - t0) * 1e3);
  }
  if (prof) {
    prof->stop();
    prof->write_chrome_trace(prof_path);
    std::fprintf(stderr, "cuda_gpt: profile of %lld steps (trace in %s):\n%s", (long long)prof_steps, prof_path.c_str(),
                 prof->summary(40).c_str());
  }
  const double med = median(ms);
  const std::size_t peak = memory::peak_allocated(kGpu);
  // Model FLOPs utilisation as llm.c and the PaLM paper count it: 6 N + 12 L C T FLOPs a token
  // (N every parameter, the tied head once; the second term the attention's products, causal
  // masking not discounted), over the GPU's dense peak for the step's math.
  int64_t n_params = 0;
  for (const Tensor& p : net.parameters()) n_params += p.numel();
  const double flops_per_token = 6.0 * double(n_params) + 12.0 * double(cfg.layers * cfg.embd * T);
  const double tokens_per_s = double(B * T) / (med / 1e3);
  double peak_tflops = args.get_double("peak-tflops");
  const std::string gpu_name = cuda::properties(0).name;
  if (peak_tflops == 0 && (gpu_name.find("H100") != std::string::npos || gpu_name.find("H200") != std::string::npos))
    peak_tflops = autocast ? 989.4 : (args.has("tf32") ? 494.7 : 66.9);  // SXM dense: bf16/f16, TF32, f32
  const double mfu = peak_tflops > 0 ? tokens_per_s * flops_per_token / (peak_tflops * 1e12) : -1;
  if (args.json())
    std::printf(
        "{\"bench\": \"cuda_gpt\", \"layers\": %lld, \"embd\": %lld, \"block\": %lld, \"batch\": %lld, "
        "\"vocab\": %lld, \"gelu\": \"%s\", \"amp\": \"%s\", \"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, "
        "\"params\": %lld, \"flops_per_token\": %.4g, \"peak_tflops\": %.1f, \"mfu\": %.4f, "
        "\"gpu\": \"%s\", \"peak_allocated_bytes\": %zu, \"loss_first\": %.4f, \"loss_last\": %.4f}\n",
        (long long)cfg.layers, (long long)cfg.embd, (long long)T, (long long)B, (long long)cfg.vocab,
        args.get("gelu").c_str(), amp.c_str(), med, tokens_per_s, (long long)n_params, flops_per_token, peak_tflops,
        mfu, gpu_name.c_str(), peak, loss_first, loss_last);
  else
    std::printf("cuda_gpt (amp %s): %.2f ms/step, %.0f tokens/s, mfu %.3f, peak %s, loss %.4f -> %.4f\n", amp.c_str(),
                med, tokens_per_s, mfu, memory::format_bytes(peak).c_str(), loss_first, loss_last);
  cuda::set_allow_tf32(false);
  return 0;
}

}  // namespace snug::bench

// SPDX-License-Identifier: MIT
// snug-bench attention: causal self-attention forward + backward, the fused
// CPU op (NOTE [ Fused attention ]) against the unfused path, on the
// W-GPT shape by default, in the same run.
//
//   snug-bench attention [--batch 16] [--block 128] [--embd 128] [--heads 4]
//                        [--threads 2] [--samples 15] --json
//
// Prints the median milliseconds of forward and of forward + backward for both
// paths, their ratio (unfused / fused: above 1 means fused is faster), and the
// bytes each keeps alive for backward.
#include <cstdio>
#include <vector>

#include <snug/autograd/engine.h>
#include <snug/core/cpu/gemm.h>
#include <snug/core/generator.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/functional.h>
#include "bench/bench.h"

using namespace snug;

namespace {

struct Timing {
  double fwd_ms, fwd_bwd_ms;
  int64_t held_bytes;
};

Timing time_path(const Tensor& qkv, const Tensor& w, int64_t heads, bool fused, int samples) {
  std::vector<double> f, fb;
  int64_t held = 0;
  for (int s = 0; s < samples + 2; ++s) {  // two warm-up samples
    Tensor x = qkv.detach().clone();
    x.requires_grad_(true);
    const int64_t before = memory::stats(kCPU).allocated_bytes.current;
    double t0 = bench::now_seconds();
    Tensor y = nn::functional::causal_self_attention(x, heads, 0.0, false, fused);
    double t1 = bench::now_seconds();
    held = memory::stats(kCPU).allocated_bytes.current - before;
    (y * w).sum().backward();
    double t2 = bench::now_seconds();
    if (s >= 2) {
      f.push_back((t1 - t0) * 1e3);
      fb.push_back((t2 - t0) * 1e3);
    }
  }
  return {bench::median(f), bench::median(fb), held};
}

}  // namespace

SNUG_BENCH(attention,
           "causal self-attention forward+backward: fused CPU op vs unfused (--batch --block --embd --heads)",
           bench::int_flag("batch", 16, "batch size"), bench::int_flag("block", 128, "sequence length"),
           bench::int_flag("embd", 128, "channels (a multiple of --heads)"), bench::int_flag("heads", 4, "heads"),
           bench::int_flag("threads", 2, "compute threads"),
           bench::int_flag("samples", 15, "timed samples per path and round")) {
  const int64_t B = args.get_int("batch"), T = args.get_int("block"), C = args.get_int("embd"),
                H = args.get_int("heads");
  const int threads = int(args.get_int("threads")), samples = int(args.get_int("samples"));
  SNUG_FLAG_CHECK(C % H == 0, "--embd ", C, " must be a multiple of --heads ", H);
  kernels::set_num_threads(threads);
  Generator g(1337);
  Tensor qkv = randn({B, T, 3 * C}, TensorOptions(DType::f32), &g);
  Tensor w = randn({B, T, C}, TensorOptions(DType::f32), &g);
  // Interleave the two paths so that a change in machine load hits both.
  Timing fu{}, un{};
  std::vector<double> ff, ffb, uf, ufb;
  for (int r = 0; r < 3; ++r) {
    Timing a = time_path(qkv, w, H, true, samples), b = time_path(qkv, w, H, false, samples);
    ff.push_back(a.fwd_ms), ffb.push_back(a.fwd_bwd_ms), uf.push_back(b.fwd_ms), ufb.push_back(b.fwd_bwd_ms);
    fu = a, un = b;
  }
  fu.fwd_ms = bench::median(ff), fu.fwd_bwd_ms = bench::median(ffb);
  un.fwd_ms = bench::median(uf), un.fwd_bwd_ms = bench::median(ufb);
  if (args.json()) {
    std::printf(
        "{\"bench\":\"attention\",\"batch\":%lld,\"block\":%lld,\"embd\":%lld,\"heads\":%lld,\"threads\":%d,"
        "\"fused_fwd_ms\":%.3f,\"fused_fwd_bwd_ms\":%.3f,\"unfused_fwd_ms\":%.3f,\"unfused_fwd_bwd_ms\":%.3f,"
        "\"ratio_fwd\":%.3f,\"ratio_fwd_bwd\":%.3f,\"fused_held_bytes\":%lld,\"unfused_held_bytes\":%lld}\n",
        (long long)B, (long long)T, (long long)C, (long long)H, threads, fu.fwd_ms, fu.fwd_bwd_ms, un.fwd_ms,
        un.fwd_bwd_ms, un.fwd_ms / fu.fwd_ms, un.fwd_bwd_ms / fu.fwd_bwd_ms, (long long)fu.held_bytes,
        (long long)un.held_bytes);
  } else {
    std::printf("causal attention B=%lld T=%lld C=%lld H=%lld, %d threads (median ms)\n", (long long)B, (long long)T,
                (long long)C, (long long)H, threads);
    std::printf("  fused:   forward %.3f  forward+backward %.3f  held for backward %lld bytes\n", fu.fwd_ms,
                fu.fwd_bwd_ms, (long long)fu.held_bytes);
    std::printf("  unfused: forward %.3f  forward+backward %.3f  held for backward %lld bytes\n", un.fwd_ms,
                un.fwd_bwd_ms, (long long)un.held_bytes);
  }
  return 0;
}

// SPDX-License-Identifier: MIT
// snug-bench attention: self-attention forward + backward, the fused CPU op
// (NOTE [ Fused attention ]) against the unfused path, on the W-GPT shape by
// default, in the same run.
//
//   snug-bench attention [--batch 16] [--block 128] [--embd 128] [--heads 4]
//                        [--mask causal|none|padding|causal-padding]
//                        [--threads 2] [--samples 15] --json
//
// --mask: causal (the decoder's), none (an encoder without padding), padding
// (an encoder over sequences of seeded random lengths in [T/2, T], with their
// key padding mask), causal-padding. Prints the median milliseconds of forward
// and of forward + backward for both paths, their ratio (unfused / fused:
// above 1 means fused is faster), the bytes each keeps alive for backward, and
// the peak allocated during forward + backward above what existed before.
#include <cstdio>
#include <string>
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
  int64_t held_bytes, peak_bytes;
};

Timing time_path(const Tensor& qkv, const Tensor& w, int64_t heads, bool causal, const Tensor& pad, bool fused,
                 int samples) {
  std::vector<double> f, fb;
  int64_t held = 0, peak = 0;
  for (int s = 0; s < samples + 2; ++s) {  // two warm-up samples
    Tensor x = qkv.detach().clone();
    x.requires_grad_(true);
    const int64_t before = memory::stats(kCPU).allocated_bytes.current;
    memory::reset_peak(kCPU);
    double t0 = bench::now_seconds();
    Tensor y = nn::functional::self_attention(x, heads, causal, Tensor(), pad, 0.0, false, fused);
    double t1 = bench::now_seconds();
    held = memory::stats(kCPU).allocated_bytes.current - before;
    (y * w).sum().backward();
    double t2 = bench::now_seconds();
    peak = int64_t(memory::peak_allocated(kCPU)) - before;
    if (s >= 2) {
      f.push_back((t1 - t0) * 1e3);
      fb.push_back((t2 - t0) * 1e3);
    }
  }
  return {bench::median(f), bench::median(fb), held, peak};
}

}  // namespace

SNUG_BENCH(attention,
           "self-attention forward+backward: fused CPU op vs unfused (--batch --block --embd --heads --mask)",
           bench::int_flag("batch", 16, "batch size"), bench::int_flag("block", 128, "sequence length"),
           bench::int_flag("embd", 128, "channels (a multiple of --heads)"), bench::int_flag("heads", 4, "heads"),
           bench::choice_flag("mask", "causal", {"causal", "none", "padding", "causal-padding"},
                              "which keys each query sees: causal, all (none), all but padding"),
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
  const std::string mask = args.get("mask");
  const bool causal = mask == "causal" || mask == "causal-padding";
  Tensor pad;  // (B, T) bool, true past each sequence's length
  if (mask == "padding" || mask == "causal-padding") {
    pad = zeros({B, T}, DType::b8);
    const Tensor len = randint(T / 2, T + 1, {B}, DType::i64, &g);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = len.data<int64_t>()[b]; t < T; ++t) pad.data<bool>()[b * T + t] = true;
  }
  // Interleave the two paths so that a change in machine load hits both.
  Timing fu{}, un{};
  std::vector<double> ff, ffb, uf, ufb;
  for (int r = 0; r < 3; ++r) {
    Timing a = time_path(qkv, w, H, causal, pad, true, samples), b = time_path(qkv, w, H, causal, pad, false, samples);
    ff.push_back(a.fwd_ms), ffb.push_back(a.fwd_bwd_ms), uf.push_back(b.fwd_ms), ufb.push_back(b.fwd_bwd_ms);
    fu = a, un = b;
  }
  fu.fwd_ms = bench::median(ff), fu.fwd_bwd_ms = bench::median(ffb);
  un.fwd_ms = bench::median(uf), un.fwd_bwd_ms = bench::median(ufb);
  if (args.json()) {
    std::printf(
        "{\"bench\":\"attention\",\"batch\":%lld,\"block\":%lld,\"embd\":%lld,\"heads\":%lld,\"mask\":\"%s\","
        "\"threads\":%d,\"fused_fwd_ms\":%.3f,\"fused_fwd_bwd_ms\":%.3f,\"unfused_fwd_ms\":%.3f,"
        "\"unfused_fwd_bwd_ms\":%.3f,\"ratio_fwd\":%.3f,\"ratio_fwd_bwd\":%.3f,\"fused_held_bytes\":%lld,"
        "\"unfused_held_bytes\":%lld,\"fused_peak_bytes\":%lld,\"unfused_peak_bytes\":%lld}\n",
        (long long)B, (long long)T, (long long)C, (long long)H, mask.c_str(), threads, fu.fwd_ms, fu.fwd_bwd_ms,
        un.fwd_ms, un.fwd_bwd_ms, un.fwd_ms / fu.fwd_ms, un.fwd_bwd_ms / fu.fwd_bwd_ms, (long long)fu.held_bytes,
        (long long)un.held_bytes, (long long)fu.peak_bytes, (long long)un.peak_bytes);
  } else {
    std::printf("attention (mask %s) B=%lld T=%lld C=%lld H=%lld, %d threads (median ms)\n", mask.c_str(),
                (long long)B, (long long)T, (long long)C, (long long)H, threads);
    std::printf("  fused:   forward %.3f  forward+backward %.3f  held for backward %lld bytes, peak %lld bytes\n",
                fu.fwd_ms, fu.fwd_bwd_ms, (long long)fu.held_bytes, (long long)fu.peak_bytes);
    std::printf("  unfused: forward %.3f  forward+backward %.3f  held for backward %lld bytes, peak %lld bytes\n",
                un.fwd_ms, un.fwd_bwd_ms, (long long)un.held_bytes, (long long)un.peak_bytes);
  }
  return 0;
}

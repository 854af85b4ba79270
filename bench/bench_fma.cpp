// SPDX-License-Identifier: MIT
// snug-bench fma: the measured single-precision FMA peak of this machine at a
// CPU level (NOTE [ CPU levels ] in core/cpu/level.h), the yardstick GEMM
// numbers are quoted against (docs/performance.md).
//
//   snug-bench fma [--isa auto|avx512|avx2|baseline] [--runs R] [--iters N]
//
// Each thread runs independent chains of fused multiply-adds on registers:
// enough chains (kChains) to cover FMA latency (4 cycles) times issue width
// (2 ports), with operands that never leave registers. GFLOP/s = 2 * lanes *
// FMAs / second, with 16 lanes for AVX-512 and 8 for AVX2. --isa auto (the
// default) is the level snug's kernels use (snug::cpu_isa()), so that a GEMM's
// fraction of peak compares like with like; the baseline (SSE2, no FMA)
// counts a multiply and an add as one FMA over 4 lanes.
//
// Each variant is compiled for its own instruction set with a target
// attribute and runs only after CPUID says the CPU has it.
#include <cstdio>
#include <string>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include <snug/base/error.h>
#include <snug/core/cpu_isa.h>

#include "bench/bench.h"

namespace {

constexpr int kChains = 12;

// The twelve accumulators are named variables (not an array) so that they
// stay in registers; the empty asm keeps the compiler from folding the
// chains. Returns a value derived from them so the work cannot be elided.
#define SNUG_FMA_CHAINS(V, set1, fmadd, add, reduce, constraint)                                                \
  V a0 = set1(0.00f), a1 = set1(0.01f), a2 = set1(0.02f), a3 = set1(0.03f), a4 = set1(0.04f), a5 = set1(0.05f), \
    a6 = set1(0.06f), a7 = set1(0.07f), a8 = set1(0.08f), a9 = set1(0.09f), a10 = set1(0.10f), a11 = set1(0.11f); \
  const V x = set1(0.999999f), y = set1(1e-7f);                                                                   \
  for (long long i = 0; i < iters; ++i) {                                                                        \
    a0 = fmadd(a0, x, y);                                                                                        \
    a1 = fmadd(a1, x, y);                                                                                        \
    a2 = fmadd(a2, x, y);                                                                                        \
    a3 = fmadd(a3, x, y);                                                                                        \
    a4 = fmadd(a4, x, y);                                                                                        \
    a5 = fmadd(a5, x, y);                                                                                        \
    a6 = fmadd(a6, x, y);                                                                                        \
    a7 = fmadd(a7, x, y);                                                                                        \
    a8 = fmadd(a8, x, y);                                                                                        \
    a9 = fmadd(a9, x, y);                                                                                        \
    a10 = fmadd(a10, x, y);                                                                                      \
    a11 = fmadd(a11, x, y);                                                                                      \
    __asm__ volatile("" : constraint(a0), constraint(a1), constraint(a2), constraint(a3), constraint(a4),         \
                     constraint(a5), constraint(a6), constraint(a7), constraint(a8), constraint(a9),              \
                     constraint(a10), constraint(a11));                                                          \
  }                                                                                                              \
  V s = add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7)));                                      \
  s = add(s, add(add(a8, a9), add(a10, a11)));                                                                   \
  return reduce(s)

__attribute__((target("avx2,fma"))) inline float first_lane_256(__m256 v) { return _mm_cvtss_f32(_mm256_castps256_ps128(v)); }
float first_lane_128(__m128 v) { return _mm_cvtss_f32(v); }
__m128 mul_add_128(__m128 a, __m128 x, __m128 y) { return _mm_add_ps(_mm_mul_ps(a, x), y); }

__attribute__((noinline, target("avx512f"))) float chains_avx512(long long iters) {
  SNUG_FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_reduce_add_ps, "+v");
}
__attribute__((noinline, target("avx2,fma"))) float chains_avx2(long long iters) {
  SNUG_FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, first_lane_256, "+x");
}
__attribute__((noinline)) float chains_baseline(long long iters) {
  SNUG_FMA_CHAINS(__m128, _mm_set1_ps, mul_add_128, _mm_add_ps, first_lane_128, "+x");
}
#undef SNUG_FMA_CHAINS

struct Variant {
  std::string isa;
  float (*fn)(long long);
  int lanes;
};

// The variant for a level name; the level must run on this CPU.
Variant variant_for(const std::string& isa) {
  std::string level = isa;
  if (level == "native")  // a SNUG_NATIVE=ON build: the widest this CPU has
    level = __builtin_cpu_supports("avx512f") ? "avx512" : __builtin_cpu_supports("fma") ? "avx2" : "baseline";
  if (level == "avx512") {
    SNUG_CHECK(__builtin_cpu_supports("avx512f"), DeviceError, "fma --isa avx512: this CPU lacks AVX-512");
    return {level, chains_avx512, 16};
  }
  if (level == "avx2") {
    SNUG_CHECK(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), DeviceError,
               "fma --isa avx2: this CPU lacks AVX2 and FMA");
    return {level, chains_avx2, 8};
  }
  return {"baseline", chains_baseline, 4};
}

// GFLOP/s of `threads` threads each running v's chains for iters steps at once.
double measure(const Variant& v, int threads, long long iters) {
  volatile float sink = 0;
  double t0 = snug::bench::now_seconds();
#pragma omp parallel num_threads(threads)
  {
    float r = v.fn(iters);
#pragma omp critical
    sink = sink + r;
  }
  double dt = snug::bench::now_seconds() - t0;
  return 2.0 * v.lanes * kChains * double(iters) * threads / dt / 1e9;
}

}  // namespace

double snug::bench::fma_peak_gflops(int threads, long long iters) {
  return measure(variant_for(snug::cpu_isa()), threads, iters);
}

SNUG_BENCH(fma, "measured float32 FMA peak at a CPU level, 1 thread and 2 threads (--runs R)",
           snug::bench::choice_flag("isa", "auto", {"auto", "avx512", "avx2", "baseline"},
                                    "the instruction set (auto: the level snug's kernels use)"),
           snug::bench::int_flag("runs", 7, "runs (the median is reported)"),
           snug::bench::int_flag("iters", 20000000, "FMA steps per chain and run (~0.1 s at ~3 GHz)", 10)) {
  const int runs = int(args.get_int("runs"));
  const long long iters = args.get_int("iters");
  const Variant v = variant_for(args.get("isa") == "auto" ? snug::cpu_isa() : args.get("isa"));
  measure(v, 1, iters / 10);  // warm up (clocks, thread pool)
  measure(v, 2, iters / 10);
  std::vector<double> g1, g2;
  for (int r = 0; r < runs; ++r) {
    g1.push_back(measure(v, 1, iters));
    g2.push_back(measure(v, 2, iters));
  }
  double m1 = snug::bench::median(g1), m2 = snug::bench::median(g2);
  if (args.json())
    std::printf(
        "{\"bench\":\"fma\",\"isa\":\"%s\",\"gflops_1t\":%.1f,\"gflops_2t\":%.1f,\"runs\":%d,\"chains\":%d,"
        "\"lanes\":%d}\n",
        v.isa.c_str(), m1, m2, runs, kChains, v.lanes);
  else
    std::printf("fma peak (%s): %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on 2 threads (median of %d)\n", v.isa.c_str(),
                m1, m2, runs);
  return 0;
}

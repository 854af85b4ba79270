// SPDX-License-Identifier: MIT
// snug-bench fma: the measured single-precision FMA peak of this machine, the
// yardstick GEMM numbers are quoted against (docs/performance.md).
//
// Each thread runs independent chains of _mm512_fmadd_ps on registers: enough
// chains (kChains) to cover FMA latency (4 cycles) times issue width (2 ports),
// with operands that never leave registers. GFLOP/s = 2 * 16 * FMAs / second.
#include <cstdio>
#include <vector>

#include <omp.h>

#include "bench/bench.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

constexpr int kChains = 12;

#if defined(__AVX512F__)
// Returns a value derived from the accumulators so the work cannot be elided.
// The twelve accumulators are named variables (not an array) so that they stay
// in registers; the empty asm keeps the compiler from folding the chains.
__attribute__((noinline)) float fma_chains(long long iters) {
  __m512 a0 = _mm512_set1_ps(0.00f), a1 = _mm512_set1_ps(0.01f), a2 = _mm512_set1_ps(0.02f), a3 = _mm512_set1_ps(0.03f),
         a4 = _mm512_set1_ps(0.04f), a5 = _mm512_set1_ps(0.05f), a6 = _mm512_set1_ps(0.06f), a7 = _mm512_set1_ps(0.07f),
         a8 = _mm512_set1_ps(0.08f), a9 = _mm512_set1_ps(0.09f), a10 = _mm512_set1_ps(0.10f),
         a11 = _mm512_set1_ps(0.11f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (long long i = 0; i < iters; ++i) {
    a0 = _mm512_fmadd_ps(a0, x, y);
    a1 = _mm512_fmadd_ps(a1, x, y);
    a2 = _mm512_fmadd_ps(a2, x, y);
    a3 = _mm512_fmadd_ps(a3, x, y);
    a4 = _mm512_fmadd_ps(a4, x, y);
    a5 = _mm512_fmadd_ps(a5, x, y);
    a6 = _mm512_fmadd_ps(a6, x, y);
    a7 = _mm512_fmadd_ps(a7, x, y);
    a8 = _mm512_fmadd_ps(a8, x, y);
    a9 = _mm512_fmadd_ps(a9, x, y);
    a10 = _mm512_fmadd_ps(a10, x, y);
    a11 = _mm512_fmadd_ps(a11, x, y);
    __asm__ volatile(""
                     : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                       "+v"(a9), "+v"(a10), "+v"(a11));
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  return _mm512_reduce_add_ps(s);
}
constexpr int kLanes = 16;
#else
__attribute__((noinline)) float fma_chains(long long iters) {
  float acc[kChains * 8];
  for (int c = 0; c < kChains * 8; ++c) acc[c] = 0.001f * float(c);
  for (long long i = 0; i < iters; ++i)
    for (int c = 0; c < kChains * 8; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
  float s = 0;
  for (float v : acc) s += v;
  return s;
}
constexpr int kLanes = 8;
#endif

// GFLOP/s of `threads` threads each running fma_chains(iters) at once.
double measure(int threads, long long iters) {
  volatile float sink = 0;
  double t0 = snug::bench::now_seconds();
#pragma omp parallel num_threads(threads)
  {
    float r = fma_chains(iters);
#pragma omp critical
    sink = sink + r;
  }
  double dt = snug::bench::now_seconds() - t0;
  return 2.0 * kLanes * kChains * double(iters) * threads / dt / 1e9;
}

}  // namespace

double snug::bench::fma_peak_gflops(int threads, long long iters) { return measure(threads, iters); }

SNUG_BENCH(fma, "measured float32 FMA peak, 1 thread and 2 threads (--runs R)",
           snug::bench::int_flag("runs", 7, "runs (the median is reported)"),
           snug::bench::int_flag("iters", 20000000, "FMA steps per chain and run (~0.1 s at ~3 GHz)", 10)) {
  const int runs = int(args.get_int("runs"));
  const long long iters = args.get_int("iters");
  measure(1, iters / 10);  // warm up (clocks, thread pool)
  measure(2, iters / 10);
  std::vector<double> g1, g2;
  for (int r = 0; r < runs; ++r) {
    g1.push_back(measure(1, iters));
    g2.push_back(measure(2, iters));
  }
  double m1 = snug::bench::median(g1), m2 = snug::bench::median(g2);
  if (args.json())
    std::printf("{\"bench\":\"fma\",\"gflops_1t\":%.1f,\"gflops_2t\":%.1f,\"runs\":%d,\"chains\":%d,\"lanes\":%d}\n",
                m1, m2, runs, kChains, kLanes);
  else
    std::printf("fma peak: %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on 2 threads (median of %d)\n", m1, m2, runs);
  return 0;
}

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
__attribute__((noinline)) float fma_chains(long long iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * float(c));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (long long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], x, y);
    // The compiler cannot reorder or fold these: each depends on the last.
    __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]),
                     "+v"(acc[5]), "+v"(acc[6]), "+v"(acc[7]), "+v"(acc[8]), "+v"(acc[9]),
                     "+v"(acc[10]), "+v"(acc[11]));
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
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

SNUG_BENCH(fma, "measured float32 FMA peak, 1 thread and 2 threads (--runs R)") {
  const int runs = int(args.get_int("runs", 7));
  const long long iters = args.get_int("iters", 20000000);  // ~0.1 s per run at ~3 GHz
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
    std::printf("fma peak: %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on 2 threads (median of %d)\n", m1,
                m2, runs);
  return 0;
}

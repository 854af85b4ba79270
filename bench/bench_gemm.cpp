// SPDX-License-Identifier: MIT
// snug-bench gemm: float32 C = A x B, GFLOP/s of snug's gemm_f32 and of Eigen
// side by side in the same run (W-GEMM in docs/workloads.md).
//
//   snug-bench gemm --n 1024 --threads 2 --json
//   snug-bench gemm --m 2048 --n 384 --k 128 --ta 0 --tb 1 --json   (any shape)
//   snug-bench gemm --m 128 --n 128 --k 32 --tb 1 --batch 64 --json  (gemm_f32_batched)
//   snug-bench gemm --dtype int8 --n 1024 --json  (u8 x s8 -> i32 against f32, same shape)
//   snug-bench gemm --dtype bf16|f16 --n 1024 --json  (16-bit operands, f32 accumulation, against f32)
//
// GFLOP/s = 2 M N K / seconds, median over --samples timed samples after
// warm-up; a sample repeats the call until it lasts ~20 ms so that small
// shapes are timed above the clock's noise.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include <omp.h>
#include <Eigen/Core>

#include <snug/core/cpu/gemm.h>
#include <snug/core/cpu/gemm_int8.h>
#include <snug/core/half.h>
#include "bench/bench.h"

namespace {

struct Rate {
  double median, best;
};

// Median (and best) GFLOP/s of fn() doing `flops` each call. The best sample
// says what the code can do; the median is what to quote on a shared machine.
template <class Fn>
Rate time_gflops(Fn fn, double flops, int samples, const std::function<void()>& before_sample = {}) {
  using snug::bench::now_seconds;
  fn();
  double t0 = now_seconds();
  fn();
  double once = std::max(now_seconds() - t0, 1e-7);
  const int reps = std::max(1, int(0.02 / once));
  std::vector<double> g;
  for (int s = 0; s < samples; ++s) {
    if (before_sample) before_sample();
    double t = now_seconds();
    for (int r = 0; r < reps; ++r) fn();
    g.push_back(flops * reps / (now_seconds() - t) / 1e9);
  }
  return {snug::bench::median(g), *std::max_element(g.begin(), g.end())};
}

// --dtype int8: C (M x N, i32) = A (M x K, u8) * B^T (B: N x K, s8), the
// layout of a quantized Linear, against snug's f32 GEMM on the same shape in
// the same run. "gops" counts 2 M N K integer operations per call, like
// GFLOP/s. The main figure packs B on every call (as gemm_f32 packs its
// operands); "gops_prepacked" is the quantized layer's case (weights packed once).
int bench_int8(const snug::bench::Args& args, int64_t M, int64_t N, int64_t K, int threads, int samples) {
  snug::kernels::set_num_threads(threads);
  std::vector<uint8_t> A(size_t(M * K));
  std::vector<int8_t> B(size_t(N * K));
  std::vector<int32_t> C(size_t(M * N)), C2(size_t(M * N));
  std::vector<float> Af(size_t(M * K)), Bf(size_t(N * K)), Cf(size_t(M * N));
  std::mt19937 rng(1337);
  for (size_t i = 0; i < A.size(); ++i) Af[i] = float(A[i] = uint8_t(rng() & 0xFF));
  for (size_t i = 0; i < B.size(); ++i) Bf[i] = float(B[i] = int8_t(int(rng() & 0xFF) - 128));
  const double ops = 2.0 * double(M) * double(N) * double(K);
  snug::PackedInt8B packed = snug::kernels::pack_int8_b(N, K, B.data(), K);
  auto int8 = [&] { snug::kernels::gemm_u8s8s32(M, N, K, A.data(), K, B.data(), K, C.data(), N); };
  auto int8_packed = [&] { snug::kernels::gemm_u8s8s32_packed(M, A.data(), K, packed, C2.data(), N); };
  auto f32 = [&] {
    snug::kernels::gemm_f32(false, true, M, N, K, 1.0f, Af.data(), K, Bf.data(), K, 0.0f, Cf.data(), N);
  };
  // Samples of the three alternate, so a busy moment of a shared machine
  // hits all of them alike; the ratio is the median of per-round ratios.
  std::vector<double> r8, r8p, r32, ratio;
  for (int s = 0; s < samples; ++s) {
    const Rate a = time_gflops(int8, ops, 1), b = time_gflops(int8_packed, ops, 1), c = time_gflops(f32, ops, 1);
    r8.push_back(a.median);
    r8p.push_back(b.median);
    r32.push_back(c.median);
    ratio.push_back(a.median / c.median);
  }
  auto rate = [](const std::vector<double>& v) {
    return Rate{snug::bench::median(v), *std::max_element(v.begin(), v.end())};
  };
  const Rate g8 = rate(r8), g8p = rate(r8p), g32 = rate(r32);
  const double paired = snug::bench::median(ratio);
  // Small integers: the f32 result is exact too, so the two must agree.
  double max_diff = 0;
  for (size_t i = 0; i < C.size(); ++i)
    max_diff = std::max({max_diff, std::abs(double(C[i]) - double(Cf[i])), std::abs(double(C2[i]) - double(C[i]))});
  if (args.json())
    std::printf(
        "{\"bench\":\"gemm\",\"dtype\":\"int8\",\"n\":%lld,\"m\":%lld,\"k\":%lld,\"threads\":%d,"
        "\"gops\":%.1f,\"gops_prepacked\":%.1f,\"f32_gflops\":%.1f,\"ratio_to_f32\":%.3f,"
        "\"ratio_prepacked_to_f32\":%.3f,\"ratio_paired_median\":%.3f,\"gops_best\":%.1f,\"f32_gflops_best\":%.1f,"
        "\"backend\":\"%s\","
        "\"samples\":%d,\"max_abs_diff_vs_f32\":%.3g}\n",
        (long long)N, (long long)M, (long long)K, threads, g8.median, g8p.median, g32.median,
        g32.median > 0 ? g8.median / g32.median : 0.0, g32.median > 0 ? g8p.median / g32.median : 0.0, paired, g8.best,
        g32.best, snug::kernels::gemm_int8_backend(), samples, max_diff);
  else
    std::printf("gemm int8 %lldx%lldx%lld threads=%d: %.1f GOP/s (%.1f prepacked), f32 %.1f GFLOP/s, %.2fx\n",
                (long long)M, (long long)N, (long long)K, threads, g8.median, g8p.median, g32.median,
                g32.median > 0 ? g8.median / g32.median : 0.0);
  return max_diff == 0 ? 0 : 1;
}

// --dtype bf16|f16: C (M x N, f32) = op(A) op(B) with 16-bit operands
// (kernels::gemm_half, NOTE [ 16-bit GEMM ] in core/cpu/gemm.h) against
// gemm_f32 on the same values widened, samples alternating. The ratio is the
// median of per-round ratios; max_rel_diff_vs_f32 checks the two agree.
int bench_half(const snug::bench::Args& args, snug::Half16 kind, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
               int threads, int samples) {
  snug::kernels::set_num_threads(threads);
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  std::vector<uint16_t> A(size_t(M * K)), B(size_t(K * N));
  std::vector<float> Af(A.size()), Bf(B.size()), C(size_t(M * N)), Cf(C.size());
  std::mt19937 rng(1337);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  auto round16 = [&](float v, uint16_t& bits) {
    if (kind == snug::Half16::f16) {
      bits = snug::Half(v).bits;
      return float(snug::Half::from_bits(bits));
    }
    bits = snug::BFloat16(v).bits;
    return float(snug::BFloat16::from_bits(bits));
  };
  for (size_t i = 0; i < A.size(); ++i) Af[i] = round16(d(rng), A[i]);
  for (size_t i = 0; i < B.size(); ++i) Bf[i] = round16(d(rng), B[i]);
  const double flops = 2.0 * double(M) * double(N) * double(K);
  auto half = [&] {
    snug::kernels::gemm_half(kind, ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N, nullptr);
  };
  auto f32 = [&] { snug::kernels::gemm_f32(ta, tb, M, N, K, 1.0f, Af.data(), lda, Bf.data(), ldb, 0.0f, Cf.data(), N); };
  std::vector<double> rh, r32, ratio;
  for (int s = 0; s < samples; ++s) {
    const Rate a = time_gflops(half, flops, 1), b = time_gflops(f32, flops, 1);
    rh.push_back(a.median);
    r32.push_back(b.median);
    ratio.push_back(a.median / b.median);
  }
  double max_rel = 0;
  for (size_t i = 0; i < C.size(); ++i)
    max_rel = std::max(max_rel, double(std::abs(C[i] - Cf[i])) / (1.0 + std::abs(double(Cf[i]))));
  const char* name = kind == snug::Half16::f16 ? "f16" : "bf16";
  const double gh = snug::bench::median(rh), g32 = snug::bench::median(r32), paired = snug::bench::median(ratio);
  if (args.json())
    std::printf(
        "{\"bench\":\"gemm\",\"dtype\":\"%s\",\"n\":%lld,\"m\":%lld,\"k\":%lld,\"ta\":%d,\"tb\":%d,"
        "\"threads\":%d,\"gflops\":%.1f,\"f32_gflops\":%.1f,\"ratio_to_f32\":%.3f,\"gflops_best\":%.1f,"
        "\"f32_gflops_best\":%.1f,\"backend\":\"%s\",\"samples\":%d,\"max_rel_diff_vs_f32\":%.3g}\n",
        name, (long long)N, (long long)M, (long long)K, int(ta), int(tb), threads, gh, g32, paired,
        *std::max_element(rh.begin(), rh.end()), *std::max_element(r32.begin(), r32.end()),
        snug::kernels::gemm_half_backend(kind), samples, max_rel);
  else
    std::printf("gemm %s %lldx%lldx%lld ta=%d tb=%d threads=%d: %.1f GFLOP/s (%s), f32 %.1f GFLOP/s, %.2fx\n", name,
                (long long)M, (long long)N, (long long)K, int(ta), int(tb), threads, gh,
                snug::kernels::gemm_half_backend(kind), g32, paired);
  return max_rel < 1e-4 ? 0 : 1;
}

}  // namespace

SNUG_BENCH(gemm,
           "float32 GEMM GFLOP/s, snug vs Eigen (--n N [--m M --k K --ta 0|1 --tb 0|1] --threads T); --dtype int8: u8 "
           "x s8 vs f32; --dtype bf16|f16: 16-bit operands vs f32",
           snug::bench::int_flag("n", 1024, "columns of C (and M, K unless given)"),
           snug::bench::int_flag_unset("m", "rows of C [default: --n]"),
           snug::bench::int_flag_unset("k", "inner dimension [default: --n]"),
           snug::bench::choice_flag("ta", "0", {"0", "1"}, "1: A is transposed"),
           snug::bench::choice_flag("tb", "0", {"0", "1"}, "1: B is transposed"),
           snug::bench::int_flag("threads", 2, "compute threads"),
           snug::bench::int_flag("samples", 15, "timed samples (the median is reported)"),
           snug::bench::choice_flag("eigen", "1", {"0", "1"}, "1: time Eigen's product on the same shape too"),
           snug::bench::int_flag("batch", 1, "products per call (gemm_f32_batched when > 1)"),
           snug::bench::choice_flag("dtype", "f32", {"f32", "int8", "bf16", "f16"},
                                    "f32; int8: u8 x s8 -> i32 against f32; bf16, f16: 16-bit operands against f32"),
           snug::bench::choice_flag("peak", "1", {"0", "1"}, "1: measure the FMA peak between samples")) {
  const int64_t N = args.get_int("n");
  const int64_t M = args.has("m") ? args.get_int("m") : N, K = args.has("k") ? args.get_int("k") : N;
  const bool ta = args.get_int("ta") != 0, tb = args.get_int("tb") != 0;
  const int threads = int(args.get_int("threads"));
  const int samples = int(args.get_int("samples"));
  const bool eigen = args.get_int("eigen") != 0;
  const int64_t batch = args.get_int("batch");
  const std::string dtype = args.get("dtype");
  if (dtype == "int8") return bench_int8(args, M, N, K, threads, samples);
  if (dtype == "bf16" || dtype == "f16")
    return bench_half(args, dtype == "f16" ? snug::Half16::f16 : snug::Half16::bf16, ta, tb, M, N, K, threads, samples);

  snug::kernels::set_num_threads(threads);
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const int64_t sa = M * K, sb = K * N, sc = M * N;
  std::vector<float> A(size_t(sa * batch)), B(size_t(sb * batch)), C(size_t(sc * batch)), C2(size_t(sc * batch));
  std::mt19937 rng(1337);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : A) x = d(rng);
  for (auto& x : B) x = d(rng);
  const double flops = 2.0 * double(M) * double(N) * double(K) * double(batch);

  // The FMA peak is measured between the GEMM's samples, with the same thread
  // count, so the fraction of peak compares the two under the same load (on a
  // shared machine the peak itself moves by tens of percent over minutes).
  std::vector<double> peak;
  const bool with_peak = args.get_int("peak") != 0;
  Rate g_snug = time_gflops(
      [&] {
        if (batch == 1)
          snug::kernels::gemm_f32(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
        else
          snug::kernels::gemm_f32_batched(ta, tb, M, N, K, 1.0f, A.data(), lda, sa, B.data(), ldb, sb, 0.0f, C.data(),
                                          N, sc, batch);
      },
      flops, samples,
      [&] {
        if (with_peak) peak.push_back(snug::bench::fma_peak_gflops(threads, 4000000));
      });
  const double fma_peak = peak.empty() ? 0.0 : snug::bench::median(peak);

  Rate g_eigen{0, 0};
  double max_diff = 0;
  if (eigen) {
    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::setNbThreads(threads);
    // Eigen has no batched product: a loop of products, each with Eigen's own threading.
    auto run = [&] {
      for (int64_t i = 0; i < batch; ++i) {
        Eigen::Map<const RowMat> a(A.data() + i * sa, ta ? K : M, ta ? M : K),
            b(B.data() + i * sb, tb ? N : K, tb ? K : N);
        Eigen::Map<RowMat> c(C2.data() + i * sc, M, N);
        if (!ta && !tb)
          c.noalias() = a * b;
        else if (ta && !tb)
          c.noalias() = a.transpose() * b;
        else if (!ta && tb)
          c.noalias() = a * b.transpose();
        else
          c.noalias() = a.transpose() * b.transpose();
      }
    };
    g_eigen = time_gflops(run, flops, samples);
    for (size_t i = 0; i < C.size(); ++i) max_diff = std::max(max_diff, double(std::abs(C[i] - C2[i])));
  }

  if (args.json()) {
    std::printf(
        "{\"bench\":\"gemm\",\"n\":%lld,\"m\":%lld,\"k\":%lld,\"batch\":%lld,\"ta\":%d,\"tb\":%d,\"threads\":%d,"
        "\"gflops\":%.1f,\"eigen_gflops\":%.1f,\"ratio_to_eigen\":%.3f,\"gflops_best\":%.1f,"
        "\"eigen_gflops_best\":%.1f,\"backend\":\"%s\",\"samples\":%d,\"max_abs_diff_vs_eigen\":%.3g,"
        "\"fma_peak_gflops\":%.1f,\"peak_fraction\":%.3f}\n",
        (long long)N, (long long)M, (long long)K, (long long)batch, int(ta), int(tb), threads, g_snug.median,
        g_eigen.median, g_eigen.median > 0 ? g_snug.median / g_eigen.median : 0.0, g_snug.best, g_eigen.best,
        snug::kernels::gemm_f32_backend(), samples, max_diff, fma_peak, fma_peak > 0 ? g_snug.median / fma_peak : 0.0);
  } else {
    std::printf(
        "gemm %lldx%lldx%lld ta=%d tb=%d threads=%d: snug %.1f GFLOP/s, Eigen %.1f GFLOP/s, FMA peak %.1f (%.0f%%)\n",
        (long long)M, (long long)N, (long long)K, int(ta), int(tb), threads, g_snug.median, g_eigen.median, fma_peak,
        fma_peak > 0 ? 100.0 * g_snug.median / fma_peak : 0.0);
  }
  return 0;
}

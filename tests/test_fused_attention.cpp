// SPDX-License-Identifier: MIT
// Fused causal self-attention (core/cpu/attention.h, nn::functional::
// causal_self_attention): against the unfused path, finite differences,
// thread-count independence, memory held for backward, bad input.
#include <doctest/doctest.h>

#include <cmath>

#include <snug/autograd/engine.h>
#include <snug/core/cpu/gemm.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/attention.h>
#include <snug/nn/functional.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
using snug::testing::contains;
using snug::testing::error_of;
using snug::testing::vals;
namespace F = snug::nn::functional;

namespace {

struct Result {
  Tensor y, gx;
};

// Forward and backward of sum(y * w) through the fused or the unfused path.
Result run(const Tensor& qkv, int64_t heads, bool fused, const Tensor& w) {
  Tensor x = qkv.detach().clone();
  x.requires_grad_(true);
  Tensor y = F::causal_self_attention(x, heads, 0.0, false, fused);
  (y * w).sum().backward();
  return {y.detach(), x.grad()};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return raw::reduce(ReduceOp::max, raw::unary(UnaryOp::abs, raw::binary(BinaryOp::sub, a, b)), {}, false)
      .item<double>();
}

}  // namespace

TEST_CASE("causal_self_attention: fused equals unfused, forward and backward, f32 and f64") {
  // T = 45 spans two 32-row blocks plus a partial one; T = 7 is under one block; T = 1 sees only itself.
  for (DType dt : {kFloat32, kFloat64})
    for (auto [B, T, C, H] :
         std::vector<std::array<int64_t, 4>>{{2, 45, 24, 3}, {3, 7, 8, 2}, {1, 1, 4, 1}, {2, 64, 32, 4}}) {
      CAPTURE(dtype_name(dt));
      const int64_t rows = T;  // clang 14 cannot capture structured bindings
      CAPTURE(rows);
      Generator g(uint64_t(T) * 7 + uint64_t(C));
      Tensor qkv = randn({B, T, 3 * C}, TensorOptions(dt), &g);
      Tensor w = randn({B, T, C}, TensorOptions(dt), &g);
      Result f = run(qkv, H, true, w), u = run(qkv, H, false, w);
      REQUIRE(f.y.shape() == Shape{B, T, C});
      REQUIRE(f.gx.shape() == qkv.shape());
      const double tol = dt == kFloat32 ? 2e-5 : 1e-12;
      CHECK(max_abs_diff(f.y, u.y) < tol);
      CHECK(max_abs_diff(f.gx, u.gx) < tol * 10);
    }
}

TEST_CASE("causal_self_attention: W-GPT's head size, and scores wider than exp's range") {
  // D = 32 and 128 keys: the row kernels' two-vector loops and masked tails
  // (NOTE [ Attention rows in AVX-512 ]). Scaled by 12, a row's scores span
  // hundreds, so most exps fall below -87.34 and must come out exactly 0 in
  // both paths; scaled by 1/64, every probability is near 1 / visible keys.
  for (double mult : {1.0, 12.0, 1.0 / 64}) {
    CAPTURE(mult);
    Generator g(17);
    Tensor qkv = raw::binary(BinaryOp::mul, randn({2, 128, 3 * 64}, TensorOptions(kFloat32), &g),
                             full({}, mult, TensorOptions(kFloat32)));
    Tensor w = randn({2, 128, 64}, TensorOptions(kFloat32), &g);
    Result f = run(qkv, 2, true, w), u = run(qkv, 2, false, w);
    const double scale = std::max(1.0, mult * mult);  // the gradients grow with the scores
    CHECK(max_abs_diff(f.y, u.y) < 3e-5 * scale);
    CHECK(max_abs_diff(f.gx, u.gx) < 3e-4 * scale);
  }
}

TEST_CASE("causal_self_attention: a NaN in one query makes only that row of its head NaN") {
  Generator g(23);
  Tensor qkv = randn({1, 70, 3 * 64}, TensorOptions(kFloat32), &g);      // 2 heads of 32
  qkv.narrow(1, 50, 1).narrow(2, 0, 32).fill_(std::nan(""));             // position 50's q, head 0
  const std::vector<double> y = vals(F::causal_self_attention(qkv, 2));  // (1, 70, 64)
  int nan_rows_50 = 0, nan_elsewhere = 0;
  for (size_t i = 0; i < y.size(); ++i)
    if (std::isnan(y[i])) ++(i / 64 == 50 && i % 64 < 32 ? nan_rows_50 : nan_elsewhere);
  CHECK(nan_rows_50 == 32);  // the head whose q holds the NaN
  CHECK(nan_elsewhere == 0);
}

TEST_CASE("gradcheck: causal_self_attention (fused), several blocks") {
  Generator g(5);
  Tensor qkv = randn({1, 35, 3 * 6}, TensorOptions(kFloat64), &g);  // 35 rows: a full block and a partial one
  check_grad([](const std::vector<Tensor>& a) { return F::causal_self_attention(a[0], 2); }, {qkv});
  Tensor small = randn({2, 3, 3 * 4}, TensorOptions(kFloat64), &g);
  check_grad([](const std::vector<Tensor>& a) { return F::causal_self_attention(a[0], 4); }, {small});
}

TEST_CASE("causal_self_attention: a later token never changes an earlier output") {
  Generator g(9);
  Tensor qkv = randn({1, 40, 3 * 8}, TensorOptions(kFloat32), &g);
  Tensor y0 = F::causal_self_attention(qkv, 2);
  Tensor changed = qkv.clone();
  changed.narrow(1, 39, 1).fill_(5.0);  // only the last position
  Tensor y1 = F::causal_self_attention(changed, 2);
  CHECK(max_abs_diff(y0.narrow(1, 0, 39), y1.narrow(1, 0, 39)) == 0.0);
  CHECK(max_abs_diff(y0.narrow(1, 39, 1), y1.narrow(1, 39, 1)) > 0.0);
}

TEST_CASE("causal_self_attention: results are bit-identical for 1 and 2 threads") {
  SNUG_SKIP_IF_ONE_THREAD();
  Generator g(3);
  Tensor qkv = randn({4, 128, 3 * 64}, TensorOptions(kFloat32), &g);  // big enough to run the heads in parallel
  Tensor w = randn({4, 128, 64}, TensorOptions(kFloat32), &g);
  const int before = kernels::get_num_threads();
  kernels::set_num_threads(1);
  Result a = run(qkv, 4, true, w);
  kernels::set_num_threads(2);
  Result b = run(qkv, 4, true, w);
  kernels::set_num_threads(before);
  CHECK(max_abs_diff(a.y, b.y) == 0.0);
  CHECK(max_abs_diff(a.gx, b.gx) == 0.0);
}

TEST_CASE("causal_self_attention: keeps far less memory for backward than the unfused path") {
  // W-GPT's attention shape: B 16, T 128, C 128, 4 heads.
  Generator g(1);
  Tensor qkv = randn({16, 128, 384}, TensorOptions(kFloat32), &g);
  auto held = [&](bool fused) {
    Tensor x = qkv.detach().clone();
    x.requires_grad_(true);
    const int64_t before = memory::stats(kCPU).allocated_bytes.current;
    Tensor y = F::causal_self_attention(x, 4, 0.0, false, fused);
    return memory::stats(kCPU).allocated_bytes.current - before;  // y plus what backward keeps
  };
  const int64_t fused = held(true), unfused = held(false);
  MESSAGE("bytes held after forward: fused ", fused, ", unfused ", unfused);
  const int64_t y_bytes = 16 * 128 * 128 * 4, lse_bytes = 16 * 4 * 128 * 4;
  CHECK(fused <= y_bytes + lse_bytes + 4096);
  CHECK(unfused - fused >= 16 * 4 * 128 * 128 * 4 - lse_bytes);  // the (B, H, T, T) probabilities, less the logsumexp
}

TEST_CASE("MultiheadAttention (causal, no mask) takes the fused op; a mask or dropout takes the unfused path") {
  Generator g(2);
  nn::MultiheadAttention att(16, 4);
  Tensor x = randn({2, 20, 16}, TensorOptions(kFloat32), &g);
  Tensor y = att.forward(x);
  // The same module computed by hand through the unfused functional path.
  Tensor ref = att.proj->forward(F::causal_self_attention(att.qkv->forward(x), 4, 0.0, false, /*fused=*/false));
  CHECK(max_abs_diff(y, ref) < 2e-6);
  CHECK(y.grad_fn() != nullptr);
}

TEST_CASE("causal_self_attention: bad input names the problem") {
  Tensor bad = zeros({2, 5, 10});
  CHECK(contains(error_of([&] { F::causal_self_attention(bad, 2); }), "(B, T, 3C)"));
  Tensor qkv = zeros({2, 5, 12});
  CHECK(contains(error_of([&] { F::causal_self_attention(qkv, 3); }), "heads do not divide the width 4"));
  CHECK(contains(error_of([&] { F::causal_self_attention(zeros({5, 12}), 2); }), "(B, T, 3C)"));
  // Empty batch: empty result.
  CHECK(F::causal_self_attention(zeros({0, 5, 12}), 2).shape() == Shape{0, 5, 4});
}

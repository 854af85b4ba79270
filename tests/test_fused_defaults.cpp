// SPDX-License-Identifier: MIT
// The fused backend entries (core/backend.h; NOTE [ Fused ops are backend
// entries ] in core/fused_defaults.cpp): each composed default (called as
// Backend::X on the CPU backend, which is what a backend without the fused
// kernel runs) against the CPU's fast kernel, and against the unfused ops;
// and the CPU overrides falling back to the default where the kernel does not
// apply, with the unfused results.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <snug/autograd/ops.h>
#include <snug/core/backend.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include <snug/nn/functional.h>
#include <snug/nn/fused.h>
#include "test_util.h"

using namespace snug;
namespace F = snug::nn::functional;
using Act = Backend::Activation;

namespace {

Backend& cpu() { return backend_for(Device()); }

// max |a - b| / (1 + max |b|)
double rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double d = 0, m = 0;
  for (size_t i = 0; i < va.size(); ++i) d = std::max(d, std::abs(va[i] - vb[i])), m = std::max(m, std::abs(vb[i]));
  return d / (1 + m);
}

void check_same(const Tensor& a, const Tensor& b, const std::string& what) {
  CAPTURE(what);
  REQUIRE(a.shape() == b.shape());
  CHECK(a.to_vector<double>() == b.to_vector<double>());
}

}  // namespace

TEST_CASE("linear_act: the default is matmul, bias, activation; the CPU kernel agrees with it") {
  Generator g(1);
  for (Act act : {Act::none, Act::relu, Act::gelu, Act::gelu_tanh}) {
    CAPTURE(int(act));
    const Tensor x = randn({37, 300}, {}, &g), w = randn({70, 300}, {}, &g), b = randn({70}, {}, &g);
    Tensor out_d = empty({37, 70}), pre_d = empty({37, 70}), out_k = empty({37, 70}), pre_k = empty({37, 70});
    cpu().Backend::linear_act(x, w, b, act, out_d, pre_d);
    cpu().linear_act(x, w, b, act, out_k, pre_k);
    // The default is the unfused ops, bit for bit.
    const Tensor z = raw::binary(BinaryOp::add, raw::matmul(x, raw::transpose(w, 0, 1)), b);
    check_same(pre_d, z, "default pre-activation");
    const UnaryOp op = act == Act::relu ? UnaryOp::relu : act == Act::gelu ? UnaryOp::gelu : UnaryOp::gelu_tanh;
    check_same(out_d, act == Act::none ? z : raw::unary(op, z), "default output");
    // The one-pass GEMM adds the bias in its first K block: equal up to rounding.
    CHECK(rel_diff(pre_k, pre_d) < 1e-5);
    CHECK(rel_diff(out_k, out_d) < 1e-5);
  }
}

TEST_CASE("linear_backward and linear_backward_act: defaults against the CPU kernels") {
  Generator g(2);
  const Tensor go = randn({90, 40}, {}, &g), x = randn({90, 300}, {}, &g), w = randn({40, 300}, {}, &g);
  Tensor gx[2], gw[2], gb[2];
  for (int k = 0; k < 2; ++k) {
    gx[k] = empty({90, 300}), gw[k] = empty({40, 300}), gb[k] = empty({40});
    if (k == 0)
      cpu().Backend::linear_backward(go, x, w, gx[k], gw[k], gb[k]);
    else
      cpu().linear_backward(go, x, w, gx[k], gw[k], gb[k]);  // gemm_f32_a_sums for gW and gb
  }
  check_same(gx[1], gx[0], "grad x");  // the same GEMM either way
  CHECK(rel_diff(gw[1], gw[0]) < 1e-5);
  CHECK(rel_diff(gb[1], gb[0]) < 1e-5);
  check_same(gb[0], raw::reduce(ReduceOp::sum, go, {0}, false), "default grad bias");

  // (g W) * act'(z): the GEMM with the derivative in its store, and for ReLU
  // the output h in place of z (same sign, so the same bits).
  const Tensor w2 = randn({40, 64}, {}, &g), z = randn({90, 64}, {}, &g);
  for (Act act : {Act::relu, Act::gelu, Act::gelu_tanh}) {
    CAPTURE(int(act));
    Tensor d = empty({90, 64}), k = empty({90, 64});
    cpu().Backend::linear_backward_act(go, w2, act, z, d);
    cpu().linear_backward_act(go, w2, act, z, k);
    const BinaryOp back = act == Act::relu   ? BinaryOp::relu_backward
                          : act == Act::gelu ? BinaryOp::gelu_backward
                                             : BinaryOp::gelu_tanh_backward;
    check_same(d, raw::binary(back, raw::matmul(go, w2), z), "default");
    CHECK(rel_diff(k, d) < 1e-5);
    if (act == Act::relu) {
      Tensor from_h = empty({90, 64});
      cpu().linear_backward_act(go, w2, act, raw::unary(UnaryOp::relu, z), from_h);
      check_same(from_h, k, "relu from its output");
    }
  }
}

TEST_CASE("linear_backward in 16 bits: the bias gradient from the weight gradient's GEMM") {
  // f16 and bf16 (autocast's Linear backward): the CPU kernel sums grad_out's
  // columns off the weight gradient's widened panels (HalfOut::a_sums)
  // instead of reducing grad_out again. The weight gradient is the same GEMM
  // as the default's; the bias gradient is the exact column sum rounded
  // (within one 16-bit ulp: rounded in f32 first).
  Generator g(4);
  for (DType dt : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    for (int64_t rows : {1, 37, 600}) {
      CAPTURE(rows);
      const Tensor go = randn({rows, 70}, {}, &g).to(dt), x = randn({rows, 130}, {}, &g).to(dt),
                   w = randn({70, 130}, {}, &g).to(dt);
      Tensor gx[2], gw[2], gb[2];
      for (int k = 0; k < 2; ++k) {
        gx[k] = empty({rows, 130}, TensorOptions(dt)), gw[k] = empty({70, 130}, TensorOptions(dt)),
        gb[k] = empty({70}, TensorOptions(dt));
        if (k == 0)
          cpu().Backend::linear_backward(go, x, w, gx[k], gw[k], gb[k]);
        else
          cpu().linear_backward(go, x, w, gx[k], gw[k], gb[k]);
      }
      check_same(gx[1], gx[0], "grad x");
      check_same(gw[1], gw[0], "grad weight");
      const double ulp = dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
      const auto got = gb[1].to_vector<double>(), go_v = go.to_vector<double>();
      for (int64_t j = 0; j < 70; ++j) {
        double want = 0;
        for (int64_t i = 0; i < rows; ++i) want += go_v[size_t(i * 70 + j)];
        CAPTURE(j);
        CHECK(std::abs(got[size_t(j)] - want) <= ulp * std::max(1.0, std::abs(want)));
      }
      CHECK(rel_diff(gb[1], gb[0]) <= 2 * ulp);
    }
  }
}

TEST_CASE("attention: the default equals the unfused attention and agrees with the CPU kernel, every mask") {
  Generator g(3);
  const int64_t B = 2, T = 37, H = 3, D = 8, C = H * D;  // T past one block of query rows
  // The mask cases (NOTE [ Attention masks ]): what each names, and a maker.
  struct Case {
    const char* name;
    bool causal, padding;
    int mask;  // 0 none, 1 bool (T, T), 2 floating (B, 1, T, T), 3 bool hiding every key of one row
  };
  const Case cases[] = {{"causal", true, false, 0},       {"full", false, false, 0},
                        {"key padding", false, true, 0},  {"causal + key padding", true, true, 0},
                        {"bool (T, T)", false, false, 1}, {"additive (B, 1, T, T) + padding", false, true, 2},
                        {"a row without keys", false, false, 3}};
  Tensor pad = zeros({B, T}, DType::b8);  // batch 0: the last 5 keys, batch 1: the last 11
  for (int64_t j = 0; j < T; ++j) {
    pad.data<bool>()[j] = j >= T - 5;
    pad.data<bool>()[T + j] = j >= T - 11;
  }
  const Tensor band = raw::compare_scalar(CompareOp::gt, abs(arange(T).view({T, 1}) - arange(T).view({1, T})), 6.0);  // (T, T): |i - j| > 6 hidden
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Case& cs : cases) {
      CAPTURE(dtype_name(dt));
      CAPTURE(cs.name);
      const Tensor qkv = randn({B, T, 3 * C}, dt, &g), gy = randn({B, T, C}, dt, &g);
      const double scale = 1.0 / std::sqrt(double(D));
      Tensor user_mask;
      if (cs.mask == 1) user_mask = band;
      if (cs.mask == 2) user_mask = randn({B, 1, T, T}, dt, &g);
      if (cs.mask == 3) {
        user_mask = zeros({T, T}, DType::b8);
        for (int64_t j = 0; j < T; ++j) user_mask.data<bool>()[4 * T + j] = true;  // row 4 sees nothing
      }
      AttentionMask am;
      am.causal = cs.causal;
      if (cs.padding) am.key_padding = pad;
      if (user_mask.defined()) am.mask = user_mask.expand({B, H, T, T});
      Tensor y[2], lse[2], dq[2];
      for (int k = 0; k < 2; ++k) {
        y[k] = empty({B, T, C}, dt), lse[k] = empty({B, H, T}, dt), dq[k] = empty({B, T, 3 * C}, dt);
        if (k == 0) {
          cpu().Backend::attention(qkv, H, scale, am, y[k], lse[k]);
          cpu().Backend::attention_backward(qkv, y[k], lse[k], gy, H, scale, am, dq[k]);
        } else {
          cpu().attention(qkv, H, scale, am, y[k], lse[k]);
          cpu().attention_backward(qkv, y[k], lse[k], gy, H, scale, am, dq[k]);
        }
      }
      const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
      CHECK(rel_diff(y[1], y[0]) < tol);
      CHECK(rel_diff(dq[1], dq[0]) < tol);
      CHECK(rel_diff(clamp(lse[1], -1e30, 1e30), clamp(lse[0], -1e30, 1e30)) < tol);  // -inf rows both
      // The composed ops (scaled_dot_product_attention through self_attention's unfused path).
      Tensor q1 = qkv.clone().requires_grad_(true);
      const Tensor yc = F::self_attention(q1, H, cs.causal, user_mask, cs.padding ? pad : Tensor(), 0.0, false, false);
      (yc * gy).sum().backward();
      if (cs.mask == 0 && !cs.padding && cs.causal) {
        // causal alone: the default's forward is the composed attention bit for
        // bit, its backward the composed gradient up to the sign of zero.
        check_same(y[0], yc, "default y");
        CHECK(rel_diff(dq[0], q1.grad()) == 0.0);
      } else {
        CHECK(rel_diff(y[0], yc) < tol);
        CHECK(rel_diff(dq[0], q1.grad()) < tol);
      }
      if (cs.mask == 3) {  // the row without keys: zeros and -inf, as PyTorch
        CHECK(max(y[1].select(1, 4).abs()).item() == 0.0);
        CHECK(max(lse[1].select(2, 4)).item() == -std::numeric_limits<double>::infinity());
        CHECK(std::isfinite(max(dq[1].abs()).item()));
      }
    }
  }
}

TEST_CASE("conv2d_relu: the default is conv2d then relu, the CPU kernel equal to it bit for bit") {
  Generator g(4);
  const Tensor x = randn({3, 4, 9, 9}, {}, &g), w = randn({6, 2, 3, 3}, {}, &g), b = randn({6}, {}, &g);
  Conv2dParams p;
  p.stride[0] = 2, p.padding[1] = 1, p.groups = 2;
  const Shape ys{3, 6, 4, 9};
  Tensor y[2];
  for (int k = 0; k < 2; ++k) {
    y[k] = empty(ys);
    if (k == 0)
      cpu().Backend::conv2d_relu(x, w, b, p, y[k]);
    else
      cpu().conv2d_relu(x, w, b, p, y[k]);
  }
  check_same(y[1], y[0], "forward");
  const Tensor go = randn(ys, {}, &g);
  Tensor gx[2], gw[2], gb[2];
  for (int k = 0; k < 2; ++k) {
    gx[k] = empty(x.shape()), gw[k] = empty(w.shape()), gb[k] = empty({6});
    if (k == 0)
      cpu().Backend::conv2d_relu_backward(go, y[0], x, w, p, gx[k], gw[k], gb[k]);
    else
      cpu().conv2d_relu_backward(go, y[0], x, w, p, gx[k], gw[k], gb[k]);
  }
  check_same(gx[1], gx[0], "grad x");
  check_same(gw[1], gw[0], "grad w");
  check_same(gb[1], gb[0], "grad b");
}

TEST_CASE("the CPU overrides fall back to the default where their kernel does not apply") {
  Generator g(5);
  // A transposed (non-contiguous) weight: linear_relu takes the default, and
  // still equals relu after linear.
  const Tensor x = randn({6, 10}, {}, &g), wt = randn({10, 7}, {}, &g).transpose(0, 1), b = randn({7}, {}, &g);
  REQUIRE_FALSE(wt.is_contiguous());
  check_same(F::linear_relu(x, wt, b), relu(F::linear(x, wt, b)), "non-contiguous weight");
  check_same(F::linear_relu(x, wt, b), relu(F::linear(x, wt.contiguous(), b)), "and the contiguous one");
  // 16-bit convolution: the fused CPU kernel takes f32/f64 only.
  const Tensor xh = randn({2, 2, 6, 6}, {}, &g).to(DType::bf16), wh = randn({3, 2, 3, 3}, {}, &g).to(DType::bf16);
  Tensor yk = empty({2, 3, 4, 4}, DType::bf16), yd = empty({2, 3, 4, 4}, DType::bf16);
  cpu().conv2d_relu(xh, wh, Tensor(), Conv2dParams{}, yk);
  cpu().Backend::conv2d_relu(xh, wh, Tensor(), Conv2dParams{}, yd);
  check_same(yk, yd, "bf16 conv2d_relu");
}

TEST_CASE("linear: mismatched dtypes and devices are errors naming the op") {
  using snug::testing::contains;
  using snug::testing::error_of;
  const Tensor x = zeros({2, 3});
  CHECK(contains(error_of([&] {
                   F::linear(x, zeros({4, 3}, DType::f64));
                 }),
                 "linear: input (f32), weight (f64) and bias (none) must have the same dtype"));
  CHECK(contains(error_of([&] {
                   F::linear_relu(x, zeros({4, 3}), zeros({4}, DType::f64));
                 }),
                 "linear_relu: input (f32), weight (f32) and bias (f64) must have the same dtype"));
  CHECK(contains(error_of([&] {
                   F::linear(zeros({2, 3}, DType::i64), zeros({4, 3}, DType::i64));
                 }),
                 "linear: expected a floating input"));
  CHECK(contains(error_of([&] {
                   F::causal_self_attention(zeros({1, 2, 6}, DType::i64), 1);
                 }),
                 "self_attention: expected a floating qkv"));
}

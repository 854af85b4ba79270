// SPDX-License-Identifier: MIT
// Masked and non-causal attention (NOTE [ Attention masks ] in core/backend.h,
// NOTE [ Fused attention ] in core/cpu/attention.h): finite differences
// through the fused op, padding against each sequence alone, the memory kept
// for backward, 16-bit qkv, the encoder stack, bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/stats.h>
#include <snug/nn/attention.h>
#include <snug/nn/functional.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
using snug::testing::contains;
using snug::testing::error_of;
namespace F = snug::nn::functional;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return raw::reduce(ReduceOp::max, raw::unary(UnaryOp::abs, raw::binary(BinaryOp::sub, a.detach(), b.detach())), {},
                     false)
      .item<double>();
}

// (B, T) bool, true at positions >= len[b].
Tensor padding(const std::vector<int64_t>& len, int64_t T) {
  Tensor m = zeros({int64_t(len.size()), T}, DType::b8);
  for (size_t b = 0; b < len.size(); ++b)
    for (int64_t t = len[b]; t < T; ++t) m.data<bool>()[int64_t(b) * T + t] = true;
  return m;
}

}  // namespace

TEST_CASE("self_attention: finite differences through the fused op, every kind of mask") {
  Generator g(11);
  const int64_t B = 2, T = 5, H = 2, C = 4;
  const Tensor pad = padding({5, 3}, T);
  const Tensor additive = randn({1, H, T, T}, kFloat64, &g);  // per head, broadcast over the batch
  Tensor band = zeros({T, T}, DType::b8);
  band.data<bool>()[0 * T + 4] = band.data<bool>()[3 * T + 0] = true;
  struct Case {
    const char* name;
    bool causal;
    Tensor mask, pad;
  };
  for (const Case& c : {Case{"full", false, Tensor(), Tensor()}, Case{"key padding", false, Tensor(), pad},
                        Case{"causal + padding", true, Tensor(), pad}, Case{"bool (T, T)", false, band, Tensor()},
                        Case{"additive + padding", false, additive, pad}}) {
    CAPTURE(c.name);
    const Tensor qkv = randn({B, T, 3 * C}, kFloat64, &g);
    check_grad([&](const std::vector<Tensor>& in) { return F::self_attention(in[0], H, c.causal, c.mask, c.pad); },
               {qkv});
  }
}

TEST_CASE("self_attention: a padded batch equals each sequence alone, fused and unfused agree") {
  Generator g(12);
  const int64_t T = 45, C = 24, H = 3;  // T past one block of query rows
  const std::vector<int64_t> len = {45, 17, 33};
  const Tensor qkv = randn({3, T, 3 * C}, kFloat32, &g);
  const Tensor pad = padding(len, T);
  const Tensor y = F::self_attention(qkv, H, false, Tensor(), pad);
  const Tensor yu = F::self_attention(qkv, H, false, Tensor(), pad, 0.0, false, /*fused=*/false);
  CHECK(max_abs_diff(y, yu) < 2e-5);
  for (int64_t b = 0; b < 3; ++b) {
    CAPTURE(b);
    const int64_t n = len[size_t(b)];
    const Tensor alone = F::self_attention(qkv.narrow(0, b, 1).narrow(1, 0, n).contiguous(), H, false);
    CHECK(max_abs_diff(y.narrow(0, b, 1).narrow(1, 0, n), alone) < 2e-5);
  }
}

TEST_CASE("self_attention: a masked attention keeps no (B, H, T, T) tensor for backward") {
  Generator g(13);
  const int64_t B = 8, T = 128, C = 64, H = 4;
  const Tensor qkv = randn({B, T, 3 * C}, kFloat32, &g);
  const Tensor pad = padding({128, 100, 64, 1, 128, 77, 90, 128}, T);
  auto held = [&](bool fused) {
    Tensor x = qkv.detach().clone().requires_grad_(true);
    const int64_t before = memory::stats(kCPU).allocated_bytes.current;
    Tensor y = F::self_attention(x, H, false, Tensor(), pad, 0.0, false, fused);
    return memory::stats(kCPU).allocated_bytes.current - before;  // y plus what backward keeps
  };
  const int64_t fused = held(true), unfused = held(false);
  MESSAGE("bytes held after forward: fused ", fused, ", unfused ", unfused);
  const int64_t y_bytes = B * T * C * 4, lse_bytes = B * H * T * 4;
  CHECK(fused <= y_bytes + lse_bytes + 4096);
  CHECK(unfused - fused >= B * H * T * T * 4 - lse_bytes);
}

TEST_CASE("self_attention: 16-bit qkv with masks agrees with f32") {
  Generator g(14);
  const int64_t B = 2, T = 40, C = 32, H = 2;
  const Tensor qkv = randn({B, T, 3 * C}, kFloat32, &g);
  const Tensor pad = padding({40, 21}, T);
  const Tensor ref = F::self_attention(qkv, H, false, Tensor(), pad);
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(dt));
    Tensor x = qkv.to(dt).requires_grad_(true);
    Tensor y = F::self_attention(x, H, false, randn({T, T}, kFloat32, &g) * 0.0, pad);
    CHECK(y.dtype() == dt);
    CHECK(max_abs_diff(y.to(kFloat32), ref) < (dt == DType::bf16 ? 0.05 : 0.01));
    y.to(kFloat32).sum().backward();
    CHECK(x.grad().dtype() == dt);
  }
}

TEST_CASE("attention backend: 16-bit qkv computes in f32 per head, bit for bit, with no f32 copy") {
  // NOTE [ 16-bit attention ]: the kernels widen each head's slices as they
  // copy them and round each output once. The reference is what the entry did
  // before: widen the whole tensors, run the f32 kernels, round the results.
  Generator g(15);
  Backend& be = backend_for(kCPU);
  struct Case {
    int64_t B, T, C, H;
    bool causal, pad;
  };
  for (const Case& c : {Case{2, 40, 32, 2, true, false}, Case{3, 33, 36, 3, false, true}, Case{1, 70, 24, 2, true, true},
                        Case{2, 64, 64, 4, false, false}}) {
    for (DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(c.T);
      CAPTURE(c.C);
      const int64_t B = c.B, T = c.T, C = c.C, H = c.H;
      const double scale = 1.0 / std::sqrt(double(C / H));
      AttentionMask am;
      am.causal = c.causal;
      if (c.pad) {
        std::vector<int64_t> len;
        for (int64_t b = 0; b < B; ++b) len.push_back(T - 7 * b);
        am.key_padding = padding(len, T);
      }
      const Tensor x = randn({B, T, 3 * C}, kFloat32, &g).to(dt);
      const Tensor gy = randn({B, T, C}, kFloat32, &g).to(dt);
      const Tensor x32 = x.to(kFloat32), gy32 = gy.to(kFloat32);

      Tensor y32 = empty({B, T, C}, kFloat32), lse_ref = empty({B, H, T}, kFloat32);
      be.attention(x32, H, scale, am, y32, lse_ref);
      Tensor d32 = empty({B, T, 3 * C}, kFloat32);
      be.attention_backward(x32, y32, lse_ref, gy32, H, scale, am, d32);

      Tensor y = empty({B, T, C}, dt), lse = empty({B, H, T}, kFloat32), d = empty({B, T, 3 * C}, dt);
      const int64_t before = memory::stats(kCPU).allocated_bytes.current;
      memory::reset_peak(kCPU);
      be.attention(x, H, scale, am, y, lse);
      be.attention_backward(x, y, lse, gy, H, scale, am, d);
      // No f32 copy of qkv (the old entry's first workspace) was allocated.
      CHECK(memory::stats(kCPU).allocated_bytes.peak - before < B * T * 3 * C * 4);
      CHECK(max_abs_diff(lse, lse_ref) == 0.0);
      CHECK(max_abs_diff(y.to(kFloat32), y32.to(dt).to(kFloat32)) == 0.0);
      CHECK(max_abs_diff(d.to(kFloat32), d32.to(dt).to(kFloat32)) == 0.0);
    }
  }
}

TEST_CASE("TransformerBlock: post-LayerNorm is ln(x + attn(x)), masks reach the attention") {
  Generator g(15);
  nn::TransformerBlockOptions o;
  o.causal = false, o.norm_first = false, o.gelu = GeluApprox::tanh, o.layer_norm_eps = 1e-12;
  nn::TransformerBlock blk(16, 4, o);
  const Tensor x = randn({2, 9, 16}, kFloat32, &g);
  const Tensor pad = padding({9, 4}, 9);
  const Tensor y = blk.forward(x, Tensor(), pad);
  const Tensor h = blk.ln_1->forward(x + blk.attn->forward(x, Tensor(), pad));
  const Tensor ref = blk.ln_2->forward(h + blk.fc_proj->forward(gelu(blk.fc->forward(h), GeluApprox::tanh)));
  CHECK(max_abs_diff(y, ref) < 1e-5);
  CHECK(blk.ln_1->eps == 1e-12);
  // Padding keys change nothing at the real positions of the short sequence.
  Tensor x2 = x.clone();
  x2.narrow(0, 1, 1).narrow(1, 4, 5).fill_(100.0);
  CHECK(max_abs_diff(blk.forward(x2, Tensor(), pad).narrow(0, 1, 1).narrow(1, 0, 4), y.narrow(0, 1, 1).narrow(1, 0, 4)) <
        1e-5);
}

TEST_CASE("TransformerEncoder: a stack of blocks with the masks, and a final norm when asked") {
  Generator g(16);
  nn::TransformerEncoder enc(3, 16, 2, nn::TransformerEncoder::encoder_options(), /*final_norm=*/true);
  CHECK(enc.layers->size() == 3);
  REQUIRE(enc.norm);
  const Tensor x = randn({2, 7, 16}, kFloat32, &g);
  const Tensor pad = padding({7, 5}, 7);
  Tensor h = x;
  for (size_t i = 0; i < 3; ++i) h = enc.layers->at<nn::TransformerBlock>(i)->forward(h, Tensor(), pad);
  CHECK(max_abs_diff(enc.forward(x, Tensor(), pad), enc.norm->forward(h)) < 1e-6);
  CHECK(!enc.layers->at<nn::TransformerBlock>(0)->attn->causal);
  CHECK(contains(error_of([&] { nn::TransformerEncoder(0, 16, 2); }), "layers must be >= 1"));
}

TEST_CASE("self_attention: bad masks name the problem") {
  const Tensor qkv = zeros({2, 5, 12});
  CHECK(contains(error_of([&] { F::self_attention(qkv, 2, false, Tensor(), zeros({2, 4}, DType::b8)); }),
                 "key_padding_mask must be (B, T) = (2, 5) bool"));
  CHECK(contains(error_of([&] { F::self_attention(qkv, 2, false, Tensor(), zeros({2, 5})); }),
                 "key_padding_mask must be (B, T) = (2, 5) bool"));
  CHECK(contains(error_of([&] { F::self_attention(qkv, 2, false, zeros({5, 5}, DType::i64)); }),
                 "attn_mask must be bool"));
  CHECK(contains(error_of([&] { F::self_attention(qkv, 2, false, zeros({4, 5}, DType::b8)); }),
                 "does not broadcast to (B, heads, T, T)"));
  CHECK(contains(error_of([&] { F::self_attention(qkv, 2, false, zeros({3, 1, 5, 5}, DType::b8)); }),
                 "does not broadcast to (B, heads, T, T)"));
  nn::MultiheadAttention att(4, 2, false);
  CHECK(contains(error_of([&] { att.forward(zeros({2, 5, 4}), Tensor(), zeros({5, 2}, DType::b8)); }),
                 "key_padding_mask must be (B, T)"));
}

// SPDX-License-Identifier: MIT
// Autocast (autograd/autocast.h): the op policy (which ops run in half
// precision, which widen to f32, which keep their input's storage), the
// per-scope cache of weight casts, gradients reaching f32 parameters in f32,
// and f16/bf16 results against f32 within stated tolerances.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/functional.h>
#include <snug/nn/fused.h>
#include <snug/nn/layers.h>
#include <snug/nn/models/gpt.h>
#include "test_util.h"

using namespace snug;
namespace F = snug::nn::functional;
using snug::testing::error_of;
using snug::testing::idx;

namespace {

Tensor randn32(const Shape& s, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  return randn(s, kFloat32, &g) * scale;
}
Tensor param32(const Shape& s, uint64_t seed, double scale = 1.0) {
  Tensor t = randn32(s, seed, scale);
  t.requires_grad_(true);
  return t;
}

// max |got - want| / max |want|: the error relative to the result's scale.
double rel_err(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  REQUIRE(g.size() == w.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    num = std::max(num, std::fabs(g[i] - w[i]));
    den = std::max(den, std::fabs(w[i]));
  }
  return num / std::max(den, 1e-30);
}

// Stated tolerances (docs/mixed_precision.md): an op whose inputs and output
// are rounded to the half type once each, with f32 accumulation, stays
// within a few units of that type's rounding error relative to the result's
// largest magnitude: f16 has 2^-11 (4.9e-4), bf16 2^-8 (3.9e-3).
double tol(DType dt) { return dt == kFloat16 ? 4e-3 : 3e-2; }

}  // namespace

TEST_CASE("autocast: the scope is thread-local, nests, and rejects non-half dtypes") {
  CHECK_FALSE(autocast::is_enabled());
  {
    AutocastGuard a(kBFloat16);
    CHECK(autocast::is_enabled());
    CHECK(autocast::dtype() == kBFloat16);
    {
      AutocastGuard b(kFloat16);
      CHECK(autocast::dtype() == kFloat16);
      {
        AutocastGuard off(kFloat16, false);
        CHECK_FALSE(autocast::is_enabled());
        CHECK(matmul(randn32({2, 3}, 1), randn32({3, 2}, 2)).dtype() == kFloat32);
      }
      CHECK(autocast::is_enabled());
    }
    CHECK(autocast::dtype() == kBFloat16);
  }
  CHECK_FALSE(autocast::is_enabled());
  CHECK(error_of<DTypeError>([] { AutocastGuard g(kFloat32); }).find("f16 or bf16") != std::string::npos);
}

TEST_CASE("autocast: op policy (low precision, f32, input's storage)") {
  for (DType dt : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    AutocastGuard ac(dt);
    Tensor x = randn32({4, 8}, 3), w = randn32({5, 8}, 4), b = randn32({5}, 5);
    // low precision
    CHECK(matmul(x, w.t()).dtype() == dt);
    CHECK(F::linear(x, w, b).dtype() == dt);
    CHECK(F::conv2d(randn32({1, 2, 5, 5}, 6), randn32({3, 2, 3, 3}, 7)).dtype() == dt);
    Tensor q = randn32({1, 2, 4, 8}, 8);
    CHECK(F::scaled_dot_product_attention(q, q, q, true).dtype() == dt);
    CHECK(F::embedding(idx({0, 2}), randn32({3, 8}, 9)).dtype() == dt);
    // f32
    Tensor h = x.to(dt);
    CHECK(log_softmax(h, 1).dtype() == kFloat32);
    CHECK(F::cross_entropy(h, idx({0, 1, 2, 3})).dtype() == kFloat32);
    CHECK(F::mse_loss(h, h).dtype() == kFloat32);
    CHECK(sum(h).dtype() == kFloat32);
    CHECK(mean(h, {1}).dtype() == kFloat32);
    CHECK(var(h).dtype() == kFloat32);
    CHECK(logsumexp(h, {1}).dtype() == kFloat32);
    CHECK(exp(h).dtype() == kFloat32);
    CHECK(log(abs(h) + 1.0).dtype() == kFloat32);
    CHECK(pow(h, 2.0).dtype() == kFloat32);
    // f32 math, storage of the input
    CHECK(softmax(h, 1).dtype() == dt);
    CHECK(F::layer_norm(h, ones({8}), zeros({8})).dtype() == dt);
    CHECK(F::causal_softmax(randn32({2, 4, 4}, 10).to(dt), 0.5).dtype() == dt);
    // others run in the dtype they get
    CHECK(gelu(h).dtype() == dt);
    CHECK((h + h).dtype() == dt);
    CHECK(softmax(x, 1).dtype() == kFloat32);
    // f64 and integers are never lowered (gradchecks keep working in a scope)
    CHECK(matmul(x.to(kFloat64), w.to(kFloat64).t()).dtype() == kFloat64);
  }
  // Outside a scope nothing changes.
  CHECK(matmul(randn32({2, 3}, 1), randn32({3, 2}, 2)).dtype() == kFloat32);
}

TEST_CASE("autocast: weight casts are cached per scope and invalidated by updates") {
  Tensor w = param32({6, 4}, 11), x = randn32({3, 4}, 12);
  {
    AutocastGuard ac(kBFloat16);
    Tensor y1 = F::linear(x, w), y2 = F::linear(x * 2.0, w);
    CHECK(autocast::cache_size() == 1);  // one cast for two uses
    // Activations (not leaves) are not cached.
    Tensor z = matmul(y1.to(kFloat32), randn32({6, 2}, 13));
    CHECK(autocast::cache_size() == 1);
    // Two uses, one cast node: the gradient of both uses reaches w once, in f32.
    (sum(y1) + sum(y2)).backward();
    REQUIRE(w.grad().defined());
    CHECK(w.grad().dtype() == kFloat32);
    // dL/dW = sum over rows of (x + 2x) for every output row: 3 * colsum(x), computed in bf16.
    Tensor want = sum(x.to(kBFloat16).to(kFloat32), {0}, true).expand({6, 4}) * 3.0;
    CHECK(rel_err(w.grad(), want) < 1e-2);
    // An in-place update bumps the version: the next use casts again.
    {
      NoGradGuard ng;
      w.add_(ones({6, 4}));
    }
    Tensor y3 = F::linear(x, w);
    CHECK(autocast::cache_size() == 1);
    Tensor want3;
    {
      AutocastGuard off(kBFloat16, false);
      want3 = F::linear(x.to(kBFloat16).to(kFloat32), w.to(kBFloat16).to(kFloat32));
    }
    CHECK(rel_err(y3, want3) < 1e-2);
    autocast::clear_cache();
    CHECK(autocast::cache_size() == 0);
    F::linear(x, w);
    CHECK(autocast::cache_size() == 1);
    // No caching without grad mode (evaluation casts per use, keeps nothing).
    NoGradGuard ng;
    autocast::clear_cache();
    F::linear(x, w);
    CHECK(autocast::cache_size() == 0);
  }
  CHECK(autocast::cache_size() == 0);  // leaving the outermost scope clears the cache
}

TEST_CASE("autocast: f16/bf16 forward and gradients agree with f32 within the stated tolerances") {
  for (DType dt : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    // A small transformer-shaped computation: linear -> layer_norm -> gelu ->
    // attention -> linear -> cross_entropy, with every gradient compared.
    auto run = [&](bool amp, std::vector<Tensor>& grads) {
      Tensor x = param32({2, 16, 32}, 20), w1 = param32({96, 32}, 21, 0.2), w2 = param32({10, 32}, 22, 0.2);
      Tensor lw = param32({32}, 23, 0.1), lb = param32({32}, 24, 0.1);
      Tensor loss;
      {
        AutocastGuard ac(dt, amp);
        Tensor h = F::linear(x, w1);  // (2, 16, 96)
        auto qkv = h.view({2, 16, 3, 2, 16}).permute({2, 0, 3, 1, 4});
        Tensor a = F::scaled_dot_product_attention(qkv.select(0, 0), qkv.select(0, 1), qkv.select(0, 2), true);
        Tensor y = a.transpose(1, 2).reshape({2, 16, 32});
        y = gelu(F::layer_norm(y + x, lw + 1.0, lb));
        Tensor logits = F::linear(y, w2).view({32, 10});
        std::vector<int64_t> t(32);
        for (int64_t i = 0; i < 32; ++i) t[size_t(i)] = (7 * i + 3) % 10;
        loss = F::cross_entropy(logits, idx(t));
      }
      CHECK(loss.dtype() == kFloat32);
      loss.backward();
      grads = {x.grad(), w1.grad(), w2.grad(), lw.grad(), lb.grad()};
      return loss;
    };
    std::vector<Tensor> g32, glo;
    Tensor l32 = run(false, g32), llo = run(true, glo);
    CHECK(std::fabs(l32.item() - llo.item()) <= tol(dt) * std::fabs(l32.item()));
    for (size_t i = 0; i < g32.size(); ++i) {
      CAPTURE(i);
      REQUIRE(glo[i].defined());
      CHECK(glo[i].dtype() == kFloat32);  // parameters stay f32: their gradients too
      CHECK(rel_err(glo[i], g32[i]) <= 4 * tol(dt));
    }
  }
}

TEST_CASE("autocast: single ops against f32 (matmul, conv2d, softmax, layer_norm)") {
  for (DType dt : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    Tensor a = randn32({3, 64, 256}, 30), b = randn32({256, 48}, 31);
    Tensor xi = randn32({2, 3, 9, 9}, 32), wc = randn32({4, 3, 3, 3}, 33);
    Tensor s = randn32({8, 100}, 34, 3.0), ln = randn32({8, 100}, 35, 2.0);
    Tensor m32 = matmul(a, b), c32 = F::conv2d(xi, wc, Tensor(), {1, 1}, {1, 1});
    Tensor s32 = softmax(s, 1), n32 = F::layer_norm(ln, Tensor(), Tensor());
    AutocastGuard ac(dt);
    CHECK(rel_err(matmul(a, b), m32) <= tol(dt));
    // Half operands stored transposed (as x.t() or a weight gradient's g^T) take the
    // transposed path of NOTE [ Half-precision matmul ].
    Tensor at = a.to(dt).transpose(1, 2).contiguous().transpose(1, 2), bt = b.to(dt).t().contiguous().t();
    CHECK(at.stride(1) == 1);
    CHECK(rel_err(matmul(at, bt), m32) <= tol(dt));
    CHECK(rel_err(matmul(at, bt), matmul(a.to(dt), b.to(dt))) <= 1e-6);
    CHECK(rel_err(F::conv2d(xi, wc, Tensor(), {1, 1}, {1, 1}), c32) <= tol(dt));
    CHECK(rel_err(softmax(s.to(dt), 1), s32) <= tol(dt));
    CHECK(rel_err(F::layer_norm(ln.to(dt), Tensor(), Tensor()), n32) <= tol(dt));
  }
}

TEST_CASE("autocast: gradcheck of the differentiable casts (f64 -> f32 -> f64 round trip)") {
  // The casts autocast records are Tensor::to; their gradient is a cast back.
  // f64 -> f32 -> f64 is differentiable with derivative 1 up to f32 rounding,
  // which gradcheck's tolerance covers at these magnitudes.
  Tensor x = testing::randn_f64({3, 4}, 40);
  x.requires_grad_(true);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0].to(kFloat32).to(kFloat64) * 3.0; }, {x},
                            autograd::GradcheckOptions{1e-3, 1e-3, 1e-3}));
  // The lowered path of matmul in a scope does not touch f64, so matmul's own
  // gradcheck holds inside a scope too.
  AutocastGuard ac(kBFloat16);
  Tensor a = testing::randn_f64({3, 4}, 41), b = testing::randn_f64({4, 2}, 42);
  a.requires_grad_(true);
  b.requires_grad_(true);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b}));
}

TEST_CASE("autocast: gradient accumulation in one scope runs backward through the cached casts each time") {
  // charlm's step: one scope around every micro-batch, so each weight is
  // cast once and each micro-batch's backward goes through the same cast.
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(dt)));
    nn::Linear fc(16, 8);
    Tensor a = randn32({4, 16}, 1), b = randn32({4, 16}, 2);
    auto loss_of = [&](const Tensor& x) { return fc.forward(x).to(DType::f32).pow(2.0).mean(); };
    // Reference: one scope per micro-batch.
    fc.zero_grad();
    for (const Tensor& x : {a, b}) {
      AutocastGuard ac(dt);
      loss_of(x).backward();
    }
    const std::vector<float> want = fc.weight.grad().to_vector<float>();
    fc.zero_grad();
    {
      AutocastGuard ac(dt);
      loss_of(a).backward();
      loss_of(b).backward();
      CHECK(autocast::cache_size() == 2);  // weight and bias, cast once
    }
    CHECK(fc.weight.grad().to_vector<float>() == want);
  }
}

// What a forward pass keeps for backward (and its output), in bytes.
template <class F>
int64_t held_by(F&& forward) {
  // No cached blocks to reuse: a cached block larger than the request would
  // count in full.
  memory::empty_cache(kCPU);
  const auto before = static_cast<int64_t>(memory::stats(kCPU).allocated_bytes.current);
  Tensor keep = forward();
  return static_cast<int64_t>(memory::stats(kCPU).allocated_bytes.current) - before;
}

TEST_CASE(
    "autocast: the fused ops keep 16-bit tensors for backward (NOTE [ 16-bit one-pass linear ], [ 16-bit attention "
    "])") {
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(dt)));
    // Attention at W-GPT's shape: the 16-bit qkv and output (and the f32 lse),
    // not (B, H, T, T) probabilities and not an f32 copy of qkv.
    Tensor qkv = randn32({16, 128, 384}, 3).to(dt).requires_grad_();
    const int64_t attn = held_by([&] {
      AutocastGuard ac(dt);
      return F::causal_self_attention(qkv, 4, 0.0, false, true);
    });
    const int64_t qkv_bytes = 16 * 128 * 384 * 2, y_bytes = 16 * 128 * 128 * 2, lse_bytes = 16 * 4 * 128 * 4;
    CHECK(attn <= y_bytes + lse_bytes + 4096);  // qkv itself is the caller's
    CHECK(attn < qkv_bytes);

    // The one-op MLP: x (the caller's), z and h of (N, 4C) in 16 bits, the
    // output and the weights' casts: little more than half of its f32 bytes.
    nn::Linear fc(128, 512), proj(512, 128);
    Tensor x = randn32({2048, 128}, 4).to(dt).requires_grad_();
    const int64_t mlp = held_by([&] {
      AutocastGuard ac(dt);
      return F::gelu_mlp(x, fc.weight, fc.bias, proj.weight, proj.bias);
    });
    const int64_t zh = 2 * 2048 * 512 * 2, out = 2048 * 128 * 2;
    Tensor x32 = x.to(DType::f32).detach().requires_grad_();
    const int64_t mlp32 = held_by([&] { return F::gelu_mlp(x32, fc.weight, fc.bias, proj.weight, proj.bias); });
    MESSAGE("gelu_mlp keeps ", mlp, " bytes in 16 bits, ", mlp32, " in f32");
    CHECK(mlp >= zh + out);
    CHECK(double(mlp) <= 0.6 * double(mlp32));
  }
}

TEST_CASE("autocast: cross-entropy reads 16-bit logits as they are (NOTE [ Fused cross-entropy ])") {
  // The loss keeps the 16-bit logits (the caller's) and one f32 logsumexp per
  // row, not an f32 copy of the logits or their f32 log-softmax; the gradient
  // comes back in the logits' dtype, the f32 computation's rounded once.
  const int64_t N = 512, C = 1000;
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(dt)));
    Tensor logits = (randn32({N, C}, 12) * 3.0).to(dt).requires_grad_();
    Generator g(13);
    Tensor t = randint(0, C, {N}, DType::i64, &g);
    const int64_t held = held_by([&] {
      AutocastGuard ac(dt);
      return F::cross_entropy(logits, t, -100, 0.1);
    });
    MESSAGE("cross_entropy keeps ", held, " bytes for ", N, " x ", C, " ", std::string(dtype_name(dt)), " logits");
    CHECK(held < N * C * 2);  // less than the logits' own 16-bit bytes; an f32 copy would be twice that
    Tensor loss;
    {
      AutocastGuard ac(dt);
      loss = F::cross_entropy(logits, t, -100, 0.1);
    }
    CHECK(loss.dtype() == kFloat32);
    loss.backward();
    CHECK(logits.grad().dtype() == dt);
    // The reference: the same loss on the logits widened by hand, in f32.
    Tensor l32 = logits.detach().to(kFloat32).requires_grad_();
    Tensor ref = F::cross_entropy(l32, t, -100, 0.1);
    ref.backward();
    CHECK(loss.item() == doctest::Approx(ref.item()).epsilon(1e-6));
    const auto gh = logits.grad().to(kFloat32).to_vector<float>(), gr = l32.grad().to_vector<float>();
    // One rounding to 16 bits; f16's gradients here (about 1 / (N C)) are subnormal, spaced 6e-8.
    const float floor = dt == DType::f16 ? 6e-8f : 1e-12f;
    int64_t bad = 0;
    for (size_t i = 0; i < gh.size(); ++i) bad += std::fabs(gh[i] - gr[i]) > 1e-2f * std::fabs(gr[i]) + floor;
    CHECK(bad == 0);
  }
}

TEST_CASE("autocast: a GPT's forward keeps at most 0.55x the bytes it keeps in f32") {
  nn::models::GPTConfig c;
  c.vocab = 65, c.block = 128, c.layers = 2, c.heads = 4, c.embd = 128;
  manual_seed(7);
  nn::models::GPT model(c);
  Generator g(8);
  Tensor x = randint(0, 65, {16, 128}, DType::i64, &g), y = randint(0, 65, {16, 128}, DType::i64, &g);
  const int64_t f32 = held_by([&] { return model.loss(x, y); });
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(dt)));
    const int64_t half = held_by([&] {
      AutocastGuard ac(dt);
      Tensor loss = model.loss(x, y);
      autocast::clear_cache();  // the weight casts are not activations
      return loss;
    });
    MESSAGE(std::string(dtype_name(dt)), ": ", half, " bytes kept by the forward, f32 ", f32, " (",
            double(half) / double(f32), "x)");
    CHECK(double(half) <= 0.55 * double(f32));
  }
}

// SPDX-License-Identifier: MIT
// nn layers: Linear, Embedding, LayerNorm, Dropout, activations, Flatten,
// MultiheadAttention and TransformerBlock (shapes, init, errors, causality,
// values against naive loops, gradients in f64).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/nn/attention.h>
#include <snug/nn/layers.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_approx;
using snug::testing::make;
using namespace snug::nn;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dt = kFloat32) {
  Generator g(seed);
  return randn(s, TensorOptions(dt), &g);
}
bool bit_equal(const Tensor& a, const Tensor& b) {
  Tensor ac = a.contiguous(), bc = b.contiguous();
  return ac.shape() == bc.shape() && ac.dtype() == bc.dtype() &&
         std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

}  // namespace

TEST_CASE("Linear: shapes, parameters, PyTorch init range, errors") {
  Linear l(16, 64);
  CHECK(l.weight.shape() == Shape{64, 16});
  CHECK(l.bias.shape() == Shape{64});
  CHECK(l.num_parameters() == 16 * 64 + 64);
  CHECK(l.weight.requires_grad());
  const double bound = 1.0 / std::sqrt(16.0);
  double lo = 1, hi = -1, sum = 0;
  for (double v : l.weight.to_vector<double>()) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(lo < -0.9 * bound);  // the whole range is used, not a narrower one
  CHECK(hi > 0.9 * bound);
  CHECK(std::fabs(sum / 1024) < 0.03);
  for (double v : l.bias.to_vector<double>()) CHECK(std::fabs(v) <= bound);
  // Two layers draw different values.
  Linear l2(16, 64);
  CHECK_FALSE(bit_equal(l.weight, l2.weight));
  CHECK(l.forward(zeros({2, 5, 16})).shape() == Shape{2, 5, 64});
  CHECK(l.forward(zeros({16})).shape() == Shape{64});
  Linear nb(3, 2, false, TensorOptions(kFloat64));
  CHECK_FALSE(nb.bias.defined());
  CHECK(nb.weight.dtype() == kFloat64);
  CHECK(nb.named_parameters().size() == 1);
  CHECK(nb.repr() == "Linear(in=3, out=2, bias=false)");
  CHECK_THROWS_AS(Linear(0, 3), ValueError);
  CHECK_THROWS_AS(Linear(3, -1), ValueError);
  CHECK_THROWS_AS(l.forward(zeros({2, 15})), ShapeError);
}

TEST_CASE("Linear: forward values against a naive loop") {
  Linear l(3, 2);
  {
    NoGradGuard ng;
    l.weight.copy_(make({1, 2, 3, -1, 0, 1}, {2, 3}));
    l.bias.copy_(make({0.5, -0.5}, {2}));
  }
  check_approx(l.forward(make({1, 1, 1, 2, 0, -1}, {2, 3})), {6.5, -0.5, 2 - 3 + 0.5, -2 - 1 - 0.5});
}

TEST_CASE("Embedding: shapes, N(0, 1) init, errors") {
  Embedding e(100, 32);
  CHECK(e.weight.shape() == Shape{100, 32});
  auto v = e.weight.to_vector<double>();
  double m = 0, s2 = 0;
  for (double x : v) m += x;
  m /= v.size();
  for (double x : v) s2 += (x - m) * (x - m);
  double sd = std::sqrt(s2 / v.size());
  CHECK(std::fabs(m) < 0.06);
  CHECK(sd == doctest::Approx(1.0).epsilon(0.06));
  Tensor idx = from_vector<int64_t>({1, 99, 0, 5, 5, 7}, {2, 3}, TensorOptions(kInt64));
  Tensor y = e.forward(idx);
  CHECK(y.shape() == Shape{2, 3, 32});
  CHECK(bit_equal(y.select(0, 0).select(0, 1), e.weight.select(0, 99)));
  CHECK_THROWS_AS(e.forward(from_vector<int64_t>({100}, {1}, TensorOptions(kInt64))), IndexError);
  CHECK_THROWS_AS(Embedding(0, 3), ValueError);
  CHECK(e.repr() == "Embedding(100, 32)");
}

TEST_CASE("LayerNorm: ones/zeros init, affine or not, errors") {
  LayerNorm ln(4);
  CHECK(ln.weight.to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(ln.bias.to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(ln.named_parameters().size() == 2);
  LayerNorm plain(4, 1e-5, false);
  CHECK(plain.named_parameters().empty());
  Tensor x = make({1, 2, 3, 4, 2, 2, 2, 6}, {2, 4});
  // Row 1: mean 2.5, var 1.25; row 2: mean 3, var 3.
  std::vector<double> want;
  for (double v : {1, 2, 3, 4}) want.push_back((v - 2.5) / std::sqrt(1.25 + 1e-5));
  for (double v : {2, 2, 2, 6}) want.push_back((v - 3) / std::sqrt(3 + 1e-5));
  check_approx(plain.forward(x), want, 1e-5);
  {
    NoGradGuard ng;
    ln.weight.fill_(2);
    ln.bias.fill_(1);
  }
  std::vector<double> want2;
  for (double w : want) want2.push_back(2 * w + 1);
  check_approx(ln.forward(x), want2, 1e-5);
  CHECK_THROWS_AS(ln.forward(zeros({2, 5})), ShapeError);
  CHECK_THROWS_AS(LayerNorm(0), ValueError);
}

TEST_CASE("Dropout: train drops with probability p and rescales; eval is the identity") {
  Dropout d(0.25);
  Tensor x = ones({4000});
  Tensor y = d.forward(x);
  int zeros_n = 0;
  for (double v : y.to_vector<double>()) {
    if (v == 0)
      ++zeros_n;
    else
      CHECK(v == doctest::Approx(1 / 0.75));
  }
  CHECK(zeros_n > 850);
  CHECK(zeros_n < 1150);
  d.eval();
  CHECK(bit_equal(d.forward(x), x));
  Dropout all(1.0);
  for (double v : all.forward(make({1, -2, 3}, {3})).to_vector<double>()) CHECK(v == 0.0);
  CHECK_THROWS_AS(Dropout(1.5), ValueError);
  CHECK_THROWS_AS(Dropout(-0.1), ValueError);
}

TEST_CASE("activations and Flatten") {
  std::vector<double> xv = {-2, -0.5, 0, 0.5, 3};
  Tensor x = make(xv, {5}, kFloat64);
  std::vector<double> relu_w, gelu_w, gelu_t, silu_w;
  for (double v : xv) {
    relu_w.push_back(v > 0 ? v : 0);
    gelu_w.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    gelu_t.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    silu_w.push_back(v / (1 + std::exp(-v)));
  }
  check_approx(ReLU().forward(x), relu_w, 1e-12);
  check_approx(GELU().forward(x), gelu_w, 1e-12);
  check_approx(GELU(GeluApprox::tanh).forward(x), gelu_t, 1e-12);
  check_approx(SiLU().forward(x), silu_w, 1e-12);
  Tensor t = zeros({2, 3, 4});
  CHECK(Flatten().forward(t).shape() == Shape{2, 12});
  CHECK(Flatten(0, 1).forward(t).shape() == Shape{6, 4});
  CHECK(Flatten(0).forward(t).shape() == Shape{24});
}

// ---- attention ----------------------------------------------------------------------

namespace {
// Naive multi-head self-attention of x (T, C) with the module's weights:
// qkv = x Wqkv^T + b, head h of q/k/v is columns [h D, (h+1) D) of each third.
std::vector<double> naive_mha(const std::vector<double>& x, int64_t T, int64_t C, int64_t H,
                              const MultiheadAttention& m, bool causal) {
  auto Wq = m.qkv->weight.to_vector<double>(), bq = m.qkv->bias.to_vector<double>();
  auto Wp = m.proj->weight.to_vector<double>(), bp = m.proj->bias.to_vector<double>();
  const int64_t D = C / H;
  std::vector<double> qkv(T * 3 * C);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < 3 * C; ++o) {
      double s = bq[o];
      for (int64_t i = 0; i < C; ++i) s += x[t * C + i] * Wq[o * C + i];
      qkv[t * 3 * C + o] = s;
    }
  std::vector<double> y(T * C, 0.0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> sc(T, -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < T; ++j) {
        if (causal && j > i) continue;
        double d = 0;
        for (int64_t c = 0; c < D; ++c) d += qkv[i * 3 * C + h * D + c] * qkv[j * 3 * C + C + h * D + c];
        sc[j] = d / std::sqrt(double(D));
        mx = std::max(mx, sc[j]);
      }
      double z = 0;
      for (int64_t j = 0; j < T; ++j) z += std::isinf(sc[j]) ? 0 : std::exp(sc[j] - mx);
      for (int64_t j = 0; j < T; ++j) {
        if (std::isinf(sc[j])) continue;
        double p = std::exp(sc[j] - mx) / z;
        for (int64_t c = 0; c < D; ++c) y[i * C + h * D + c] += p * qkv[j * 3 * C + 2 * C + h * D + c];
      }
    }
  std::vector<double> out(T * C);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < C; ++o) {
      double s = bp[o];
      for (int64_t i = 0; i < C; ++i) s += y[t * C + i] * Wp[o * C + i];
      out[t * C + o] = s;
    }
  return out;
}
}  // namespace

TEST_CASE("MultiheadAttention: shapes, values against naive attention, errors") {
  for (bool causal : {true, false}) {
    MultiheadAttention m(8, 2, causal);
    m.to(kFloat64);
    CHECK(m.qkv->weight.shape() == Shape{24, 8});
    CHECK(m.proj->weight.shape() == Shape{8, 8});
    Tensor x = rnd({2, 5, 8}, 1, kFloat64);
    Tensor y = m.forward(x);
    CHECK(y.shape() == Shape{2, 5, 8});
    for (int64_t b = 0; b < 2; ++b) {
      INFO("causal ", causal, " b ", b);
      check_approx(y.select(0, b), naive_mha(x.select(0, b).contiguous().to_vector<double>(), 5, 8, 2, m, causal),
                   1e-10);
    }
  }
  CHECK_THROWS_AS(MultiheadAttention(10, 3), ValueError);
  MultiheadAttention m(8, 2);
  CHECK_THROWS_AS(m.forward(zeros({5, 8})), ShapeError);
  CHECK_THROWS_AS(m.forward(zeros({1, 5, 6})), ShapeError);
  CHECK(m.repr() == "MultiheadAttention(embd=8, heads=2, causal=true)");
}

TEST_CASE("MultiheadAttention: a bool mask blocks keys") {
  MultiheadAttention m(4, 2, /*causal=*/false);
  Tensor x = rnd({1, 3, 4}, 2);
  // Blocking every key j > i by an explicit mask equals causal attention.
  Tensor mask = from_vector<uint8_t>({0, 1, 1, 0, 0, 1, 0, 0, 0}, {3, 3}, TensorOptions(kBool));
  Tensor y_mask = m.forward(x, mask);
  m.causal = true;
  Tensor y_causal = m.forward(x);
  check_approx(y_mask, y_causal.to_vector<double>(), 1e-5);
  m.causal = false;
  Tensor y_full = m.forward(x);
  CHECK_FALSE(bit_equal(y_full, y_causal));
}

TEST_CASE("causality: perturbing a later token leaves earlier outputs bit-identical") {
  const int64_t T = 6, C = 8;
  MultiheadAttention mha(C, 2);
  TransformerBlock blk(C, 2);
  Tensor x = rnd({2, T, C}, 3);
  for (int64_t t_pert : {5, 3}) {
    Tensor x2 = x.clone();
    {
      NoGradGuard ng;
      x2.select(1, t_pert).add_(1.5);
    }
    for (Module* m : std::vector<Module*>{&mha, &blk}) {
      INFO(m->name(), " perturbing ", t_pert);
      Tensor y = m->forward(x), y2 = m->forward(x2);
      for (int64_t t = 0; t < t_pert; ++t) CHECK(bit_equal(y.select(1, t), y2.select(1, t)));
      CHECK_FALSE(bit_equal(y.select(1, t_pert), y2.select(1, t_pert)));
    }
  }
  // A non-causal block does see the future.
  TransformerBlock full(C, 2, /*causal=*/false);
  Tensor x2 = x.clone();
  {
    NoGradGuard ng;
    x2.select(1, T - 1).add_(1.5);
  }
  CHECK_FALSE(bit_equal(full.forward(x).select(1, 0), full.forward(x2).select(1, 0)));
}

TEST_CASE("TransformerBlock: structure, shapes, pre-LN residual form") {
  TransformerBlock blk(8, 2);
  auto np = blk.named_parameters();
  std::vector<std::string> names;
  for (auto& [n, t] : np) names.push_back(n);
  std::vector<std::string> want = {"ln_1.weight",      "ln_1.bias",      "attn.qkv.weight", "attn.qkv.bias",
                                   "attn.proj.weight", "attn.proj.bias", "ln_2.weight",     "ln_2.bias",
                                   "fc.weight",        "fc.bias",        "fc_proj.weight",  "fc_proj.bias"};
  CHECK(names == want);
  CHECK(blk.fc->weight.shape() == Shape{32, 8});
  CHECK(blk.num_parameters() == 2 * 8 + 24 * 8 + 24 + 64 + 8 + 2 * 8 + 32 * 8 + 32 + 8 * 32 + 8);
  Tensor x = rnd({3, 4, 8}, 4);
  CHECK(blk.forward(x).shape() == Shape{3, 4, 8});
  // With the output projections zeroed both residual branches vanish: y == x.
  {
    NoGradGuard ng;
    blk.attn->proj->weight.zero_();
    blk.attn->proj->bias.zero_();
    blk.fc_proj->weight.zero_();
    blk.fc_proj->bias.zero_();
  }
  CHECK(bit_equal(blk.forward(x), x));
}

namespace {
// Central differences on a few elements of each parameter of m (f64), compared
// with the gradient backward() put there.
void check_param_grads(Module& m, const std::function<Tensor()>& loss_fn, int per_param = 3) {
  m.zero_grad();
  loss_fn().backward();
  for (auto& [name, p] : m.named_parameters()) {
    REQUIRE(p.grad().defined());
    auto g = p.grad().contiguous().to_vector<double>();
    const int64_t n = p.numel();
    for (int k = 0; k < per_param && k < n; ++k) {
      const int64_t e = (k * 7919) % n;
      double* d = static_cast<double*>(p.data_ptr());
      const double orig = d[e], h = 1e-6;
      double lp, lm;
      {
        NoGradGuard ng;
        d[e] = orig + h;
        lp = loss_fn().item();
        d[e] = orig - h;
        lm = loss_fn().item();
        d[e] = orig;
      }
      double num = (lp - lm) / (2 * h);
      const std::string pname = name;  // clang 14 cannot capture structured bindings
      INFO(pname, " element ", e, ": analytic ", g[e], " numeric ", num);
      CHECK(std::fabs(num - g[e]) <= 1e-6 + 1e-4 * std::fabs(num));
    }
  }
}
}  // namespace

TEST_CASE("TransformerBlock in f64: gradcheck of the input and of the parameters") {
  TransformerBlock blk(4, 2);
  blk.to(kFloat64);
  for (auto& p : blk.parameters()) CHECK(p.dtype() == kFloat64);
  // Non-trivial LayerNorm affine parameters.
  {
    NoGradGuard ng;
    blk.ln_1->weight.copy_(rnd({4}, 5, kFloat64));
    blk.ln_2->bias.copy_(rnd({4}, 6, kFloat64));
  }
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& a) { return blk.forward(a[0]); },
                               {rnd({1, 3, 4}, 7, kFloat64)});
  INFO(r.message);
  CHECK(r.ok);
  Tensor x = rnd({2, 3, 4}, 8, kFloat64);
  Tensor w = rnd({2, 3, 4}, 9, kFloat64);
  check_param_grads(blk, [&] { return sum(blk.forward(x) * w); });
}

TEST_CASE("MultiheadAttention in f64: gradcheck of the input") {
  MultiheadAttention m(4, 2, true);
  m.to(kFloat64);
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& a) { return m.forward(a[0]); },
                               {rnd({2, 3, 4}, 10, kFloat64)});
  INFO(r.message);
  CHECK(r.ok);
}

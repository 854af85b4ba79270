// SPDX-License-Identifier: MIT
// dropout: identities (p = 0, eval), p = 1, kept fraction and 1/(1-p)
// scaling on 100k elements, seeded reproducibility, gradient = mask * scale,
// argument errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>

using namespace snug;

namespace {
using V = std::vector<double>;
V vals(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("dropout: p = 0 and eval mode are the identity") {
  Tensor x = from_vector<float>({1, -2, 3, 4}, {2, 2});
  Tensor a = dropout(x, 0.0);
  CHECK(vals(a) == V{1, -2, 3, 4});
  CHECK(a.shape() == x.shape());
  Tensor b = dropout(x, 0.7, /*training=*/false);
  CHECK(vals(b) == V{1, -2, 3, 4});
  Tensor b1 = dropout(x, 1.0, false);
  CHECK(vals(b1) == V{1, -2, 3, 4});
  // Gradient passes through unchanged.
  Tensor w = from_vector<float>({1, 2}, {2}, TensorOptions(kFloat32, kCPU, true));
  (dropout(w, 0.5, false) * from_vector<float>({3, 4}, {2})).sum().backward();
  CHECK(vals(w.grad()) == V{3, 4});
}

TEST_CASE("dropout: p = 1 gives zeros (and zero gradient)") {
  Tensor w = from_vector<float>({1, -2, 3}, {3}, TensorOptions(kFloat32, kCPU, true));
  Tensor y = dropout(w, 1.0);
  CHECK(vals(y) == V{0, 0, 0});
  CHECK(y.shape() == Shape{3});
  y.sum().backward();
  CHECK(vals(w.grad()) == V{0, 0, 0});
}

TEST_CASE("dropout: kept fraction ~ 1 - p and kept values scaled by 1/(1-p)") {
  const int64_t n = 100000;
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    INFO("p = " << p);
    Generator g(1234);
    Tensor x = full({n}, 2.0, kFloat64);
    V y = vals(dropout(x, p, true, &g));
    int64_t kept = 0;
    bool ok = true;
    const double want = 2.0 / (1.0 - p);
    for (double v : y) {
      if (v != 0) {
        ++kept;
        ok = ok && v == want;  // f64: the scale is exact to f64 precision
      }
    }
    CHECK(ok);
    double frac = static_cast<double>(kept) / n;
    double sd = std::sqrt(p * (1 - p) / n);
    CHECK(std::fabs(frac - (1 - p)) < 5 * sd);
  }
  // f32 and 16-bit inputs: kept values are x * 1/(1-p) in that dtype.
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    Generator g(99);
    Tensor x = full({1000}, 1.5, dt);
    Tensor y = dropout(x, 0.2, true, &g);
    CHECK(y.dtype() == dt);
    double tol = dt == kFloat32 ? 1e-6 : (dt == kFloat16 ? 1e-3 : 8e-3);
    int zeros = 0;
    for (double v : vals(y)) {
      if (v == 0)
        ++zeros;
      else
        CHECK(std::fabs(v - 1.875) <= tol * 1.875);
    }
    CHECK(zeros > 100);
    CHECK(zeros < 300);
  }
  // The expectation is preserved: mean(dropout(x)) ~ mean(x).
  Generator g(7);
  Tensor x = full({n}, 1.0, kFloat64);
  double mean = vals(dropout(x, 0.4, true, &g).sum())[0] / n;
  CHECK(mean == doctest::Approx(1.0).epsilon(0.01));
}

TEST_CASE("dropout: same seed, same mask; different seeds differ") {
  Tensor x = ones({4096});
  Generator g1(42), g2(42), g3(43);
  V a = vals(dropout(x, 0.5, true, &g1));
  V b = vals(dropout(x, 0.5, true, &g2));
  V c = vals(dropout(x, 0.5, true, &g3));
  CHECK(a == b);
  CHECK(a != c);
  // The generator advances: a second draw differs from the first.
  V a2 = vals(dropout(x, 0.5, true, &g1));
  CHECK(a2 != a);
  // Restoring the state replays the mask exactly (what checkpointing relies on).
  Generator g4(5);
  auto st = g4.get_state();
  V d1 = vals(dropout(x, 0.3, true, &g4));
  g4.set_state(st);
  CHECK(vals(dropout(x, 0.3, true, &g4)) == d1);
  // The default generator is seeded by manual_seed.
  manual_seed(10);
  V e1 = vals(dropout(x, 0.5));
  manual_seed(10);
  CHECK(vals(dropout(x, 0.5)) == e1);
  // The mask does not depend on x's values or dtype.
  Generator h1(8), h2(8);
  V m1 = vals(dropout(full({512}, 3.0, kFloat64), 0.5, true, &h1));
  V m2 = vals(dropout(full({512}, -1.0, kFloat32), 0.5, true, &h2));
  for (size_t i = 0; i < m1.size(); ++i) CHECK((m1[i] == 0) == (m2[i] == 0));
}

TEST_CASE("dropout: gradient equals mask * scale") {
  const double p = 0.25, scale = 1.0 / (1.0 - p);
  Generator g(77);
  Tensor x = from_vector<double>(V(1000, 1.0), {10, 100}, TensorOptions(kFloat64, kCPU, true));
  Tensor y = dropout(x, p, true, &g);
  Tensor up = full({10, 100}, 3.0, kFloat64);
  (y * up).sum().backward();
  V yv = vals(y), gv = vals(x.grad());
  bool ok = true;
  for (size_t i = 0; i < yv.size(); ++i) {
    double mask = yv[i] != 0 ? 1.0 : 0.0;  // x = 1, so y != 0 exactly where kept
    ok = ok && gv[i] == 3.0 * mask * scale;
  }
  CHECK(ok);
  // Finite differences: with a fixed generator state dropout is linear in x.
  auto r = autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        Generator gg(3);
        return dropout(in[0], 0.4, true, &gg);
      },
      {from_vector<double>({0.5, -1, 2, 3, -0.25, 1.5, 0.7, -2}, {2, 4}, kFloat64)});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("dropout: argument errors") {
  Tensor x = ones({4});
  CHECK_THROWS_AS(dropout(x, -0.1), ValueError);
  CHECK_THROWS_AS(dropout(x, 1.5), ValueError);
  CHECK_THROWS_AS(dropout(x, std::numeric_limits<double>::quiet_NaN()), ValueError);
  CHECK_THROWS_AS(dropout(x, 2.0, false), ValueError);  // checked in eval mode too
  try {
    dropout(x, 1.5);
  } catch (const ValueError& e) {
    std::string m = e.what();
    CHECK(m.find("dropout") != std::string::npos);
    CHECK(m.find("1.5") != std::string::npos);
  }
  CHECK_THROWS_AS(dropout(ones({4}, kInt64), 0.5), DTypeError);
}

TEST_CASE("dropout: the backend entry gives the composition's values bit for bit (rand's mask, the scale in x's dtype)") {
  // Backend::dropout (core/backend.h) promises the values of rand >= p, to_dtype, affine and mul
  // from the same generator state, in every dtype: that is what the GPU kernel is checked against.
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    CAPTURE(std::string(dtype_name(dt)));
    const double p = 0.1;
    Generator g1(77), g2(77);
    const Tensor x = (randn({7, 301}) * 3.0).to(dt);
    const Tensor fused = dropout(x, p, true, &g1);
    const Tensor u = rand({7, 301}, TensorOptions(kFloat32), &g2);
    const Tensor mask = (u >= full({}, p, TensorOptions(kFloat32))).to(dt) * (1.0 / (1.0 - p));
    const Tensor composed = x * mask;
    CHECK(fused.dtype() == dt);
    CHECK(vals(fused) == vals(composed));
    // And the gradient: g * mask.
    Tensor xr = x.detach().requires_grad_();
    Generator g3(77);
    Tensor y = dropout(xr, p, true, &g3);
    const Tensor gout = randn({7, 301}).to(dt);
    y.backward(gout);
    CHECK(vals(xr.grad()) == vals(gout * mask));
  }
}

// SPDX-License-Identifier: MIT
// Elementwise ops (autograd/ops.h): values against hand-computed results and
// std:: math, broadcasting, type promotion, scalar operators, comparisons,
// where/masked_fill/clamp, f16/bf16 inputs, in-place ops (version counter and
// autograd rules), a gradcheck for every differentiable op, and error paths.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/functors.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
using snug::testing::contains;
using snug::testing::error_of;
using snug::testing::make;
using snug::testing::rnd;
using snug::testing::vals;

namespace {
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
using V = std::vector<double>;

Tensor make1(const V& v, DType dt = kFloat32) { return make(v, {static_cast<int64_t>(v.size())}, dt); }
Tensor leaf(const V& v, const Shape& s, DType dt = kFloat32) {
  return from_vector<double>(v, s, TensorOptions(dt, kCPU, true));
}
void check_vals(const Tensor& t, const V& want, double eps = 1e-6) {
  V got = vals(t);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(want[i]))
      CHECK(std::isnan(got[i]));
    else if (std::isinf(want[i]))
      CHECK(got[i] == want[i]);
    else
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(eps).scale(1.0));
  }
}
double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
}  // namespace

// ---- values ------------------------------------------------------------------

TEST_CASE("binary ops: values") {
  Tensor a = make1({1, -2, 3.5, 4}), b = make1({2, 0.5, -1, 4});
  check_vals(add(a, b), {3, -1.5, 2.5, 8});
  check_vals(add(a, b, 2.0), {5, -1, 1.5, 12});
  check_vals(sub(a, b), {-1, -2.5, 4.5, 0});
  check_vals(sub(a, b, 0.5), {0, -2.25, 4, 2});
  check_vals(mul(a, b), {2, -1, -3.5, 16});
  check_vals(div(a, b), {0.5, -4, -3.5, 1});
  check_vals(maximum(a, b), {2, 0.5, 3.5, 4});
  check_vals(minimum(a, b), {1, -2, -1, 4});
  check_vals(a + b, {3, -1.5, 2.5, 8});
  check_vals(a - b, {-1, -2.5, 4.5, 0});
  check_vals(a * b, {2, -1, -3.5, 16});
  check_vals(a / b, {0.5, -4, -3.5, 1});
  check_vals(pow(make1({2, 9, 0.5, 3}), make1({3, 0.5, 2, 0})), {8, 3, 0.25, 1});
  check_vals(pow(make1({-2, 0.5, 3}), 3.0), {-8, 0.125, 27});
  check_vals(pow(make1({4, 9}), 0.5), {2, 3});
  check_vals(pow(make1({-3, 5}), 2.0), {9, 25});
  check_vals(pow(make1({2, 4}), -1.0), {0.5, 0.25});
  check_vals(make1({2, 3}).pow(1.0), {2, 3});
  check_vals(pow(make1({2, 3}), 0.0), {1, 1});
  // Division by zero follows IEEE.
  check_vals(div(make1({1, -1, 0}), make1({0, 0, 0})), {INFINITY, -INFINITY, std::numeric_limits<double>::quiet_NaN()});
  // maximum/minimum propagate NaN from either side.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  check_vals(maximum(make1({nan, 1}), make1({1, nan})), {nan, nan});
  check_vals(minimum(make1({nan, 1}), make1({1, nan})), {nan, nan});
}

TEST_CASE("unary ops: values vs std:: math") {
  V xs = {-2.5, -0.3, 0.7, 1.9};
  Tensor x = make1(xs, kFloat64);
  auto ref = [&](double (*f)(double)) {
    V r;
    for (double v : xs) r.push_back(f(v));
    return r;
  };
  check_vals(neg(x), {2.5, 0.3, -0.7, -1.9});
  check_vals(-x, {2.5, 0.3, -0.7, -1.9});
  check_vals(exp(x), ref([](double v) { return std::exp(v); }), 1e-12);
  check_vals(tanh(x), ref([](double v) { return std::tanh(v); }), 1e-12);
  check_vals(sigmoid(x), ref(sigmoid_ref), 1e-12);
  check_vals(relu(x), {0, 0, 0.7, 1.9});
  check_vals(gelu(x), ref(gelu_ref), 1e-12);
  check_vals(gelu(x, GeluApprox::tanh), ref(gelu_tanh_ref), 1e-12);
  check_vals(silu(x), ref([](double v) { return v * sigmoid_ref(v); }), 1e-12);
  check_vals(square(x), {6.25, 0.09, 0.49, 3.61}, 1e-12);
  check_vals(abs(x), {2.5, 0.3, 0.7, 1.9});
  check_vals(clamp(x, -1, 1), {-1, -0.3, 0.7, 1});
  check_vals(clamp(x, 0.5, 0.5), {0.5, 0.5, 0.5, 0.5});
  Tensor p = make1({0.25, 1, 4, 9}, kFloat64);
  check_vals(log(p), {std::log(0.25), 0, std::log(4.0), std::log(9.0)}, 1e-12);
  check_vals(sqrt(p), {0.5, 1, 2, 3});
  check_vals(rsqrt(p), {2, 1, 0.5, 1.0 / 3}, 1e-12);
  // Same math in f32 (the functors are shared; only precision differs).
  Tensor xf = make1(xs, kFloat32);
  check_vals(gelu(xf), ref(gelu_ref), 1e-5);
  check_vals(silu(xf), ref([](double v) { return v * sigmoid_ref(v); }), 1e-5);
  check_vals(sigmoid(xf), ref(sigmoid_ref), 1e-5);
  // Method forms.
  check_vals(p.sqrt(), {0.5, 1, 2, 3});
  check_vals(x.abs(), {2.5, 0.3, 0.7, 1.9});
  check_vals(x.relu(), {0, 0, 0.7, 1.9});
  check_vals(x.neg(), {2.5, 0.3, -0.7, -1.9});
  check_vals(p.log(), {std::log(0.25), 0, std::log(4.0), std::log(9.0)}, 1e-12);
  check_vals(x.exp(), ref([](double v) { return std::exp(v); }), 1e-12);
  check_vals(x.tanh(), ref([](double v) { return std::tanh(v); }), 1e-12);
  check_vals(x.sigmoid(), ref(sigmoid_ref), 1e-12);
  // Edge values.
  check_vals(log(make1({0, -1})), {-INFINITY, std::numeric_limits<double>::quiet_NaN()});
  check_vals(sigmoid(make1({-200, 200})), {0, 1});
  check_vals(clamp(make1({std::numeric_limits<double>::quiet_NaN()}), 0, 1),
             {std::numeric_limits<double>::quiet_NaN()});
  CHECK_THROWS_AS(clamp(x, 2, 1), ValueError);
}

namespace {
// Distance in units in the last place of float, measured at the reference.
double ulps(float got, double ref) {
  const float r = static_cast<float>(ref);
  const double ulp = std::nextafter(std::fabs(r), INFINITY) - std::fabs(r);
  return std::fabs(double(got) - ref) / ulp;
}
}  // namespace

// NOTE [ Vectorizable exp and erf for float ] in core/functors.h.
TEST_CASE("exp_approx and erf_approx stay within their ulp bounds on dense grids") {
  double worst_exp = 0, worst_erf = 0;
  for (int i = -400000; i <= 400000; ++i) {
    const float y = 87.0f * float(i) / 400000.0f;
    worst_exp = std::max(worst_exp, ulps(fmath::exp_approx(y), std::exp(double(y))));
  }
  for (int i = -500000; i <= 500000; ++i) {
    const float x = 5.0f * float(i) / 500000.0f;
    worst_erf = std::max(worst_erf, ulps(fmath::erf_approx(x), std::erf(double(x))));
  }
  for (float x : {1e-30f, 1e-8f, 1e-3f, 0.999999f, 1.0f, 1.000001f, 3.999f, 4.0f, 30.0f})
    worst_erf = std::max(worst_erf, ulps(fmath::erf_approx(x), std::erf(double(x))));
  MESSAGE("exp_approx max error ", worst_exp, " ulp; erf_approx max error ", worst_erf, " ulp");
  CHECK(worst_exp <= 1.5);
  CHECK(worst_erf <= 3.0);
  CHECK(fmath::erf_approx(-0.5f) == -fmath::erf_approx(0.5f));
  CHECK(fmath::erf_approx(INFINITY) == 1.0f);
  CHECK(fmath::erf_approx(-INFINITY) == -1.0f);
  CHECK(std::isnan(fmath::erf_approx(NAN)));
  CHECK(fmath::exp_approx(0.0f) == 1.0f);
  CHECK(fmath::exp_approx(-INFINITY) == 0.0f);  // softmax's masked entries
  CHECK(fmath::exp_approx(-1000.0f) == 0.0f);
  CHECK(std::isnan(fmath::exp_approx(NAN)));
  CHECK(fmath::exp_approx(88.0f) == doctest::Approx(std::exp(88.0)).epsilon(1e-6));
}

// NOTE [ GELU's erf ] in core/functors.h: an absolute bound, as GELU's error
// is x times erf's.
TEST_CASE("erf_gelu stays within 5e-7 of erf everywhere, is odd, saturates to +-1") {
  double worst = 0, at = 0;
  for (int i = -1000000; i <= 1000000; ++i) {
    const float x = 6.0f * float(i) / 1000000.0f;
    const double e = std::fabs(double(fmath::erf_gelu(x)) - std::erf(double(x)));
    if (e > worst) worst = e, at = x;
  }
  MESSAGE("erf_gelu max abs error ", worst, " at ", at);
  // 3.5e-7 in the -O3 build, 4.2e-7 in the -O1 sanitizer build (the compiler
  // fuses different multiply-adds into FMAs).
  CHECK(worst <= 5e-7);
  for (float x : {1e-30f, 1e-8f, 0.3f, 1.7f, 3.9f}) CHECK(fmath::erf_gelu(-x) == -fmath::erf_gelu(x));
  CHECK(fmath::erf_gelu(0.0f) == 0.0f);
  CHECK(fmath::erf_gelu(3.92f) == 1.0f);
  CHECK(fmath::erf_gelu(1e30f) == 1.0f);
  CHECK(fmath::erf_gelu(INFINITY) == 1.0f);
  CHECK(fmath::erf_gelu(-INFINITY) == -1.0f);
  CHECK(std::isnan(fmath::erf_gelu(NAN)));
}

TEST_CASE("f32 GELU and its gradient match f64 over [-8, 8], NaN propagates") {
  std::vector<double> xs;
  for (int i = -40000; i <= 40000; ++i) xs.push_back(8.0 * i / 40000.0);
  xs.push_back(std::numeric_limits<double>::quiet_NaN());
  Tensor x64 = make1(xs, kFloat64), x32 = x64.to(kFloat32);
  Tensor y64 = gelu(x64), y32 = gelu(x32).to(kFloat64);
  Tensor g64 = raw::binary(BinaryOp::gelu_backward, ones_like(x64), x64);
  Tensor g32 = raw::binary(BinaryOp::gelu_backward, ones_like(x32), x32).to(kFloat64);
  auto a64 = vals(y64), a32 = vals(y32), b64 = vals(g64), b32 = vals(g32);
  double worst_y = 0, worst_g = 0;
  for (size_t i = 0; i + 1 < xs.size(); ++i) {
    // Absolute error scaled by max(1, |x|): what float rounding of x itself allows.
    const double scale = std::max(1.0, std::fabs(xs[i]));
    worst_y = std::max(worst_y, std::fabs(a32[i] - a64[i]) / scale);
    worst_g = std::max(worst_g, std::fabs(b32[i] - b64[i]) / scale);
  }
  MESSAGE("f32 gelu max scaled error ", worst_y, ", gelu' ", worst_g);
  CHECK(worst_y < 1e-6);
  CHECK(worst_g < 1e-6);
  CHECK(std::isnan(a32.back()));
  CHECK(std::isnan(b32.back()));
}

TEST_CASE("unary ops on integer tensors") {
  Tensor i = make1({-3, 0, 4}, kInt64);
  CHECK(neg(i).dtype() == kInt64);
  CHECK(vals(neg(i)) == V{3, 0, -4});
  CHECK(abs(i).dtype() == kInt64);
  CHECK(vals(abs(i)) == V{3, 0, 4});
  CHECK(vals(relu(i)) == V{0, 0, 4});
  CHECK(vals(square(make1({-3, 5}, kInt32))) == V{9, 25});
  CHECK(vals(clamp(i, -1, 2)) == V{-1, 0, 2});
  // Transcendental functions of integers give f32, as in PyTorch.
  Tensor e = exp(make1({0, 1}, kInt32));
  CHECK(e.dtype() == kFloat32);
  check_vals(e, {1, std::exp(1.0)}, 1e-6);
  CHECK(sqrt(make1({4, 9}, kInt64)).dtype() == kFloat32);
  check_vals(sqrt(make1({4, 9}, kInt64)), {2, 3});
  check_vals(sigmoid(make1({0}, kUInt8)), {0.5});
}

TEST_CASE("broadcasting: [2,1,3] op [4,1] -> [2,4,3]") {
  V av = {1, 2, 3, 4, 5, 6}, bv = {10, 20, 30, 40};
  Tensor a = make(av, {2, 1, 3}), b = make(bv, {4, 1});
  auto expect = [&](double (*f)(double, double)) {
    V r;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 3; ++k) r.push_back(f(av[i * 3 + k], bv[j]));
    return r;
  };
  Tensor s = a + b;
  CHECK(s.shape() == Shape{2, 4, 3});
  check_vals(s, expect([](double x, double y) { return x + y; }));
  check_vals(a - b, expect([](double x, double y) { return x - y; }));
  check_vals(b - a, expect([](double x, double y) { return y - x; }));
  check_vals(a * b, expect([](double x, double y) { return x * y; }));
  check_vals(a / b, expect([](double x, double y) { return x / y; }));
  check_vals(maximum(a, b * 0.1), expect([](double x, double y) { return std::max(x, 0.1 * y); }));
  check_vals(minimum(b * 0.1, a), expect([](double x, double y) { return std::min(x, 0.1 * y); }));
  check_vals(pow(a, b * 0.1), expect([](double x, double y) { return std::pow(x, 0.1 * y); }), 1e-5);
  CHECK((a < b * 0.1).shape() == Shape{2, 4, 3});
  // Scalars (0-d) and size-1 dims broadcast against anything.
  check_vals(a + scalar_tensor(1), {2, 3, 4, 5, 6, 7});
  CHECK((scalar_tensor(1) + make({1, 2}, {1, 2, 1})).shape() == Shape{1, 2, 1});
  // Non-contiguous operands.
  Tensor m = make({1, 2, 3, 4, 5, 6}, {2, 3});
  check_vals(m.t() + make1({100, 200}), {101, 204, 102, 205, 103, 206});
  check_vals(m.t() * m.t(), {1, 16, 4, 25, 9, 36});
  check_vals(m.slice(1, 0, 3, 2) - m.select(1, 1).unsqueeze(1), {-1, 1, -1, 1});
}

TEST_CASE("broadcasting on large non-contiguous tensors (threaded loop) matches a naive loop") {
  // 300 x 257 > the parallel grain; a transposed operand and a broadcast column.
  Generator g(11);
  Tensor a = randn({257, 300}, kFloat32, &g), b = randn({300, 1}, kFloat32, &g);
  Tensor out = a.t() * b + a.t();
  auto av = a.to_vector<float>(), bv = b.to_vector<float>(), ov = out.to_vector<float>();
  REQUIRE(out.shape() == Shape{300, 257});
  int bad = 0;
  for (int i = 0; i < 300; ++i)
    for (int j = 0; j < 257; ++j) {
      float x = av[j * 300 + i];
      volatile float prod = x * bv[i];  // rounded on its own, as the two ops do (no FMA contraction)
      float want = prod + x;
      bad += ov[i * 257 + j] != want;
    }
  CHECK(bad == 0);
  // A single long row split across threads.
  Tensor r = arange(0, 100000, 1, kFloat64);
  auto rv = (r * 2.0 + 1.0).to_vector<double>();
  bool ok = true;
  for (int i = 0; i < 100000; ++i) ok = ok && rv[i] == 2.0 * i + 1;
  CHECK(ok);
}

TEST_CASE("type promotion") {
  Tensor i64 = make1({7, -7}, kInt64), i32 = make1({2, 2}, kInt32), f32 = make1({0.5, 0.25});
  Tensor s = i64 + f32;
  CHECK(s.dtype() == kFloat32);
  check_vals(s, {7.5, -6.75});
  CHECK((i32 + i64).dtype() == kInt64);
  Tensor q = div(i64, make1({2, 2}, kInt64));  // true division
  CHECK(q.dtype() == kFloat32);
  check_vals(q, {3.5, -3.5});
  CHECK((i64 / i32).dtype() == kFloat32);
  CHECK((make1({1}, kUInt8) + make1({1}, kInt8)).dtype() == kInt32);
  CHECK((make1({1}, kFloat16) + make1({1}, kFloat32)).dtype() == kFloat32);
  CHECK((make1({1}, kFloat16) + make1({1}, kBFloat16)).dtype() == kFloat32);
  CHECK((make1({1}, kFloat16) * make1({3}, kInt64)).dtype() == kFloat16);
  CHECK((make1({1}, kFloat64) - make1({1}, kFloat32)).dtype() == kFloat64);
  CHECK((make1({1}, kBool) * make1({3}, kInt32)).dtype() == kInt32);
  CHECK(vals(make1({1, 0}, kBool) * make1({3, 3}, kInt32)) == V{3, 0});
  // u8 + u8 stays u8 and wraps.
  CHECK(vals(make1({200}, kUInt8) + make1({100}, kUInt8)) == V{44});
  CHECK(maximum(make1({1}, kInt32), make1({0.5}, kFloat64)).dtype() == kFloat64);
  CHECK(where(make1({1}, kBool), make1({1}, kInt64), make1({2.5})).dtype() == kFloat32);
}

TEST_CASE("scalar operators") {
  Tensor a = make1({1, -2, 4});
  check_vals(a + 1.5, {2.5, -0.5, 5.5});
  check_vals(1.5 + a, {2.5, -0.5, 5.5});
  check_vals(a - 1, {0, -3, 3});
  check_vals(1 - a, {0, 3, -3});
  check_vals(a * 3, {3, -6, 12});
  check_vals(3 * a, {3, -6, 12});
  check_vals(a / 4, {0.25, -0.5, 1});
  check_vals(2 / a, {2, -1, 0.5});
  CHECK((a + 1.5).dtype() == kFloat32);
  Tensor i = make1({1, -2, 4}, kInt64);
  CHECK((i + 2).dtype() == kInt64);
  check_vals(i + 2, {3, 0, 6});
  CHECK((i * 2).dtype() == kInt64);
  CHECK((i * 2.5).dtype() == kFloat32);
  check_vals(i * 2.5, {2.5, -5, 10});
  CHECK((i + 0.5).dtype() == kFloat32);
  check_vals(i + 0.5, {1.5, -1.5, 4.5});
  CHECK((i / 2).dtype() == kFloat32);
  check_vals(i / 2, {0.5, -1, 2});
  check_vals(8 / i, {8, -4, 2});
  check_vals(10 - i, {9, 12, 6});
  Tensor h = make1({1.5, -2}, kFloat16);
  CHECK((h * 2).dtype() == kFloat16);
  check_vals(h * 2, {3, -4});
  check_vals(h + 0.25, {1.75, -1.75});
  Tensor d = make1({1.0 / 3}, kFloat64);
  // f64 keeps full precision for scalar math.
  CHECK(vals(d * 3.0)[0] == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(vals(d + 1e-12)[0] == doctest::Approx(1.0 / 3 + 1e-12).epsilon(1e-15));
}

TEST_CASE("comparisons") {
  Tensor a = make1({1, 2, 3}), b = make1({3, 2, 1});
  auto B = [](const Tensor& t) { return t.to_vector<bool>(); };
  using VB = std::vector<bool>;
  CHECK((a == b).dtype() == kBool);
  CHECK(B(eq(a, b)) == VB{false, true, false});
  CHECK(B(ne(a, b)) == VB{true, false, true});
  CHECK(B(lt(a, b)) == VB{true, false, false});
  CHECK(B(le(a, b)) == VB{true, true, false});
  CHECK(B(gt(a, b)) == VB{false, false, true});
  CHECK(B(ge(a, b)) == VB{false, true, true});
  CHECK(B(a == b) == B(eq(a, b)));
  CHECK(B(a != b) == B(ne(a, b)));
  CHECK(B(a < b) == B(lt(a, b)));
  CHECK(B(a <= b) == B(le(a, b)));
  CHECK(B(a > b) == B(gt(a, b)));
  CHECK(B(a >= b) == B(ge(a, b)));
  CHECK(B(a < 2.5) == VB{true, true, false});
  CHECK(B(a > 1.5) == VB{false, true, true});
  // Mixed dtypes compare by value.
  CHECK(B(make1({2, 3}, kInt64) == make1({2.0, 3.5}, kFloat32)) == VB{true, false});
  CHECK(B(make1({2, 3}, kInt64) < 2.5) == VB{true, false});
  CHECK(B(make1({0.5, 3}, kFloat16) > 0.25) == VB{true, true});
  // Broadcast.
  Tensor c = make({1, 2}, {2, 1}) < make1({0, 1.5, 3});
  CHECK(c.shape() == Shape{2, 3});
  CHECK(B(c) == VB{false, true, true, false, false, true});
  // NaN compares unequal to everything.
  Tensor n = make1({std::numeric_limits<double>::quiet_NaN()});
  CHECK(B(n == n) == VB{false});
  CHECK(B(n != n) == VB{true});
  CHECK(B(n < 0.0) == VB{false});
  // bool tensors compare.
  CHECK(B(make1({1, 0}, kBool) == make1({1, 1}, kBool)) == VB{true, false});
}

TEST_CASE("where and masked_fill") {
  Tensor cond = make1({1, 0, 1}, kBool);
  Tensor a = make1({1, 2, 3}), b = make1({-1, -2, -3});
  check_vals(where(cond, a, b), {1, -2, 3});
  // Broadcast: cond [2,1], a [3], b scalar.
  Tensor c2 = make({1, 0}, {2, 1}, kBool);
  Tensor w = where(c2, a, scalar_tensor(9));
  CHECK(w.shape() == Shape{2, 3});
  check_vals(w, {1, 2, 3, 9, 9, 9});
  CHECK_THROWS_AS(where(make1({1, 0, 1}), a, b), DTypeError);
  CHECK_THROWS_AS(where(make1({1, 0}, kBool), a, b), ShapeError);

  Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  check_vals(masked_fill(x, make({1, 0, 0, 0, 0, 1}, {2, 3}, kBool), -5), {-5, 2, 3, 4, 5, -5});
  check_vals(masked_fill(x, make1({0, 1, 0}, kBool), 0.5), {1, 0.5, 3, 4, 0.5, 6});
  check_vals(masked_fill(x, make({1, 0}, {2, 1}, kBool), 7), {7, 7, 7, 4, 5, 6});
  CHECK(masked_fill(x, make1({1, 1, 1}, kBool), -INFINITY).dtype() == kFloat32);
  Tensor xi = make1({1, 2}, kInt64);
  CHECK(masked_fill(xi, make1({1, 0}, kBool), 9).dtype() == kInt64);
  CHECK(vals(masked_fill(xi, make1({1, 0}, kBool), 9)) == V{9, 2});
  CHECK_THROWS_AS(masked_fill(x, make1({1, 0, 1}), 0), DTypeError);
  // The mask must broadcast to x, not the other way round.
  std::string m = error_of([&] { masked_fill(make1({1, 2, 3}), make({1, 0, 1, 1, 0, 1}, {2, 3}, kBool), 0); });
  CHECK(contains(m, "masked_fill"));
  CHECK(contains(m, "[2, 3]"));
  CHECK_THROWS_AS(masked_fill(make1({1, 2, 3}), make({1, 0, 1, 1, 0, 1}, {2, 3}, kBool), 0), ShapeError);
}

TEST_CASE("f16/bf16 inputs compute in f32 and keep their dtype") {
  V xs = {-2.0, -0.5, 0.1, 0.75, 3.0};
  for (DType dt : {kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    Tensor x = make1(xs, dt);
    V xr = vals(x);                                              // the inputs as actually stored
    const double tol = dt == kFloat16 ? 1.0 / 1024 : 1.0 / 128;  // one storage ulp, relative
    auto ref = [&](double (*f)(double)) {
      V r;
      for (double v : xr) r.push_back(f(v));
      return r;
    };
    for (auto [name, t, want] : std::vector<std::tuple<const char*, Tensor, V>>{
             {"exp", exp(x), ref([](double v) { return std::exp(v); })},
             {"tanh", tanh(x), ref([](double v) { return std::tanh(v); })},
             {"sigmoid", sigmoid(x), ref(sigmoid_ref)},
             {"gelu", gelu(x), ref(gelu_ref)},
             {"gelu_tanh", gelu(x, GeluApprox::tanh), ref(gelu_tanh_ref)},
             {"silu", silu(x), ref([](double v) { return v * sigmoid_ref(v); })},
             {"square", square(x), ref([](double v) { return v * v; })},
             {"mul", x * x, ref([](double v) { return v * v; })},
             {"add", x + x, ref([](double v) { return v + v; })},
             {"div", x / make1({3}, dt), ref([](double v) { return v / 3; })},
             {"scalar", x * 3.0 + 1.0, ref([](double v) { return 3 * v + 1; })},
         }) {
      const char* op_name = name;  // clang 14: a structured binding cannot be captured (INFO's lambda)
      INFO(op_name);
      CHECK(t.dtype() == dt);
      V got = vals(t);
      for (size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= tol * std::fabs(want[i]) + 1e-7);
    }
    Tensor p = make1({0.5, 4, 9}, dt);
    check_vals(log(p), {std::log(0.5), std::log(4.0), std::log(9.0)}, tol);
    check_vals(rsqrt(p), {1 / std::sqrt(0.5), 0.5, 1.0 / 3}, tol);
    // 300 * 300 overflows f16 storage, but 300*300/300 in a single op does not matter:
    // a product that fits is exact when computed in f32 and rounded once.
    check_vals(make1({256}, dt) * make1({255}, dt), {dt == kFloat16 ? 65280.0 : 65280.0}, tol);
  }
  // Overflow in f16 storage gives inf; bf16 has f32's range.
  CHECK(std::isinf(vals(make1({300}, kFloat16) * make1({300}, kFloat16))[0]));
  CHECK(vals(make1({300}, kBFloat16) * make1({300}, kBFloat16))[0] == doctest::Approx(90000).epsilon(0.01));
}

// NOTE [ Half-precision elementwise loops ] (core/cpu/loop.h): bf16 and f32
// operands, all contiguous, are converted in registers, the rest through the
// chunked converters. Either way each result is the f32 value rounded once:
// checked bit for bit against the scalar conversions of core/half.h, on
// tensors long enough to be split across threads, with the values rounding
// treats specially (ties, the largest finite, infinities, NaNs, subnormals).
TEST_CASE("bf16 elementwise results are the f32 results rounded once, bit for bit") {
  const int64_t n = 3 * 65536 + 77;
  std::vector<uint16_t> ab(n), bb(n);
  std::vector<float> bf(n);
  uint32_t st = 12345;
  auto next = [&] { return st = st * 1664525u + 1013904223u; };
  const uint16_t special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x0001, 0x807f,
                              0x7f7f, 0xff7f, 0x3f80, 0x3f81, 0x4000, 0xc000};
  for (int64_t i = 0; i < n; ++i) {
    ab[i] = i % 97 < 14 ? special[i % 97] : static_cast<uint16_t>(next() >> 16);
    bb[i] = i % 89 < 14 ? special[(i + 3) % 14] : static_cast<uint16_t>(next() >> 16);
    bf[i] = bf16_to_float(static_cast<uint16_t>(next() >> 16));
  }
  const Tensor a = from_blob_copy(ab.data(), {n}, kBFloat16, TensorOptions(kBFloat16));
  const Tensor b = from_blob_copy(bb.data(), {n}, kBFloat16, TensorOptions(kBFloat16));
  const Tensor f = from_blob_copy(bf.data(), {n}, kFloat32);
  auto same = [](float got, float want) { return std::isnan(want) ? std::isnan(got) : got == want; };
  auto check_bf16 = [&](const Tensor& t, auto op, const char* what) {
    INFO(std::string(what));
    REQUIRE(t.dtype() == kBFloat16);
    const auto* out = static_cast<const uint16_t*>(t.contiguous().data_ptr());
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = bf16_to_float(float_to_bf16(op(bf16_to_float(ab[i]), bf16_to_float(bb[i]))));
      if (!same(bf16_to_float(out[i]), want) || (!std::isnan(want) && out[i] != float_to_bf16(want))) {
        if (bad < 3) MESSAGE(i, ": ", ab[i], " ", bb[i], " -> ", out[i], ", want ", float_to_bf16(want));
        ++bad;
      }
    }
    CHECK(bad == 0);
  };
  check_bf16(a + b, [](float x, float y) { return x + y; }, "add");
  check_bf16(a - b, [](float x, float y) { return x - y; }, "sub");
  check_bf16(a * b, [](float x, float y) { return x * y; }, "mul");
  check_bf16(a / b, [](float x, float y) { return x / y; }, "div");
  // bf16 with f32: an f32 result, not rounded.
  const Tensor m = a + f;
  REQUIRE(m.dtype() == kFloat32);
  const auto* mo = static_cast<const float*>(m.contiguous().data_ptr());
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!same(mo[i], bf16_to_float(ab[i]) + bf[i])) ++bad;
  CHECK(bad == 0);
}

// ---- in-place ops ----------------------------------------------------------------

TEST_CASE("in-place ops: values, broadcasting, return self, version bump") {
  Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  uint32_t v = x.version();
  auto bumped = [&] {
    bool ok = x.version() == v + 1;
    v = x.version();
    return ok;
  };
  Tensor& r = x.add_(make1({10, 20, 30}));
  CHECK(&r == &x);
  check_vals(x, {11, 22, 33, 14, 25, 36});
  CHECK(bumped());
  x.add_(make1({1, 1, 1}), -2.0);
  check_vals(x, {9, 20, 31, 12, 23, 34});
  CHECK(bumped());
  x.sub_(make({1, 2}, {2, 1}));
  check_vals(x, {8, 19, 30, 10, 21, 32});
  CHECK(bumped());
  x.sub_(make1({1, 1, 1}), 0.5);
  check_vals(x, {7.5, 18.5, 29.5, 9.5, 20.5, 31.5});
  CHECK(bumped());
  x.add_(0.5);
  check_vals(x, {8, 19, 30, 10, 21, 32});
  CHECK(bumped());
  x.mul_(make1({0.5, 2, 0}));
  check_vals(x, {4, 38, 0, 5, 42, 0});
  CHECK(bumped());
  x.mul_(2);
  check_vals(x, {8, 76, 0, 10, 84, 0});
  CHECK(bumped());
  x.div_(make1({4, 4, 1}));
  check_vals(x, {2, 19, 0, 2.5, 21, 0});
  CHECK(bumped());
  x.div_(2);
  check_vals(x, {1, 9.5, 0, 1.25, 10.5, 0});
  CHECK(bumped());
  x.clamp_(1.1, 10);
  check_vals(x, {1.1, 9.5, 1.1, 1.25, 10, 1.1});
  CHECK(bumped());
  x.sub_(make1({5, 5, 5})).relu_();
  check_vals(x, {0, 4.5, 0, 0, 5, 0});
  CHECK(x.version() == v + 2);
  v = x.version();
  x.masked_fill_(make1({1, 0, 0}, kBool), -1);
  check_vals(x, {-1, 4.5, 0, -1, 5, 0});
  CHECK(bumped());
  x.fill_(3);
  check_vals(x, V(6, 3));
  CHECK(bumped());
  x.zero_();
  check_vals(x, V(6, 0));
  CHECK(bumped());
  // Through a view: the base sees the write and the shared counter moves.
  Tensor col = x.select(1, 2);
  col.add_(make1({1, 2}));
  check_vals(x, {0, 0, 1, 0, 0, 2});
  CHECK(bumped());
  // The other operand may alias self: x.add_(x.t()) must read x's old values
  // (x[1][0] gets 3 + old x[0][1] = 5, not 3 + the freshly written 5).
  Tensor sq = make({1, 2, 3, 4}, {2, 2});
  sq.add_(sq.t());
  check_vals(sq, {2, 5, 5, 8});
  Tensor sq2 = make({1, 2, 3, 4}, {2, 2});
  sq2.mul_(sq2);  // same geometry: each element read before it is written
  check_vals(sq2, {1, 4, 9, 16});
  Tensor row = make1({1, 2, 3, 4});
  row.slice(0, 1, 4).sub_(row.slice(0, 0, 3));  // shifted overlap: [1, 2-1, 3-2, 4-3]
  check_vals(row, {1, 1, 1, 1});
  // The other operand must broadcast to self, not enlarge it.
  CHECK_THROWS_AS(make1({1, 2, 3}).add_(make({1, 2, 3, 4, 5, 6}, {2, 3})), ShapeError);
  CHECK_THROWS_AS(make1({1, 2, 3}).mul_(make1({1, 2})), ShapeError);
  // Integer self keeps its dtype.
  Tensor i = make1({5, 7}, kInt64);
  i.add_(make1({1, 1}, kInt64));
  CHECK(i.dtype() == kInt64);
  CHECK(vals(i) == V{6, 8});
  i.mul_(3);
  CHECK(vals(i) == V{18, 24});
}

TEST_CASE("copy_: broadcast, dtype conversion, devices, views") {
  Tensor dst = zeros({2, 3});
  uint32_t v = dst.version();
  dst.copy_(make1({1, 2, 3}, kInt64));
  check_vals(dst, {1, 2, 3, 1, 2, 3});
  CHECK(dst.dtype() == kFloat32);
  CHECK(dst.version() == v + 1);
  dst.copy_(make({7, 8}, {2, 1}, kFloat64));
  check_vals(dst, {7, 7, 7, 8, 8, 8});
  dst.copy_(scalar_tensor(0.5));
  check_vals(dst, V(6, 0.5));
  Tensor idst = zeros({3}, kInt32);
  idst.copy_(make1({1.9, -1.9, 2.5}));
  CHECK(vals(idst) == V{1, -1, 2});
  Tensor hdst = zeros({1}, kFloat16);
  hdst.copy_(make1({0.1}, kFloat64));
  CHECK(vals(hdst)[0] == 0.0999755859375);
  // From another (virtual) device.
  Tensor src1 = make1({4, 5, 6}).to("cpu:1");
  Tensor d0 = zeros({2, 3});
  d0.copy_(src1);
  check_vals(d0, {4, 5, 6, 4, 5, 6});
  CHECK(d0.device() == kCPU);
  Tensor d1 = zeros({3}, Device("cpu:1"));
  d1.copy_(make1({1, 2, 3}));
  CHECK(d1.device() == Device("cpu:1"));
  check_vals(d1, {1, 2, 3});
  // Into a transposed view, from a transposed view.
  Tensor base = zeros({2, 3});
  base.t().copy_(make({1, 2, 3, 4, 5, 6}, {3, 2}));
  check_vals(base, {1, 3, 5, 2, 4, 6});
  Tensor base2 = zeros({3, 2});
  base2.copy_(base.t());
  check_vals(base2, {1, 2, 3, 4, 5, 6});
  std::string m = error_of([] { zeros({3}).copy_(zeros({2, 3})); });
  CHECK(contains(m, "copy_"));
  CHECK(contains(m, "[2, 3]"));
  CHECK_THROWS_AS(zeros({3}).copy_(zeros({4})), ShapeError);
}

TEST_CASE("in-place on a leaf requiring grad: AutogradError naming the op; fine under NoGradGuard") {
  Tensor w = leaf({1, 2}, {2});
  for (auto [op, f] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"add_", [&] { w.add_(1.0); }},
           {"mul_",
            [&] {
              w.mul_(make1({1, 2}));
            }},
           {"div_", [&] { w.div_(2.0); }},
           {"sub_",
            [&] {
              w.sub_(make1({1, 2}));
            }},
           {"fill_", [&] { w.fill_(0); }},
           {"fill_", [&] { w.zero_(); }},
           {"clamp_", [&] { w.clamp_(0, 1); }},
           {"relu_", [&] { w.relu_(); }},
           {"masked_fill_",
            [&] {
              w.masked_fill_(make1({1, 0}, kBool), 0);
            }},
           {"copy_",
            [&] {
              w.copy_(make1({5, 6}));
            }},
       }) {
    std::string m = error_of(f);
    INFO(m);
    CHECK(contains(m, op));
    CHECK(contains(m, "leaf"));
    CHECK_THROWS_AS(f(), AutogradError);
  }
  check_vals(w, {1, 2});  // untouched
  {
    autograd::NoGradGuard ng;
    uint32_t v = w.version();
    w.sub_(make1({0.5, 0.5}));
    CHECK(w.version() == v + 1);
  }
  check_vals(w, {0.5, 1.5});
  CHECK(w.is_leaf());
  CHECK(w.requires_grad());
}

TEST_CASE("in-place on non-leaf tensors keeps the gradient right") {
  SUBCASE("add_ then mul_ by scalar") {
    Tensor x = leaf({1, 2, 3}, {3});
    Tensor y = x * 2.0;
    y.add_(1.0);
    y.mul_(3.0);  // y = 3(2x + 1)
    check_vals(y, {9, 15, 21});
    CHECK_FALSE(y.is_leaf());
    (y * y).sum().backward();  // dL/dx = 2 y * 6
    check_vals(x.grad(), {108, 180, 252});
  }
  SUBCASE("mul_ by a tensor that requires grad") {
    Tensor x = leaf({1, 2, 3}, {3}), w = leaf({4, 5, 6}, {3});
    Tensor y = x * 2.0;
    y.mul_(w);  // y = 2 x w
    check_vals(y, {8, 20, 36});
    y.sum().backward();
    check_vals(x.grad(), {8, 10, 12});
    check_vals(w.grad(), {2, 4, 6});
  }
  SUBCASE("div_ and sub_ with tensors requiring grad") {
    Tensor x = leaf({2, 4}, {2}), w = leaf({1, 2}, {2});
    Tensor y = x + 0.0;
    y.div_(w);       // x / w
    y.sub_(w, 3.0);  // x / w - 3 w
    check_vals(y, {-1, -4});
    y.sum().backward();
    check_vals(x.grad(), {1, 0.5});          // 1 / w
    check_vals(w.grad(), {-2 - 3, -1 - 3});  // -x / w^2 - 3
  }
  SUBCASE("clamp_") {
    Tensor x = leaf({-2, 0.5, 3}, {3});
    Tensor y = x * 1.0;
    y.clamp_(-1, 1);
    check_vals(y, {-1, 0.5, 1});
    (y * make1({1, 2, 3})).sum().backward();
    check_vals(x.grad(), {0, 2, 0});
  }
  SUBCASE("relu_") {
    Tensor x = leaf({-2, 0.5, 3}, {3});
    Tensor y = x * 2.0;
    y.relu_();
    (y * make1({1, 2, 3})).sum().backward();
    check_vals(x.grad(), {0, 4, 6});
  }
  SUBCASE("masked_fill_") {
    Tensor x = leaf({1, 2, 3}, {3});
    Tensor y = x * 2.0;
    y.masked_fill_(make1({0, 1, 0}, kBool), 100);
    check_vals(y, {2, 100, 6});
    (y * make1({1, 2, 3})).sum().backward();
    check_vals(x.grad(), {2, 0, 6});
  }
  SUBCASE("fill_ and copy_ cut the old value's gradient") {
    Tensor x = leaf({1, 2}, {2}), s = leaf({5, 6}, {2});
    Tensor y = x * 3.0;
    y.copy_(s);
    check_vals(y, {5, 6});
    (y * make1({2, 7})).sum().backward();
    check_vals(s.grad(), {2, 7});
    check_vals(x.grad(), {0, 0});
    Tensor z = x * 3.0;
    z.fill_(4);
    check_vals(z, {4, 4});
    (z * x).sum().backward();  // d/dx (4 x) = 4, accumulated onto the 0 above
    check_vals(x.grad(), {4, 4});
  }
  SUBCASE("fill_/copy_ over non-finite values still give exact values") {
    Tensor x = leaf({0, 1}, {2}), s = leaf({5, 6}, {2});
    Tensor y = log(x);  // [-inf, 0]
    y.copy_(s);
    check_vals(y, {5, 6});
    Tensor z = log(x);
    z.fill_(2);
    check_vals(z, {2, 2});
    (y + z).sum().backward();
    check_vals(s.grad(), {1, 1});
  }
  SUBCASE("in-place into a buffer that does not require grad") {
    Tensor w = leaf({1, 2}, {2});
    Tensor buf = zeros({2});
    buf.add_(w, 3.0);
    CHECK(buf.requires_grad());
    CHECK_FALSE(buf.is_leaf());
    (buf * buf).sum().backward();  // buf = 3 w: d/dw = 18 w
    check_vals(w.grad(), {18, 36});
  }
  SUBCASE("modifying a tensor saved for backward is an error, not a wrong gradient") {
    Tensor x = leaf({1, 2}, {2});
    Tensor y = x * 2.0;
    Tensor z = y * y;  // saves y
    y.add_(1.0);
    CHECK_THROWS_AS(z.sum().backward(), AutogradError);
  }
}

// ---- gradients ------------------------------------------------------------------

TEST_CASE("gradcheck: binary ops with broadcasting") {
  Tensor a = rnd({2, 1, 3}, 1), b = rnd({4, 1}, 2);
  check_grad([](const std::vector<Tensor>& x) { return add(x[0], x[1]); }, {a, b});
  check_grad([](const std::vector<Tensor>& x) { return add(x[0], x[1], -2.5); }, {a, b});
  check_grad([](const std::vector<Tensor>& x) { return sub(x[0], x[1]); }, {a, b});
  check_grad([](const std::vector<Tensor>& x) { return sub(x[0], x[1], 0.5); }, {a, b});
  check_grad([](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }, {a, b});
  // Denominator away from 0.
  Tensor den = make({1.5, -2, 0.8, 3}, {4, 1}, kFloat64);
  check_grad([](const std::vector<Tensor>& x) { return div(x[0], x[1]); }, {a, den});
  // pow(tensor, tensor): base > 0.
  Tensor base = make({0.5, 1.2, 2, 0.7, 1.5, 3}, {2, 1, 3}, kFloat64);
  check_grad([](const std::vector<Tensor>& x) { return pow(x[0], x[1]); }, {base, b});
  // maximum/minimum: no ties (values differ by far more than eps).
  Tensor m1 = make({0.1, -1, 2, 0.5, 3, -2}, {2, 1, 3}, kFloat64);
  Tensor m2 = make({0.3, -0.5, 1, 2.5}, {4, 1}, kFloat64);
  check_grad([](const std::vector<Tensor>& x) { return maximum(x[0], x[1]); }, {m1, m2});
  check_grad([](const std::vector<Tensor>& x) { return minimum(x[0], x[1]); }, {m1, m2});
  // Same shapes, both sides, and an input used twice.
  Tensor c = rnd({3, 2}, 3);
  check_grad([](const std::vector<Tensor>& x) { return mul(x[0], x[0]) + x[0]; }, {c});
  check_grad([](const std::vector<Tensor>& x) { return div(x[1], x[0] * x[0] + 1.0); }, {c, rnd({3, 2}, 4)});
}

TEST_CASE("gradcheck: unary ops") {
  Tensor x = make({-2.1, -0.7, -0.2, 0.3, 0.9, 1.8}, {2, 3}, kFloat64);  // no zeros: relu/abs kinks avoided
  Tensor pos = make({0.3, 0.9, 1.7, 2.5, 4, 0.6}, {2, 3}, kFloat64);
  check_grad([](const std::vector<Tensor>& v) { return neg(v[0]); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return -v[0]; }, {x});
  check_grad([](const std::vector<Tensor>& v) { return exp(v[0]); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return log(v[0]); }, {pos});
  check_grad([](const std::vector<Tensor>& v) { return sqrt(v[0]); }, {pos});
  check_grad([](const std::vector<Tensor>& v) { return rsqrt(v[0]); }, {pos});
  check_grad([](const std::vector<Tensor>& v) { return abs(v[0]); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return tanh(v[0]); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return sigmoid(v[0]); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return relu(v[0]); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return gelu(v[0]); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return gelu(v[0], GeluApprox::tanh); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return silu(v[0]); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return square(v[0]); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return pow(v[0], 3.0); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return pow(v[0], 2.0); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return pow(v[0], 1.0); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return pow(v[0], 0.5); }, {pos});
  check_grad([](const std::vector<Tensor>& v) { return pow(v[0], -1.5); }, {pos});
  // clamp: no element within eps of lo or hi.
  check_grad([](const std::vector<Tensor>& v) { return clamp(v[0], -1, 1); }, {x});
  check_grad([](const std::vector<Tensor>& v) { return clamp(v[0], -5, 0.5); }, {x});
  // Method forms.
  check_grad([](const std::vector<Tensor>& v) { return v[0].pow(3).exp().tanh(); }, {x});
}

TEST_CASE("gradcheck: scalar operators") {
  Tensor x = make({-2.1, -0.7, 0.3, 0.9}, {4}, kFloat64);
  check_grad([](const std::vector<Tensor>& v) { return v[0] + 2.0; }, {x});
  check_grad([](const std::vector<Tensor>& v) { return 2.0 + v[0]; }, {x});
  check_grad([](const std::vector<Tensor>& v) { return v[0] - 2.0; }, {x});
  check_grad([](const std::vector<Tensor>& v) { return 2.0 - v[0]; }, {x});
  check_grad([](const std::vector<Tensor>& v) { return v[0] * -3.0; }, {x});
  check_grad([](const std::vector<Tensor>& v) { return 3.0 * v[0]; }, {x});
  check_grad([](const std::vector<Tensor>& v) { return v[0] / 4.0; }, {x});
  check_grad([](const std::vector<Tensor>& v) { return 2.0 / v[0]; }, {x});
}

TEST_CASE("gradcheck: where and masked_fill") {
  Tensor cond = make({1, 0, 0, 1, 1, 0}, {2, 1, 3}, kBool);
  Tensor a = rnd({2, 4, 3}, 5), b = rnd({4, 1}, 6);
  check_grad([cond](const std::vector<Tensor>& x) { return where(cond, x[0], x[1]); }, {a, b});
  Tensor mask = make({0, 1, 1, 0}, {4, 1}, kBool);
  check_grad([mask](const std::vector<Tensor>& x) { return masked_fill(x[0], mask, 3.0); }, {a});
  // Gradient values by hand.
  Tensor x = leaf({1, 2, 3}, {3}), y = leaf({4, 5, 6}, {3});
  (where(make1({1, 0, 1}, kBool), x, y) * make1({1, 2, 3})).sum().backward();
  check_vals(x.grad(), {1, 0, 3});
  check_vals(y.grad(), {0, 2, 0});
}

TEST_CASE("gradient values by hand: broadcasting sums back down") {
  Tensor a = leaf({1, 2, 3}, {1, 3}), b = leaf({10, 20}, {2, 1});
  (a * b).sum().backward();
  check_vals(a.grad(), {30, 30, 30});  // sum of b over the broadcast rows
  check_vals(b.grad(), {6, 6});        // sum of a over columns
  Tensor m = leaf({1, 5}, {2}), n = leaf({3, 2}, {2});
  (maximum(m, n) * make1({10, 100})).sum().backward();
  check_vals(m.grad(), {0, 100});
  check_vals(n.grad(), {10, 0});
  // Ties split the gradient evenly.
  Tensor p = leaf({2}, {1}), q = leaf({2}, {1});
  minimum(p, q).sum().backward();
  check_vals(p.grad(), {0.5});
  check_vals(q.grad(), {0.5});
  // Integer operand: gradient flows only to the float one.
  Tensor f = leaf({1.5, 2.5}, {2});
  (f * make1({3, 4}, kInt64)).sum().backward();
  check_vals(f.grad(), {3, 4});
  CHECK(f.grad().dtype() == kFloat32);
}

// ---- errors ----------------------------------------------------------------------

TEST_CASE("errors: broadcast mismatch names the op and the shapes") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  for (auto [op, f] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"add", [&] { add(a, b); }},
           {"sub", [&] { a - b; }},
           {"mul", [&] { mul(a, b); }},
           {"div", [&] { a / b; }},
           {"pow", [&] { pow(a, b); }},
           {"maximum", [&] { maximum(a, b); }},
           {"minimum", [&] { minimum(a, b); }},
           {"eq", [&] { eq(a, b); }},
           {"lt", [&] { a < b; }},
       }) {
    std::string m = error_of(f);
    INFO(m);
    CHECK(contains(m, op));
    CHECK(contains(m, "[2, 3]"));
    CHECK(contains(m, "[4]"));
    CHECK_THROWS_AS(f(), ShapeError);
  }
}

TEST_CASE("errors: device mismatch is a DeviceError naming both devices") {
  Tensor a = ones({2}), b = ones({2}, Device("cpu:1"));
  std::string m = error_of([&] { a + b; });
  INFO(m);
  CHECK(contains(m, "cpu:0"));
  CHECK(contains(m, "cpu:1"));
  CHECK(contains(m, "add"));
  CHECK_THROWS_AS(a + b, DeviceError);
  CHECK_THROWS_AS(mul(b, a), DeviceError);
  CHECK_THROWS_AS(a < b, DeviceError);
  CHECK_THROWS_AS(where(ones({2}, TensorOptions(kBool, Device("cpu:1"))), a, a), DeviceError);
  CHECK_THROWS_AS(where(ones({2}, kBool), a, b), DeviceError);
  // Same virtual device works.
  check_vals(b + b, {2, 2});
  CHECK((b + b).device() == Device("cpu:1"));
  CHECK(exp(b).device() == Device("cpu:1"));
}

TEST_CASE("errors: arithmetic on bool tensors is a DTypeError") {
  Tensor t = make1({1, 0}, kBool);
  for (auto [op, f] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"add", [&] { t + t; }},
           {"mul", [&] { mul(t, t); }},
           {"sub", [&] { sub(t, t); }},
           {"neg", [&] { neg(t); }},
           {"exp", [&] { exp(t); }},
           {"abs", [&] { abs(t); }},
       }) {
    std::string m = error_of(f);
    INFO(m);
    CHECK(contains(m, op));
    CHECK(contains(m, "bool"));
    CHECK_THROWS_AS(f(), DTypeError);
  }
  // Comparisons and where on bool are fine.
  CHECK((t == t).to_vector<bool>() == std::vector<bool>{true, true});
}

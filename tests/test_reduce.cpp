// SPDX-License-Identifier: MIT
// Reductions: sum, mean, amax/amin, max/min (with indices), argmax/argmin,
// prod, var, logsumexp, sum_to -- values, dtypes, layouts, errors, gradients.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
using snug::testing::check_vals;
using snug::testing::make;
using snug::testing::randn_f64;
using snug::testing::vals;

namespace {

// 0..n-1 in shape s.
Tensor iota(const Shape& s, DType dt = kFloat32) {
  std::vector<double> v(numel_of(s));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return make(v, s, dt);
}

}  // namespace

TEST_CASE("sum: all, dims, keepdim, negative dims") {
  Tensor x = iota({2, 3});  // [[0,1,2],[3,4,5]]
  Tensor s = x.sum();
  CHECK(s.dim() == 0);
  CHECK(s.item() == 15);
  check_vals(x.sum({0}), {3, 5, 7});
  check_vals(x.sum({1}), {3, 12});
  check_vals(x.sum({-1}), {3, 12});
  Tensor k = x.sum({1}, true);
  CHECK(k.shape() == Shape{2, 1});
  check_vals(k, {3, 12});
  CHECK(x.sum({0, 1}).item() == 15);
  CHECK(x.sum({-1, 0}, true).shape() == Shape{1, 1});
  // 3-D, middle dim and outer+inner dims.
  Tensor y = iota({2, 3, 4});
  check_vals(y.sum({1}), {12, 15, 18, 21, 48, 51, 54, 57});
  check_vals(y.sum({0, 2}), {60, 92, 124});
  CHECK(y.sum({0, 2}, true).shape() == Shape{1, 3, 1});
}

TEST_CASE("sum: non-contiguous and broadcast inputs") {
  Tensor y = iota({2, 3, 4});
  Tensor p = y.permute({2, 0, 1});  // (4, 2, 3), p[k][i][j] = y[i][j][k]
  check_vals(p.sum({0}), {6, 22, 38, 54, 70, 86});
  check_vals(p.sum({2}), {12, 48, 15, 51, 18, 54, 21, 57});
  check_vals(p.sum({1, 2}), {60, 66, 72, 78});
  CHECK(p.sum().item() == 276);
  Tensor sl = iota({4, 6}).slice(1, 0, 6, 2);  // columns 0, 2, 4
  check_vals(sl.sum({1}), {6, 24, 42, 60});
  check_vals(sl.sum({0}), {36, 44, 52});
  Tensor e = make({1, 2, 3}, {3, 1}).expand({3, 4});  // stride 0 along dim 1
  check_vals(e.sum({1}), {4, 8, 12});
  check_vals(e.sum({0}), {6, 6, 6, 6});
  CHECK(e.sum().item() == 24);
}

TEST_CASE("sum: zero-size and 0-d inputs") {
  Tensor z = zeros({0, 3});
  check_vals(z.sum({0}), {0, 0, 0});
  CHECK(z.sum({1}).shape() == Shape{0});
  CHECK(z.sum().item() == 0);
  Tensor s = scalar_tensor(2.5);
  CHECK(s.sum().item() == 2.5);
  CHECK(s.sum({0}).item() == 2.5);
  CHECK(s.mean({-1}).item() == 2.5);
  CHECK(std::isnan(z.mean().item()));
}

TEST_CASE("sum: dtypes -- integers widen to i64, halves accumulate in f32") {
  Tensor i = make({100, 100, 100}, {3}, kInt8);
  Tensor si = i.sum();
  CHECK(si.dtype() == kInt64);
  CHECK(si.item() == 300);
  Tensor b = make({1, 0, 1, 1}, {4}, kBool);
  CHECK(b.sum().dtype() == kInt64);
  CHECK(b.sum().item() == 3);
  Tensor i32 = make({-5, 7, 9, -1}, {2, 2}, kInt32);
  check_vals(i32.sum({0}), {4, 6});
  CHECK(raw::reduce(ReduceOp::prod, i32, {}, false).item() == 315);
  CHECK(raw::reduce(ReduceOp::prod, i32, {}, false).dtype() == kInt64);
  // 4096 halves of 1: an f16 running sum would stop at 2048.
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor h = ones({4096}, TensorOptions(dt));
    Tensor sh = h.sum();
    CHECK(sh.dtype() == dt);
    CHECK(sh.item() == 4096);
    check_vals(make({1.5, 2.5, -1, 4}, {2, 2}, dt).sum({1}), {4, 3});
    check_vals(make({1.5, 2.5, -1, 4}, {2, 2}, dt).mean({0}), {0.25, 3.25});
  }
  Tensor d = make({1e17, 1, -1e17}, {3}, kFloat64);
  CHECK(d.sum().dtype() == kFloat64);
}

TEST_CASE("sum and prod of int64 wrap around on overflow, as in PyTorch (no undefined behaviour)") {
  // Found by the safetensors fuzzer: a file's random int64 tensor summed overflowed (UBSan).
  const int64_t big = std::numeric_limits<int64_t>::max();
  Tensor x = from_vector<int64_t>({big, 1, 2}, {3}, TensorOptions(kInt64));
  CHECK(x.sum().data<int64_t>()[0] == std::numeric_limits<int64_t>::min() + 2);  // 2^63 - 1 + 3 wraps
  Tensor y = from_vector<int64_t>({int64_t(1) << 62, 4}, {2}, TensorOptions(kInt64));
  CHECK(raw::reduce(ReduceOp::prod, y, {}, false).data<int64_t>()[0] == 0);  // 2^64 wraps to 0
  Tensor z = from_vector<int64_t>({-big, -big, -big}, {3}, TensorOptions(kInt64));
  CHECK(z.sum().data<int64_t>()[0] == int64_t(uint64_t(-big) * 3));
}

TEST_CASE("sum: f32 accuracy and fast paths agree with an f64 reference") {
  Generator g(7);
  Tensor x = rand({2048, 512}, {}, &g);
  Tensor xd = x.to(kFloat64);
  // Row sums (last dim, contiguous) and column sums (dim 0, bias gradients).
  auto rows = vals(x.sum({1})), rows_ref = vals(xd.sum({1}));
  for (size_t i = 0; i < rows.size(); ++i) REQUIRE(rows[i] == doctest::Approx(rows_ref[i]).epsilon(1e-7));
  Tensor c = rand({2048, 384}, {}, &g);
  auto cols = vals(c.sum({0})), cols_ref = vals(c.to(kFloat64).sum({0}));
  for (size_t i = 0; i < cols.size(); ++i) REQUIRE(cols[i] == doctest::Approx(cols_ref[i]).epsilon(1e-7));
  // A long full sum: 2^22 copies of 0.1f, exact to f32 rounding of the true sum.
  Tensor tenth = full({1 << 22}, 0.1);
  double want = static_cast<float>(static_cast<double>(0.1f) * (1 << 22));
  CHECK(tenth.sum().item() == want);
  CHECK(tenth.mean().item() == doctest::Approx(0.1).epsilon(1e-7));
}

TEST_CASE("reductions give the same bits for any number of threads") {
  SNUG_SKIP_IF_ONE_THREAD();
  Generator g(3);
  Tensor x = randn({1 << 20}, {}, &g);
  Tensor m = randn({2048, 384}, {}, &g);
  int before = get_num_threads();
  set_num_threads(1);
  double a1 = x.sum().item();
  auto c1 = vals(m.sum({0}));
  auto r1 = vals(m.sum({1}));
  set_num_threads(2);
  double a2 = x.sum().item();
  auto c2 = vals(m.sum({0}));
  auto r2 = vals(m.sum({1}));
  set_num_threads(before);
  CHECK(a1 == a2);
  CHECK(c1 == c2);
  CHECK(r1 == r2);
}

TEST_CASE("mean") {
  Tensor x = iota({2, 3});
  CHECK(x.mean().item() == 2.5);
  check_vals(x.mean({0}), {1.5, 2.5, 3.5});
  check_vals(x.mean({-1}, true), {1, 4});
  CHECK(x.mean({-1}, true).shape() == Shape{2, 1});
  check_vals(x.t().mean({0}), {1, 4});
  CHECK(iota({2, 3}, kFloat64).mean().dtype() == kFloat64);
}

TEST_CASE("amax / amin / max / min / argmax / argmin values") {
  Tensor x = make({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
  check_vals(amax(x), {9});
  check_vals(amin(x), {1});
  check_vals(amax(x, {1}), {4, 9});
  check_vals(amin(x, {0}), {3, 1, 2, 1});
  check_vals(amax(x, {-2}, true), {5, 9, 4, 6});
  CHECK(amax(x, {-2}, true).shape() == Shape{1, 4});
  check_vals(max(x), {9});
  check_vals(min(x), {1});
  auto [v, i] = max(x, 1);
  check_vals(v, {4, 9});
  CHECK(i.dtype() == kInt64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  auto [v0, i0] = min(x, 0, true);
  CHECK(v0.shape() == Shape{1, 4});
  check_vals(v0, {3, 1, 2, 1});
  CHECK(i0.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 0});
  // Ties: the first index.
  CHECK(argmax(make({1, 1, 4, 1}, {4}), 0).to_vector<int64_t>() == std::vector<int64_t>{2});
  CHECK(argmin(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(x.argmax(0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 1});
  CHECK(x.argmax(-1, true).shape() == Shape{2, 1});
  // Non-contiguous: along dim 0 of the transpose = along dim 1 of x.
  CHECK(x.t().argmax(0).to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  check_vals(amax(x.t(), {0}), {4, 9});
  CHECK(argmax(scalar_tensor(3.0), 0).item() == 0);
}

TEST_CASE("max / min on integers, bool and halves") {
  // Integer accumulators cannot start at -inf / +inf.
  Tensor i = make({-7, -3, -9, 5, 12, -100}, {2, 3}, kInt32);
  check_vals(amax(i, {1}), {-3, 12});
  check_vals(amin(i, {1}), {-9, -100});
  CHECK(amax(i).dtype() == kInt32);
  Tensor big = make({-9e18, -8e18}, {2}, kInt64);
  CHECK(amax(big).to_vector<int64_t>()[0] == static_cast<int64_t>(-8e18));
  Tensor u = make({200, 3, 255}, {3}, kUInt8);
  CHECK(amax(u).item() == 255);
  CHECK(amin(u).item() == 3);
  CHECK(argmax(u, 0).item() == 2);
  Tensor b = make({0, 1, 0}, {3}, kBool);
  CHECK(amax(b).item() == 1);
  CHECK(amin(b).item() == 0);
  CHECK(argmax(b, 0).item() == 1);
  for (DType dt : {kFloat16, kBFloat16, kFloat64}) {
    Tensor h = make({0.5, -2, 3, 1}, {2, 2}, dt);
    check_vals(amax(h, {0}), {3, 1});
    CHECK(argmin(h, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  }
}

TEST_CASE("max / argmax propagate NaN") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = make({1, nan, 3, 2, 5, nan}, {2, 3});
  auto m = vals(amax(x, {1}));
  CHECK(std::isnan(m[0]));
  CHECK(std::isnan(m[1]));
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(argmin(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(std::isnan(amin(x).item()));
}

TEST_CASE("var and logsumexp values") {
  Tensor x = make({1, 2, 3, 4, 6, 8}, {2, 3});
  check_vals(var(x, {1}), {1, 4});
  check_vals(var(x, {1}, 0), {2.0 / 3, 8.0 / 3});
  check_vals(var(x, {-1}, 1, true), {1, 4});
  CHECK(var(x, {-1}, 1, true).shape() == Shape{2, 1});
  check_vals(var(x), {34.0 / 5});  // mean 4, squared deviations 9 4 1 0 4 16
  check_vals(var(x, {0}), {4.5, 8, 12.5});
  Tensor l = make({0, std::log(3.0), 1000, 1000}, {2, 2});
  check_vals(logsumexp(l, {1}), {std::log(4.0), 1000 + std::log(2.0)});
  check_vals(logsumexp(l, {0}, true), {1000, 1000});
  CHECK(logsumexp(l, {0}, true).shape() == Shape{1, 2});
  const double inf = std::numeric_limits<double>::infinity();
  Tensor ninf = make({-inf, -inf, 0, -inf}, {2, 2});
  check_vals(logsumexp(ninf, {1}), {-inf, 0});
  check_vals(logsumexp(make({1, 2, 3}, {3}), {}), {std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0))});
}

TEST_CASE("sum_to undoes broadcasting") {
  Tensor g = iota({2, 3, 4});
  Tensor a = raw::sum_to(g, {3, 1});
  CHECK(a.shape() == Shape{3, 1});
  check_vals(a, {60, 92, 124});
  check_vals(raw::sum_to(g, {4}), {60, 66, 72, 78});
  check_vals(raw::sum_to(g, {}), {276});
  check_vals(raw::sum_to(g, {2, 1, 1}), {66, 210});
  CHECK(raw::sum_to(g, {2, 3, 4}).is_same(g));
  CHECK(raw::sum_to(g.permute({2, 1, 0}), {4, 1, 1}).shape() == Shape{4, 1, 1});
  check_vals(raw::sum_to(g.permute({2, 1, 0}), {4, 1, 1}), {60, 66, 72, 78});
}

TEST_CASE("reduction errors name the op and the problem") {
  Tensor x = iota({2, 3});
  CHECK_THROWS_WITH_AS(x.sum({2}), doctest::Contains("sum: dim 2 is out of range for a tensor with 2 dims"),
                       IndexError);
  CHECK_THROWS_WITH_AS(x.sum({1, -1}), doctest::Contains("sum: dim -1 appears more than once in dims [1, -1]"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(iota({2}, kInt32).mean(),
                       doctest::Contains("mean: expected a floating dtype (f32, f16, bf16, f64), got i32"), DTypeError);
  CHECK_THROWS_WITH_AS(amax(zeros({2, 0}), {1}),
                       doctest::Contains("max: cannot reduce over dim 1 of shape [2, 0], which has size 0"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(max(zeros({0})), doctest::Contains("max: cannot reduce over dim 0 of shape [0]"), ShapeError);
  CHECK_THROWS_WITH_AS(argmax(zeros({3, 0}), 1), doctest::Contains("argmax: dim 1 of shape [3, 0] has size 0"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(argmin(x, -3), doctest::Contains("argmin: dim -3 is out of range"), IndexError);
  CHECK_THROWS_WITH_AS(max(x, 2), doctest::Contains("max: dim 2 is out of range"), IndexError);
  CHECK_THROWS_WITH_AS(var(iota({3}, kInt64)), doctest::Contains("var: expected a floating dtype"), DTypeError);
  CHECK_THROWS_WITH_AS(logsumexp(iota({3}, kInt64), {0}), doctest::Contains("logsumexp: expected a floating dtype"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(raw::reduce(ReduceOp::prod, make({1, 0}, {2}, kBool), {}, false),
                       doctest::Contains("prod: not defined for bool tensors"), DTypeError);
  CHECK_THROWS_WITH_AS(raw::sum_to(iota({2, 3}), {4}),
                       doctest::Contains("sum_to: shape [4] does not broadcast to the gradient's shape [2, 3] "
                                         "(dim 1: 4 vs 3)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(raw::sum_to(iota({3}), {2, 3}),
                       doctest::Contains("sum_to: cannot sum a gradient of shape [3] down to shape [2, 3]"),
                       ShapeError);
}

TEST_CASE("gradcheck: sum and mean") {
  Tensor x = randn_f64({3, 4, 2}, 1);
  check_grad([](const std::vector<Tensor>& a) { return sum(a[0]); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return a[0].sum({1}); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return a[0].sum({0, -1}, true); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return a[0].permute({2, 0, 1}).sum({1}); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return a[0].mean(); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return mean(a[0], {2}); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return a[0].mean({0, 2}, true); }, {x});
}

TEST_CASE("gradcheck: amax, amin, max, min (values and along a dim)") {
  Tensor x = randn_f64({3, 5}, 2);  // distinct values: no ties
  check_grad([](const std::vector<Tensor>& a) { return amax(a[0], {1}); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return amin(a[0], {0}, true); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return amax(a[0]); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return max(a[0]); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return min(a[0]); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return max(a[0], 1).values; }, {x});
  check_grad([](const std::vector<Tensor>& a) { return max(a[0], 0, true).values; }, {x});
  check_grad([](const std::vector<Tensor>& a) { return min(a[0].t(), -1).values; }, {x});
  check_grad([](const std::vector<Tensor>& a) { return min(a[0], 0, true).values; }, {x});
}

TEST_CASE("amax shares the gradient among ties; max(dim) sends it to the index") {
  Tensor x = make({1, 3, 3, 2}, {4}).requires_grad_();
  amax(x).backward();
  check_vals(x.grad(), {0, 0.5, 0.5, 0});
  Tensor y = make({1, 3, 3, 2}, {4}).requires_grad_();
  max(y, 0).values.backward();
  check_vals(y.grad(), {0, 1, 0, 0});
  Tensor z = make({4, 1, 2, 7}, {2, 2}).requires_grad_();
  min(z, 1).values.sum().backward();
  check_vals(z.grad(), {0, 1, 1, 0});
}

TEST_CASE("gradcheck: var and logsumexp") {
  Tensor x = randn_f64({3, 4}, 3);
  check_grad([](const std::vector<Tensor>& a) { return var(a[0]); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return var(a[0], {1}); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return var(a[0], {0}, 0, true); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return logsumexp(a[0], {1}); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return logsumexp(a[0], {0}, true); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return logsumexp(a[0].t(), {0, 1}); }, {x});
}

TEST_CASE("argmax and indices do not record history") {
  Tensor x = randn_f64({2, 3}, 4).requires_grad_();
  CHECK_FALSE(argmax(x, 1).requires_grad());
  CHECK_FALSE(max(x, 1).indices.requires_grad());
  CHECK(max(x, 1).values.requires_grad());
  autograd::NoGradGuard ng;
  CHECK_FALSE(x.sum().requires_grad());
}

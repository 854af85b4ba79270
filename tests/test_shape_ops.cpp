// SPDX-License-Identifier: MIT
// Shape ops: cat, stack, split (both forms), chunk -- values, dtypes,
// layouts, errors and gradients.
#include <doctest/doctest.h>

#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
using snug::testing::iota;
using snug::testing::make;
using snug::testing::randn_f64;
using snug::testing::vals;

namespace {

using V = std::vector<double>;

}  // namespace

TEST_CASE("cat along dim 0, dim 1 and a negative dim") {
  Tensor a = iota({2, 2}), b = iota({1, 2}, 10), c = iota({2, 3}, 20);
  Tensor r0 = cat({a, b}, 0);
  CHECK(r0.shape() == Shape{3, 2});
  CHECK(vals(r0) == V{0, 1, 2, 3, 10, 11});
  Tensor r1 = cat({a, c}, 1);
  CHECK(r1.shape() == Shape{2, 5});
  CHECK(vals(r1) == V{0, 1, 20, 21, 22, 2, 3, 23, 24, 25});
  CHECK(vals(cat({a, c}, -1)) == vals(r1));
  CHECK(vals(cat({a}, 0)) == vals(a));
  // An empty piece contributes nothing.
  CHECK(vals(cat({a, zeros({0, 2}), b})) == V{0, 1, 2, 3, 10, 11});
  // 3-D, middle dim.
  Tensor x = iota({2, 1, 2}), y = iota({2, 2, 2}, 100);
  CHECK(vals(cat({x, y}, 1)) == V{0, 1, 100, 101, 102, 103, 2, 3, 104, 105, 106, 107});
}

TEST_CASE("cat of non-contiguous inputs and mixed dtypes") {
  Tensor a = iota({2, 3});
  Tensor t = a.t();  // (3, 2): [[0,3],[1,4],[2,5]]
  CHECK(vals(cat({t, t}, 1)) == V{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5});
  Tensor s = iota({2, 6}).slice(1, 1, 6, 2);  // [[1,3,5],[7,9,11]]
  CHECK(vals(cat({s, a}, 0)) == V{1, 3, 5, 7, 9, 11, 0, 1, 2, 3, 4, 5});
  Tensor e = make({7}, {1, 1}).expand({2, 1});
  CHECK(vals(cat({e, a}, 1)) == V{7, 0, 1, 2, 7, 3, 4, 5});
  // Promotion, as for binary ops.
  Tensor i = iota({1, 3}, 0, kInt64);
  Tensor r = cat({i, a}, 0);
  CHECK(r.dtype() == kFloat32);
  CHECK(vals(r) == V{0, 1, 2, 0, 1, 2, 3, 4, 5});
  CHECK(cat({i, i}, 0).dtype() == kInt64);
  Tensor h = cat({iota({2}, 0, kFloat16), iota({2}, 2, kBFloat16)});
  CHECK(h.dtype() == kFloat32);
  CHECK(vals(h) == V{0, 1, 2, 3});
}

TEST_CASE("stack") {
  Tensor a = iota({2, 3}), b = iota({2, 3}, 10);
  Tensor s0 = stack({a, b});
  CHECK(s0.shape() == Shape{2, 2, 3});
  CHECK(vals(s0) == V{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  Tensor s2 = stack({a, b}, 2);
  CHECK(s2.shape() == Shape{2, 3, 2});
  CHECK(vals(s2) == V{0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15});
  CHECK(vals(stack({a, b}, -1)) == vals(s2));
  Tensor s1 = stack({a, b, a}, 1);
  CHECK(s1.shape() == Shape{2, 3, 3});
  // Scalars stack into a vector.
  Tensor v = stack({scalar_tensor(1.0), scalar_tensor(2.0)});
  CHECK(v.shape() == Shape{2});
  CHECK(vals(v) == V{1, 2});
}

TEST_CASE("split and chunk give views") {
  Tensor x = iota({5, 2});
  auto p = split(x, 2);
  REQUIRE(p.size() == 3);
  CHECK(p[0].shape() == Shape{2, 2});
  CHECK(p[2].shape() == Shape{1, 2});
  CHECK(vals(p[1]) == V{4, 5, 6, 7});
  CHECK(vals(p[2]) == V{8, 9});
  CHECK(p[1].storage() == x.storage());  // a view, not a copy
  auto q = split(x, {1, 0, 4}, 0);
  REQUIRE(q.size() == 3);
  CHECK(q[1].shape() == Shape{0, 2});
  CHECK(vals(q[2]) == V{2, 3, 4, 5, 6, 7, 8, 9});
  auto c = split(x, 1, -1);
  REQUIRE(c.size() == 2);
  CHECK(vals(c[1]) == V{1, 3, 5, 7, 9});
  auto ch = chunk(x, 2);
  REQUIRE(ch.size() == 2);
  CHECK(ch[0].shape() == Shape{3, 2});
  CHECK(ch[1].shape() == Shape{2, 2});
  // Six rows in four chunks of ceil(6/4) = 2: only three pieces, as in PyTorch.
  CHECK(chunk(iota({6}), 4).size() == 3);
  CHECK(chunk(iota({6}), 6).size() == 6);
  CHECK(chunk(iota({2, 6}), 3, 1)[2].shape() == Shape{2, 2});
  CHECK(split(iota({4}), 10).size() == 1);
}

TEST_CASE("shape op errors name the op and the problem") {
  Tensor a = iota({2, 3}), b = iota({2, 4});
  CHECK_THROWS_WITH_AS(cat({}, 0), doctest::Contains("cat: expected a non-empty list of tensors"), ValueError);
  CHECK_THROWS_WITH_AS(cat({a, b}, 0),
                       doctest::Contains("cat: tensor 1 has shape [2, 4] but tensor 0 has shape [2, 3] (expected equal "
                                         "sizes in every dim but dim 0; they differ in dim 1)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(cat({a, iota({6})}, 0),
                       doctest::Contains("cat: tensor 1 has shape [6] but tensor 0 has shape [2, 3] (expected the same "
                                         "number of dims)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(cat({a, a}, 2), doctest::Contains("cat: dim 2 is out of range for a tensor with 2 dims"),
                       IndexError);
  CHECK_THROWS_WITH_AS(cat({scalar_tensor(1.0)}, 0), doctest::Contains("cat: tensor 0 is 0-d"), ShapeError);
  CHECK_THROWS_WITH_AS(cat({a, Tensor()}, 0), doctest::Contains("cat: tensor 1 is undefined"), ValueError);
  CHECK_THROWS_WITH_AS(cat({a, zeros({2, 3}, "cpu:1")}, 0),
                       doctest::Contains("cat: tensor 1 is on cpu:1 but tensor 0 is on cpu:0"), DeviceError);
  CHECK_THROWS_WITH_AS(stack({}), doctest::Contains("stack: expected a non-empty list of tensors"), ValueError);
  CHECK_THROWS_WITH_AS(stack({a, b}),
                       doctest::Contains("stack: tensor 1 has shape [2, 4] but tensor 0 has shape [2, 3] (expected all "
                                         "shapes equal)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(stack({a, a}, 3), doctest::Contains("stack: dim 3 is out of range for a tensor with 3 dims"),
                       IndexError);
  CHECK_THROWS_WITH_AS(split(a, 0, 1),
                       doctest::Contains("split: split_size must be positive, got 0 (dim 1 has size 3)"), ValueError);
  CHECK_THROWS_WITH_AS(split(a, {1, 1}, 1),
                       doctest::Contains("split: sizes [1, 1] sum to 2 but dim 1 of shape [2, 3] has size 3"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(split(a, {4, -1}, 1), doctest::Contains("split: sizes must be non-negative, got [4, -1]"),
                       ValueError);
  CHECK_THROWS_WITH_AS(split(scalar_tensor(1.0), 1), doctest::Contains("split: x is 0-d"), ShapeError);
  CHECK_THROWS_WITH_AS(chunk(a, 0), doctest::Contains("chunk: chunks must be positive, got 0"), ValueError);
  CHECK_THROWS_WITH_AS(chunk(a, 2, 5), doctest::Contains("chunk: dim 5 is out of range"), IndexError);
}

TEST_CASE("gradcheck: cat and stack") {
  Tensor a = randn_f64({2, 3}, 1), b = randn_f64({2, 1}, 2), c = randn_f64({2, 2}, 3);
  check_grad([](const std::vector<Tensor>& x) { return cat({x[0], x[1], x[2]}, 1); }, {a, b, c});
  check_grad([](const std::vector<Tensor>& x) { return cat({x[0].t(), x[1].t()}, 0) * x[0].t().sum(); }, {a, b});
  // Only some inputs need a gradient.
  check_grad([b](const std::vector<Tensor>& x) { return cat({x[0], b}, -1); }, {a});
  Tensor d = randn_f64({2, 3}, 4);
  check_grad([](const std::vector<Tensor>& x) { return stack({x[0], x[1]}, 0); }, {a, d});
  check_grad([](const std::vector<Tensor>& x) { return stack({x[0], x[1], x[0]}, 2); }, {a, d});
}

TEST_CASE("gradcheck: split and chunk") {
  Tensor x = randn_f64({5, 3}, 5);
  check_grad(
      [](const std::vector<Tensor>& a) {
        auto p = split(a[0], 2);
        return cat({p[2] * 3.0, p[0], p[1] * 2.0}, 0);
      },
      {x});
  check_grad(
      [](const std::vector<Tensor>& a) {
        auto p = split(a[0], {2, 1}, 1);
        return p[0].sum({1}) + p[1].squeeze(1) * 5.0;
      },
      {x});
  check_grad(
      [](const std::vector<Tensor>& a) {
        auto p = chunk(a[0], 3, 0);
        return p[1] * p[0];
      },
      {x});
  // A piece that is never used gets a zero gradient.
  check_grad([](const std::vector<Tensor>& a) { return chunk(a[0], 3, 1)[1].exp(); }, {x});
}

TEST_CASE("cat backward hands each input its slice of the gradient") {
  Tensor a = iota({2, 2}).requires_grad_();
  Tensor b = iota({2, 1}).requires_grad_();
  Tensor w = iota({2, 3}, 1);
  (cat({a, b}, 1) * w).sum().backward();
  CHECK(vals(a.grad()) == V{1, 2, 4, 5});
  CHECK(vals(b.grad()) == V{3, 6});
  // Promoted inputs get gradients in their own dtype.
  Tensor h = iota({2}, 0, kFloat16).requires_grad_();
  Tensor f = iota({2}, 0, kFloat32).requires_grad_();
  cat({h, f}).sum().backward();
  CHECK(h.grad().dtype() == kFloat16);
  CHECK(vals(h.grad()) == V{1, 1});
}

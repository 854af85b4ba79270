// SPDX-License-Identifier: MIT
// Views: view/reshape/flatten, transpose/permute/t, slice/narrow/select,
// expand, squeeze/unsqueeze. Values are checked against hand-computed
// results, storage sharing is checked by writing through the view, and every
// view op is gradchecked (in f64, by finite differences).
#include <doctest/doctest.h>

#include <string>

#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
using snug::testing::contains;
using snug::testing::error_of;
using snug::testing::rnd;

namespace {
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
// 0, 1, ..., n-1 as f32 in shape s.
Tensor iota(const Shape& s) { return arange(0, static_cast<double>(numel_of(s)), 1, kFloat32).view(s); }
std::vector<float> vals(const Tensor& t) { return t.to_vector<float>(); }
}  // namespace

TEST_CASE("view: shapes, -1 inference, element placement") {
  Tensor x = iota({24});
  Tensor v = x.view({2, 3, 4});
  CHECK(v.shape() == Shape{2, 3, 4});
  CHECK(v.strides() == Strides{12, 4, 1});
  // element [1][2][3] = 1*12 + 2*4 + 3 = 23
  CHECK(v.select(0, 1).select(0, 2).select(0, 3).item() == 23);
  CHECK(v.select(0, 0).select(0, 1).select(0, 0).item() == 4);
  CHECK(x.view({-1, 4}).shape() == Shape{6, 4});
  CHECK(x.view({2, -1}).shape() == Shape{2, 12});
  CHECK(x.view({2, 3, -1}).shape() == Shape{2, 3, 4});
  CHECK(x.view({1, 24, 1}).shape() == Shape{1, 24, 1});
  CHECK(scalar_tensor(3).view({1}).shape() == Shape{1});
  CHECK(iota({1}).view({}).dim() == 0);
  CHECK_THROWS_AS(x.view({-1, -1}), ShapeError);
  CHECK_THROWS_AS(x.view({5, -1}), ShapeError);
  CHECK_THROWS_AS(x.view({5, 5}), ShapeError);
  CHECK(contains(error_of([&] { x.view({5, 5}); }), "[5, 5]"));
  CHECK(contains(error_of([&] { x.view({5, 5}); }), "24"));
  // A view of a view of a slice with compatible strides works without copying.
  Tensor m = iota({4, 6}).slice(1, 0, 6, 2);  // shape [4, 3], strides [6, 2]
  Tensor mv = m.view({2, 2, 3});
  CHECK(mv.storage() == m.storage());
  CHECK(vals(mv) == std::vector<float>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22});
}

TEST_CASE("view: shares storage; writing through it changes the base") {
  Tensor x = iota({6});
  Tensor v = x.view({2, 3});
  CHECK(v.storage() == x.storage());
  CHECK(v.data_ptr() == x.data_ptr());
  v.select(0, 1).fill_(-1);
  CHECK(vals(x) == std::vector<float>{0, 1, 2, -1, -1, -1});
  x.add_(10);
  CHECK(vals(v) == std::vector<float>{10, 11, 12, 9, 9, 9});
}

TEST_CASE("view on a non-contiguous tensor errors with a helpful message") {
  Tensor x = iota({2, 3}).t();  // [3, 2], strides [1, 3]
  std::string m = error_of([&] { x.view({6}); });
  INFO(m);
  CHECK(contains(m, "view"));
  CHECK(contains(m, "[3, 2]"));
  CHECK(contains(m, "[1, 3]"));  // strides
  CHECK(contains(m, "reshape"));
  CHECK_THROWS_AS(x.view({6}), ShapeError);
  CHECK_THROWS_AS(x.view({2, 3}), ShapeError);
  // Splitting a dim is fine even on a non-contiguous tensor.
  Tensor y = iota({4, 2}).t();  // [2, 4], strides [1, 2]
  Tensor ys = y.view({2, 2, 2});
  CHECK(ys.strides() == Strides{1, 4, 2});
  CHECK(vals(ys) == std::vector<float>{0, 2, 4, 6, 1, 3, 5, 7});
  // Expanded dims cannot be merged.
  CHECK_THROWS_AS(iota({3, 1}).expand({3, 4}).view({12}), ShapeError);
}

TEST_CASE("reshape: a view when possible, else a copy") {
  Tensor x = iota({2, 3});
  Tensor r = x.reshape({3, -1});
  CHECK(r.shape() == Shape{3, 2});
  CHECK(r.storage() == x.storage());
  Tensor t = x.t();  // [[0,3],[1,4],[2,5]]
  Tensor rt = t.reshape({6});
  CHECK(rt.storage() != x.storage());
  CHECK(vals(rt) == std::vector<float>{0, 3, 1, 4, 2, 5});
  rt.fill_(9);  // a copy: the base is untouched
  CHECK(vals(x) == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(t.reshape({2, 3}).to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_AS(x.reshape({4, -1}), ShapeError);
  CHECK(contains(error_of([&] { x.reshape({4, -1}); }), "reshape"));
  CHECK_THROWS_AS(x.reshape({-2, 3}), ShapeError);
}

TEST_CASE("flatten") {
  Tensor x = iota({2, 3, 4});
  CHECK(x.flatten().shape() == Shape{24});
  CHECK(x.flatten(1).shape() == Shape{2, 12});
  CHECK(x.flatten(0, 1).shape() == Shape{6, 4});
  CHECK(x.flatten(-2, -1).shape() == Shape{2, 12});
  CHECK(x.flatten(1, 1).shape() == Shape{2, 3, 4});
  CHECK(x.flatten().storage() == x.storage());
  CHECK(scalar_tensor(2).flatten().shape() == Shape{1});
  Tensor p = x.permute({2, 0, 1});  // [4, 2, 3]
  Tensor f = p.flatten(1);          // [4, 6] (a copy)
  CHECK(f.shape() == Shape{4, 6});
  // f[k][i*3 + j] = x[i][j][k] = 12 i + 4 j + k; row k = 1: 1 5 9 13 17 21
  CHECK(vals(f.select(0, 1)) == std::vector<float>{1, 5, 9, 13, 17, 21});
  CHECK_THROWS_AS(x.flatten(2, 1), ShapeError);
  CHECK_THROWS_AS(x.flatten(0, 3), IndexError);
}

TEST_CASE("transpose, t, permute: shapes, strides, values, sharing") {
  Tensor x = iota({2, 3});
  Tensor t = x.t();
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.strides() == Strides{1, 3});
  CHECK(vals(t) == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(t.storage() == x.storage());
  t.select(0, 2).fill_(-7);  // column 2 of x
  CHECK(vals(x) == std::vector<float>{0, 1, -7, 3, 4, -7});
  CHECK(x.transpose(0, 1).shape() == Shape{3, 2});
  CHECK(x.transpose(-1, -2).strides() == Strides{1, 3});
  CHECK(iota({4}).t().shape() == Shape{4});
  CHECK_THROWS_AS(iota({2, 2, 2}).t(), ShapeError);
  CHECK_THROWS_AS(x.transpose(0, 2), IndexError);

  Tensor y = iota({2, 3, 4});
  Tensor y02 = y.transpose(0, 2);  // [4, 3, 2]: y02[k][j][i] = 12 i + 4 j + k
  CHECK(y02.shape() == Shape{4, 3, 2});
  CHECK(y02.select(0, 3).select(0, 1).select(0, 1).item() == 12 + 4 + 3);
  Tensor p = y.permute({2, 0, 1});  // p[k][i][j] = y[i][j][k]
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Strides{1, 12, 4});
  CHECK(vals(p.select(0, 2)) == std::vector<float>{2, 6, 10, 14, 18, 22});
  CHECK(y.permute({-1, 0, 1}).shape() == Shape{4, 2, 3});
  CHECK_THROWS_AS(y.permute({0, 0, 1}), ShapeError);
  CHECK_THROWS_AS(y.permute({0, 1}), ShapeError);
  CHECK(contains(error_of([&] { y.permute({0, 1}); }), "permute"));
  CHECK_THROWS_AS(y.permute({0, 1, 3}), IndexError);
}

TEST_CASE("slice: steps, negative indices, clamping, sharing") {
  Tensor x = iota({10});
  CHECK(vals(x.slice(0, 1, 8, 3)) == std::vector<float>{1, 4, 7});
  CHECK(vals(x.slice(0, 0, 10, 4)) == std::vector<float>{0, 4, 8});
  CHECK(vals(x.slice(0, -3, 10)) == std::vector<float>{7, 8, 9});
  CHECK(vals(x.slice(0, 2, -5)) == std::vector<float>{2, 3, 4});
  CHECK(vals(x.slice(0, -100, 100)) == vals(x));  // clamped to the dim
  CHECK(vals(x.slice(0, 8, 100, 2)) == std::vector<float>{8});
  CHECK(x.slice(0, 5, 2).numel() == 0);    // end before start: empty
  CHECK(x.slice(0, 12, 20).numel() == 0);  // past the end: empty
  CHECK(x.slice(0, 9, 10, 5).numel() == 1);
  CHECK(x.slice(0, 1, 8, 3).strides() == Strides{3});
  CHECK(x.slice(0, 1, 8, 3).offset() == 1);
  CHECK_THROWS_AS(x.slice(0, 0, 5, 0), ValueError);
  CHECK_THROWS_AS(x.slice(0, 0, 5, -1), ValueError);
  CHECK_THROWS_AS(x.slice(1, 0, 5), IndexError);

  Tensor m = iota({3, 4});
  Tensor s = m.slice(1, 1, 4, 2);  // columns 1 and 3
  CHECK(s.shape() == Shape{3, 2});
  CHECK(vals(s) == std::vector<float>{1, 3, 5, 7, 9, 11});
  CHECK(vals(m.slice(-2, 1, 3)) == std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11});
  s.fill_(0);
  CHECK(vals(m) == std::vector<float>{0, 0, 2, 0, 4, 0, 6, 0, 8, 0, 10, 0});
  // Slicing a slice composes offsets and steps.
  Tensor ss = x.slice(0, 1, 10, 2).slice(0, 1, 4, 2);  // [1,3,5,7,9] -> [3, 7]
  CHECK(vals(ss) == std::vector<float>{3, 7});
}

TEST_CASE("narrow and select") {
  Tensor x = iota({10});
  CHECK(vals(x.narrow(0, 2, 3)) == std::vector<float>{2, 3, 4});
  CHECK(vals(x.narrow(0, -4, 2)) == std::vector<float>{6, 7});
  CHECK(x.narrow(0, 10, 0).numel() == 0);
  CHECK_THROWS_AS(x.narrow(0, 8, 3), IndexError);
  CHECK_THROWS_AS(x.narrow(0, 2, -1), IndexError);
  CHECK(contains(error_of([&] { x.narrow(0, 8, 3); }), "narrow"));

  Tensor m = iota({3, 4});
  CHECK(vals(m.narrow(1, 1, 2)) == std::vector<float>{1, 2, 5, 6, 9, 10});
  CHECK(vals(m.select(0, 1)) == std::vector<float>{4, 5, 6, 7});
  CHECK(vals(m.select(0, -1)) == std::vector<float>{8, 9, 10, 11});
  CHECK(vals(m.select(1, 2)) == std::vector<float>{2, 6, 10});
  CHECK(m.select(1, 2).shape() == Shape{3});
  CHECK(m.select(1, 2).strides() == Strides{4});
  std::string e = error_of([&] { m.select(0, 3); });
  CHECK(contains(e, "select"));
  CHECK(contains(e, "3"));
  CHECK_THROWS_AS(m.select(0, 3), IndexError);
  CHECK_THROWS_AS(m.select(1, -5), IndexError);
  m.select(1, 0).fill_(-1);
  CHECK(vals(m.select(1, 0)) == std::vector<float>{-1, -1, -1});
  CHECK(vals(m.select(0, 0)) == std::vector<float>{-1, 1, 2, 3});
}

TEST_CASE("expand: stride 0, -1, new leading dims, sharing") {
  Tensor c = from_vector<float>({1, 2, 3}, {3, 1});
  Tensor e = c.expand({3, 4});
  CHECK(e.shape() == Shape{3, 4});
  CHECK(e.strides() == Strides{1, 0});
  CHECK(vals(e) == std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  CHECK(e.storage() == c.storage());
  CHECK(c.expand({-1, 2}).shape() == Shape{3, 2});
  Tensor e3 = c.expand({2, 3, 2});
  CHECK(e3.strides() == Strides{0, 1, 0});
  CHECK(e3.numel() == 12);
  CHECK(c.expand({3, 1}).strides() == c.strides());
  CHECK(c.expand({3, 0}).numel() == 0);
  c.fill_(5);  // visible through the expansion
  CHECK(vals(e) == std::vector<float>(12, 5));
  std::string m = error_of([&] { c.expand({4, 4}); });
  CHECK(contains(m, "expand"));
  CHECK(contains(m, "[3, 1]"));
  CHECK(contains(m, "[4, 4]"));
  CHECK_THROWS_AS(c.expand({4, 4}), ShapeError);
  CHECK_THROWS_AS(c.expand({3}), ShapeError);         // fewer dims
  CHECK_THROWS_AS(c.expand({-1, 3, 4}), ShapeError);  // -1 for a new dim
}

TEST_CASE("squeeze and unsqueeze") {
  Tensor x = iota({1, 3, 1, 2});
  CHECK(x.squeeze().shape() == Shape{3, 2});
  CHECK(x.squeeze(0).shape() == Shape{3, 1, 2});
  CHECK(x.squeeze(2).shape() == Shape{1, 3, 2});
  CHECK(x.squeeze(-2).shape() == Shape{1, 3, 2});
  CHECK(x.squeeze(1).shape() == Shape{1, 3, 1, 2});  // not size 1: unchanged
  CHECK(x.squeeze().storage() == x.storage());
  CHECK(iota({1, 1}).squeeze().dim() == 0);
  CHECK_THROWS_AS(x.squeeze(4), IndexError);

  Tensor v = iota({3, 2});
  CHECK(v.unsqueeze(0).shape() == Shape{1, 3, 2});
  CHECK(v.unsqueeze(1).shape() == Shape{3, 1, 2});
  CHECK(v.unsqueeze(2).shape() == Shape{3, 2, 1});
  CHECK(v.unsqueeze(-1).shape() == Shape{3, 2, 1});
  CHECK(v.unsqueeze(-3).shape() == Shape{1, 3, 2});
  CHECK(v.unsqueeze(1).is_contiguous());
  CHECK(vals(v.unsqueeze(1)) == vals(v));
  CHECK_THROWS_AS(v.unsqueeze(3), IndexError);
  CHECK_THROWS_AS(v.unsqueeze(-4), IndexError);
  Tensor u = v.t().unsqueeze(1);  // [2, 1, 3] of a transposed view
  CHECK(vals(u) == std::vector<float>{0, 2, 4, 1, 3, 5});
  u.select(0, 0).fill_(8);
  CHECK(vals(v) == std::vector<float>{8, 1, 8, 3, 8, 5});
  CHECK(scalar_tensor(1).unsqueeze(0).shape() == Shape{1});
}

TEST_CASE("views of views: offsets compose") {
  Tensor x = iota({4, 5, 6});
  // x[2, 1:4, 3] = 60 + {6, 12, 18} + 3
  Tensor v = x.select(0, 2).slice(0, 1, 4).select(1, 3);
  CHECK(vals(v) == std::vector<float>{69, 75, 81});
  Tensor w = x.permute({1, 2, 0}).slice(2, 1, 4, 2).select(0, 4);  // [6, 2]: x[{1,3}, 4, k]
  CHECK(w.shape() == Shape{6, 2});
  CHECK(vals(w.select(0, 5)) == std::vector<float>{30 + 24 + 5, 90 + 24 + 5});
}

TEST_CASE("gradcheck: every view op") {
  Tensor a = rnd({2, 3, 4}, 1);
  check_grad([](const std::vector<Tensor>& x) { return x[0].view({6, 4}); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].view({-1}); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].reshape({4, 6}); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].transpose(0, 2).reshape({-1}); }, {a});  // copy path
  check_grad([](const std::vector<Tensor>& x) { return x[0].flatten(1); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].permute({2, 0, 1}).flatten(0, 1); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].transpose(1, 2); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].permute({1, 2, 0}); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].select(1, 2).t(); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].select(2, -1); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].slice(2, 0, 4, 3); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].slice(1, -2, 3); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].narrow(2, 1, 2); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].unsqueeze(1).squeeze(1); }, {a});
  check_grad([](const std::vector<Tensor>& x) { return x[0].unsqueeze(-1); }, {a});
  Tensor b = rnd({3, 1, 2}, 2);
  check_grad([](const std::vector<Tensor>& x) { return x[0].expand({4, 3, 5, 2}); }, {b});
  check_grad([](const std::vector<Tensor>& x) { return x[0].squeeze(); }, {b});
  check_grad([](const std::vector<Tensor>& x) { return x[0].squeeze(1); }, {b});
  // Overlapping uses of one input: gradients from several views accumulate.
  check_grad(
      [](const std::vector<Tensor>& x) {
        return x[0].select(0, 0) * x[0].select(0, 1) + x[0].slice(0, 1, 2).squeeze(0);
      },
      {rnd({2, 5}, 3)});
}

TEST_CASE("gradcheck: broadcasting through views and elementwise ops") {
  Tensor a = rnd({2, 1, 3}, 4), b = rnd({4, 1}, 5);
  check_grad([](const std::vector<Tensor>& x) { return x[0] + x[1]; }, {a, b});
  check_grad([](const std::vector<Tensor>& x) { return x[0] * x[1]; }, {a, b});
  check_grad(
      [](const std::vector<Tensor>& x) {
        return x[0].expand({2, 4, 3}) * x[1].t().unsqueeze(-1);
      },
      {a, rnd({4, 1}, 6)});
  check_grad([](const std::vector<Tensor>& x) { return x[0].transpose(0, 2) - x[1]; }, {a, rnd({2}, 7)});
}

TEST_CASE("view backward: gradient values by hand") {
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, TensorOptions(kFloat32, kCPU, true));
  // y = x[:, 1:3:1] * [10, 20] summed -> dx = [[0,10,20],[0,10,20]]
  Tensor w = from_vector<float>({10, 20}, {2});
  (x.slice(1, 1, 3) * w).sum().backward();
  CHECK(vals(x.grad()) == std::vector<float>{0, 10, 20, 0, 10, 20});
  Tensor x2 = from_vector<float>({1, 2, 3}, {3, 1}, TensorOptions(kFloat32, kCPU, true));
  x2.expand({3, 4}).sum().backward();  // each element used 4 times
  CHECK(vals(x2.grad()) == std::vector<float>{4, 4, 4});
  Tensor x3 = from_vector<float>({1, 2, 3, 4}, {2, 2}, TensorOptions(kFloat32, kCPU, true));
  (x3.t() * from_vector<float>({1, 2, 3, 4}, {2, 2})).sum().backward();
  // d/dx3[i][j] = w[j][i]
  CHECK(vals(x3.grad()) == std::vector<float>{1, 3, 2, 4});
  // Views made by differentiable ops are marked; in-place autograd on them is refused.
  Tensor y = x3 * 1.0;
  Tensor v = y.select(0, 0);
  CHECK_THROWS_AS(v.mul_(from_vector<float>({1, 2}, {2}, TensorOptions(kFloat32, kCPU, true))), AutogradError);
}

// SPDX-License-Identifier: MIT
// Index ops: index_select, index_add, gather, scatter_add -- values along any
// dim, duplicates, layouts, dtypes, determinism, errors and gradients.
#include <doctest/doctest.h>

#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
using snug::testing::idx;
using snug::testing::iota;
using snug::testing::make;
using snug::testing::randn_f64;
using snug::testing::vals;

namespace {

using V = std::vector<double>;

}  // namespace

TEST_CASE("index_select along dim 0, dim 1 and a negative dim") {
  Tensor x = iota({3, 4});  // [[0..3],[4..7],[8..11]]
  Tensor r0 = index_select(x, 0, idx({2, 0, 2}));
  CHECK(r0.shape() == Shape{3, 4});
  CHECK(vals(r0) == V{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  Tensor r1 = index_select(x, 1, idx({3, 1}));
  CHECK(r1.shape() == Shape{3, 2});
  CHECK(vals(r1) == V{3, 1, 7, 5, 11, 9});
  CHECK(vals(index_select(x, -1, idx({3, 1}))) == vals(r1));
  CHECK(index_select(x, 0, idx({})).shape() == Shape{0, 4});
  // 3-D, middle dim.
  Tensor y = iota({2, 3, 2});
  CHECK(vals(index_select(y, 1, idx({1}))) == V{2, 3, 8, 9});
  // Non-contiguous x and index.
  CHECK(vals(index_select(x.t(), 0, idx({1}))) == V{1, 5, 9});
  Tensor every_other = idx({2, 9, 0, 9}).slice(0, 0, 4, 2);  // [2, 0]
  CHECK(vals(index_select(x, 0, every_other)) == V{8, 9, 10, 11, 0, 1, 2, 3});
  // Any dtype is moved bit for bit.
  for (DType dt : {kFloat16, kBFloat16, kFloat64, kInt8, kInt32, kInt64, kBool}) {
    Tensor z = make({1, 0, 1, 1, 0, 0}, {3, 2}, dt);
    Tensor s = index_select(z, 0, idx({2, 1}));
    CHECK(s.dtype() == dt);
    CHECK(vals(s) == V{0, 0, 1, 1});
  }
}

TEST_CASE("index_add accumulates duplicates") {
  Tensor base = iota({3, 2});
  Tensor src = make({1, 2, 10, 20, 100, 200}, {3, 2});
  Tensor r = raw::index_add(base, 0, idx({2, 0, 2}), src);
  CHECK(vals(r) == V{10, 21, 2, 3, 105, 207});
  CHECK(vals(base) == V{0, 1, 2, 3, 4, 5});  // out-of-place
  Tensor c = raw::index_add(zeros({2, 3}), 1, idx({1, 1}), make({1, 2, 3, 4}, {2, 2}));
  CHECK(vals(c) == V{0, 3, 0, 0, 7, 0});
  Tensor i = raw::index_add(zeros({3}, kInt64), 0, idx({0, 0, 2}), make({5, 6, 7}, {3}, kInt64));
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{11, 0, 7});
}

TEST_CASE("gather and scatter_add (the PyTorch docs examples)") {
  Tensor t = make({1, 2, 3, 4}, {2, 2});
  CHECK(vals(gather(t, 1, idx({0, 0, 1, 0}, {2, 2}))) == V{1, 1, 4, 3});
  CHECK(vals(gather(t, 0, idx({1, 0}, {1, 2}))) == V{3, 2});
  // index smaller than x in the other dims.
  Tensor x = iota({3, 4});
  CHECK(vals(gather(x, 1, idx({3, 2}, {2, 1}))) == V{3, 6});
  CHECK(vals(gather(x.t(), 0, idx({2, 0}, {1, 2}))) == V{2, 4});  // x.t()[2][0], x.t()[0][1]
  // scatter_add: out[index[i][j]][j] += src[i][j] (dim 0)
  Tensor src = ones({2, 5});
  Tensor index = idx({0, 1, 2, 0, 0, 2, 0, 0, 1, 2}, {2, 5});
  Tensor r = scatter_add(zeros({3, 5}), 0, index, src);
  CHECK(vals(r) == V{1, 1, 1, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1});
  // index smaller than src: the rest of src is not read.
  Tensor r1 = scatter_add(zeros({2, 3}), 1, idx({2, 2, 0}, {1, 3}), make({1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK(vals(r1) == V{3, 0, 3, 0, 0, 0});
  // base is not modified; halves accumulate.
  Tensor h = ones({3}, TensorOptions(kFloat16));
  Tensor rh = scatter_add(h, 0, idx({1, 1, 1}), make({0.5, 0.25, 0.25}, {3}, kFloat16));
  CHECK(vals(rh) == V{1, 2, 1});
  CHECK(vals(h) == V{1, 1, 1});
}

TEST_CASE("scatter_add and index_add are deterministic for any number of threads") {
  SNUG_SKIP_IF_ONE_THREAD();
  Generator g(1);
  Tensor src = randn({4096, 64}, {}, &g);
  Tensor index = randint(0, 7, {4096}, kInt64, &g);  // many duplicates
  Tensor index2 = randint(0, 7, {4096, 64}, kInt64, &g);
  int before = get_num_threads();
  set_num_threads(1);
  auto a1 = vals(raw::index_add(zeros({7, 64}), 0, index, src));
  auto s1 = vals(scatter_add(zeros({7, 64}), 0, index2, src));
  set_num_threads(2);
  auto a2 = vals(raw::index_add(zeros({7, 64}), 0, index, src));
  auto s2 = vals(scatter_add(zeros({7, 64}), 0, index2, src));
  set_num_threads(before);
  CHECK(a1 == a2);
  CHECK(s1 == s2);
  // Against a sequential reference in the same order.
  auto sv = vals(src);
  auto iv = index.to_vector<int64_t>();
  std::vector<float> ref(7 * 64, 0.f);
  for (int r = 0; r < 4096; ++r)
    for (int c = 0; c < 64; ++c) ref[iv[r] * 64 + c] += static_cast<float>(sv[r * 64 + c]);
  for (size_t k = 0; k < ref.size(); ++k) REQUIRE(a1[k] == ref[k]);
}

TEST_CASE("index op errors name the op, the value and the valid range") {
  Tensor x = iota({3, 4});
  CHECK_THROWS_WITH_AS(index_select(x, 0, idx({0, 3})),
                       doctest::Contains("index_select: index 3 is out of range for dim 0 of size 3 (expected 0 <= "
                                         "index < 3)"),
                       IndexError);
  CHECK_THROWS_WITH_AS(index_select(x, 1, idx({-1})),
                       doctest::Contains("index_select: index -1 is out of range for dim 1 of size 4"), IndexError);
  CHECK_THROWS_WITH_AS(index_select(x, 2, idx({0})),
                       doctest::Contains("index_select: dim 2 is out of range for a tensor with 2 dims"), IndexError);
  CHECK_THROWS_WITH_AS(index_select(x, 0, make({0}, {1}, kInt32)),
                       doctest::Contains("index_select: index must have dtype i64, got i32"), DTypeError);
  CHECK_THROWS_WITH_AS(index_select(x, 0, idx({0, 1}, {1, 2})),
                       doctest::Contains("index_select: index must be 1-D, got shape [1, 2]"), ShapeError);
  CHECK_THROWS_WITH_AS(index_select(x, 0, idx({0}).to("cpu:1")),
                       doctest::Contains("index_select: x is on cpu:0 but index is on cpu:1"), DeviceError);
  CHECK_THROWS_WITH_AS(index_select(scalar_tensor(1.0), 0, idx({0})),
                       doctest::Contains("index_select: x is 0-d; expected at least 1 dim"), ShapeError);

  CHECK_THROWS_WITH_AS(raw::index_add(x, 0, idx({5}), ones({1, 4})),
                       doctest::Contains("index_add: index 5 is out of range for dim 0 of size 3"), IndexError);
  CHECK_THROWS_WITH_AS(raw::index_add(x, 0, idx({0, 1}), ones({1, 4})),
                       doctest::Contains("index_add: src has shape [1, 4], size 1 in dim 0, but index has 2 elements"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(raw::index_add(x, 0, idx({0}), ones({1, 3})),
                       doctest::Contains("index_add: src has shape [1, 3] but base has shape [3, 4] (expected equal "
                                         "sizes in every dim but dim 0)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(raw::index_add(x, 0, idx({0}), ones({1, 4}, kFloat64)),
                       doctest::Contains("index_add: src has dtype f64 but base has dtype f32"), DTypeError);
  CHECK_THROWS_WITH_AS(raw::index_add(x, 0, idx({0}), ones({1, 4}, "cpu:1")),
                       doctest::Contains("index_add: base is on cpu:0 but src is on cpu:1"), DeviceError);

  CHECK_THROWS_WITH_AS(
      gather(x, 1, idx({4}, {1, 1})),
      doctest::Contains("gather: index 4 is out of range for dim 1 of size 4 (expected 0 <= index < 4)"), IndexError);
  CHECK_THROWS_WITH_AS(gather(x, 1, idx({0, 1})),
                       doctest::Contains("gather: index has shape [2] but x has shape [3, 4] (expected the same number "
                                         "of dims)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(
      gather(x, 1, idx({0, 0, 0, 0}, {4, 1})),
      doctest::Contains("gather: index has shape [4, 1] but x has shape [3, 4] (expected index.size(0) "
                        "<= x.size(0) in every dim but dim 1)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(gather(x, 0, make({0}, {1, 1}, kFloat32)),
                       doctest::Contains("gather: index must have dtype i64, got f32"), DTypeError);

  CHECK_THROWS_WITH_AS(scatter_add(x, 0, idx({3}, {1, 1}), ones({1, 1})),
                       doctest::Contains("scatter_add: index 3 is out of range for dim 0 of size 3"), IndexError);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, idx({0, 0}, {1, 2}), ones({1, 1})),
                       doctest::Contains("scatter_add: index has shape [1, 2] but src has shape [1, 1] (expected "
                                         "index.size(1) <= src.size(1))"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(scatter_add(x, 1, idx({0, 0, 0, 0}, {4, 1}), ones({4, 1})),
                       doctest::Contains("scatter_add: index has shape [4, 1] but base has shape [3, 4] (expected "
                                         "index.size(0) <= base.size(0) in every dim but dim 1)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, idx({0}), ones({1})),
                       doctest::Contains("scatter_add: base [3, 4], index [1] and src [1] must have the same number of "
                                         "dims"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, idx({0}, {1, 1}), ones({1, 1}, kInt64)),
                       doctest::Contains("scatter_add: src has dtype i64 but base has dtype f32"), DTypeError);
}

TEST_CASE("gradcheck: index_select") {
  Tensor x = randn_f64({4, 3}, 1);
  Tensor i = idx({3, 0, 3, 1, 3});  // duplicates: gradients add up
  check_grad([i](const std::vector<Tensor>& a) { return index_select(a[0], 0, i); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return index_select(a[0], -1, idx({2, 2, 0})); }, {x});
  check_grad([](const std::vector<Tensor>& a) { return index_select(a[0].t(), 1, idx({1, 0})); }, {x});
}

TEST_CASE("gradcheck: gather") {
  Tensor x = randn_f64({3, 4}, 2);
  Tensor i = idx({0, 0, 3, 1, 2, 2, 2, 0}, {2, 4});
  check_grad([i](const std::vector<Tensor>& a) { return gather(a[0], 1, i); }, {x});
  Tensor j = idx({2, 0, 1, 2, 2, 0}, {2, 3});
  check_grad([j](const std::vector<Tensor>& a) { return gather(a[0], 0, j); }, {x});
}

TEST_CASE("gradcheck: scatter_add (both inputs)") {
  Tensor x = randn_f64({3, 4}, 3);
  Tensor src = randn_f64({2, 4}, 4);
  Tensor i = idx({0, 2, 2, 1, 0, 0, 2, 1}, {2, 4});
  check_grad([i](const std::vector<Tensor>& a) { return scatter_add(a[0], 0, i, a[1]); }, {x, src});
  // src larger than index: the unread part gets a zero gradient.
  Tensor big = randn_f64({3, 5}, 5);
  Tensor j = idx({3, 3, 0, 1, 1, 1}, {3, 2});
  check_grad([j](const std::vector<Tensor>& a) { return scatter_add(a[0], 1, j, a[1]); }, {x, big});
  Tensor s = randn_f64({3, 5}, 6).requires_grad_();
  (scatter_add(zeros({3, 4}, kFloat64), 1, j, s) * 2.0).sum().backward();
  CHECK(vals(s.grad()) == V{2, 2, 0, 0, 0, 2, 2, 0, 0, 0, 2, 2, 0, 0, 0});
}

TEST_CASE("embedding-style lookup: index_select forward and backward") {
  Tensor table = iota({5, 3}).requires_grad_();
  Tensor tokens = idx({4, 1, 4, 4});
  Tensor e = index_select(table, 0, tokens);
  CHECK(vals(e) == V{12, 13, 14, 3, 4, 5, 12, 13, 14, 12, 13, 14});
  e.sum().backward();
  CHECK(vals(table.grad()) == V{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 3, 3, 3});
}

// SPDX-License-Identifier: MIT
// matmul (torch.matmul semantics): every 1-D/2-D/batched form, broadcasting
// batch dims, strided (transposed/sliced/expanded) inputs, f32/f64/f16/bf16,
// values against a naive triple loop, gradchecks, and error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
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
void check_close(const V& got, const V& want, double rel, double abs_tol) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= abs_tol + rel * std::fabs(want[i]))) {
      if (bad < 5) MESSAGE("element ", i, ": got ", got[i], " want ", want[i]);
      ++bad;
    }
  CHECK(bad == 0);
}

// Naive reference for a (..., M, K) @ (..., K, N) with batch broadcasting,
// reading logical values (to_vector) and indexing by hand.
V naive_bmm(const Tensor& a, const Tensor& b) {
  V av = vals(a), bv = vals(b);
  Shape sa = a.shape(), sb = b.shape();
  int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  size_t nd = std::max(ba.size(), bb.size());
  while (ba.size() < nd) ba.insert(ba.begin(), 1);
  while (bb.size() < nd) bb.insert(bb.begin(), 1);
  Shape bo(nd);
  for (size_t i = 0; i < nd; ++i) bo[i] = std::max(ba[i], bb[i]);
  int64_t nb = numel_of(bo);
  V out;
  for (int64_t flat = 0; flat < nb; ++flat) {
    int64_t ia = 0, ib = 0, rem = flat, sa_acc = 1, sb_acc = 1;
    for (int64_t d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
      int64_t idx = rem % bo[d];
      rem /= bo[d];
      ia += (ba[d] == 1 ? 0 : idx) * sa_acc;
      ib += (bb[d] == 1 ? 0 : idx) * sb_acc;
      sa_acc *= ba[d];
      sb_acc *= bb[d];
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += av[ia * M * K + m * K + k] * bv[ib * K * N + k * N + n];
        out.push_back(acc);
      }
  }
  return out;
}
}  // namespace

TEST_CASE("matmul: 1-D . 1-D is a 0-d dot product") {
  Tensor a = make({1, 2, 3}, {3}), b = make({4, 5, 6}, {3});
  Tensor d = matmul(a, b);
  CHECK(d.dim() == 0);
  CHECK(d.item() == 32);
  CHECK(a.matmul(b).item() == 32);
}

TEST_CASE("matmul: 1-D . 2-D and 2-D . 1-D") {
  Tensor m = make({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = matmul(make({1, 2}, {2}), m);
  CHECK(r.shape() == Shape{3});
  CHECK(vals(r) == V{9, 12, 15});
  Tensor c = matmul(m, make({1, 0, -1}, {3}));
  CHECK(c.shape() == Shape{2});
  CHECK(vals(c) == V{-2, -2});
}

TEST_CASE("matmul: 2-D . 2-D") {
  Tensor a = make({1, 2, 3, 4}, {2, 2}), b = make({5, 6, 7, 8}, {2, 2});
  Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{2, 2});
  CHECK(vals(c) == V{19, 22, 43, 50});
  // Non-square: [2,3] @ [3,4]
  Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = make({1, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 0}, {3, 4});
  // row0 = [1,2,3]: [1+3, 2+3, 3, 1+2]; row1 = [4,5,6]: [4+6, 5+6, 6, 4+5]
  CHECK(vals(matmul(x, y)) == V{4, 5, 3, 3, 10, 11, 6, 9});
  // Bigger, odd sizes, against the naive loop.
  Tensor p = rnd({37, 53}, 1, kFloat32), q = rnd({53, 29}, 2, kFloat32);
  check_close(vals(matmul(p, q)), naive_bmm(p, q), 1e-4, 1e-4);
}

TEST_CASE("matmul: batched with broadcasting") {
  Tensor a = rnd({2, 1, 3, 4}, 3), b = rnd({5, 4, 2}, 4);
  Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{2, 5, 3, 2});
  CHECK(c.dtype() == kFloat64);
  check_close(vals(c), naive_bmm(a, b), 1e-12, 1e-12);
  // Batch dims against a plain matrix, both ways.
  Tensor m = rnd({4, 6}, 5);
  CHECK(matmul(a, m).shape() == Shape{2, 1, 3, 6});
  check_close(vals(matmul(a, m)), naive_bmm(a, m), 1e-12, 1e-12);
  Tensor l = rnd({7, 3}, 6);
  CHECK(matmul(l, a).shape() == Shape{2, 1, 7, 4});
  check_close(vals(matmul(l, a)), naive_bmm(l, a), 1e-12, 1e-12);
  // 1-D against batched: the vector's added dim is dropped.
  Tensor v = make({1, -1, 2, 0.5}, {4}, kFloat64);
  Tensor av = matmul(a, v);
  CHECK(av.shape() == Shape{2, 1, 3});
  check_close(vals(av), naive_bmm(a, v.unsqueeze(1)), 1e-12, 1e-12);
  Tensor v3 = make({1, -1, 2}, {3}, kFloat64);
  Tensor va = matmul(v3, a);
  CHECK(va.shape() == Shape{2, 1, 4});
  check_close(vals(va), naive_bmm(v3.unsqueeze(0), a), 1e-12, 1e-12);
  // Same batch dims, and a broadcast size-1 batch on the right.
  Tensor x = rnd({3, 2, 5}, 7), y = rnd({1, 5, 2}, 8);
  check_close(vals(matmul(x, y)), naive_bmm(x, y), 1e-12, 1e-12);
}

TEST_CASE("matmul: strided inputs (transposed, sliced, expanded views)") {
  Tensor a = rnd({4, 3}, 9), b = rnd({4, 5}, 10);
  Tensor at = a.t();  // [3, 4], a transposed view
  CHECK_FALSE(at.is_contiguous());
  check_close(vals(matmul(at, b)), naive_bmm(at.contiguous(), b), 1e-12, 1e-12);
  Tensor bt = rnd({5, 4}, 11);
  check_close(vals(matmul(a.t(), bt.t())), naive_bmm(a.t().contiguous(), bt.t().contiguous()), 1e-12, 1e-12);
  check_close(vals(matmul(bt, a)), naive_bmm(bt, a), 1e-12, 1e-12);
  // Batched transposes (k.transpose(-2, -1) style).
  Tensor k = rnd({2, 6, 3}, 12), q = rnd({2, 6, 3}, 13);
  Tensor s = matmul(q, k.transpose(-2, -1));
  CHECK(s.shape() == Shape{2, 6, 6});
  check_close(vals(s), naive_bmm(q, k.transpose(-2, -1).contiguous()), 1e-12, 1e-12);
  // Step slices need a copy inside; results must still be right.
  Tensor big = rnd({6, 8}, 14);
  Tensor sl = big.slice(0, 0, 6, 2).slice(1, 1, 8, 2);  // [3, 4], strides [16, 2]
  Tensor r = rnd({4, 2}, 15);
  check_close(vals(matmul(sl, r)), naive_bmm(sl.contiguous(), r), 1e-12, 1e-12);
  // Expanded batch operand (stride 0).
  Tensor e = rnd({1, 3, 4}, 16).expand({5, 3, 4});
  Tensor f = rnd({5, 4, 2}, 17);
  check_close(vals(matmul(e, f)), naive_bmm(e.contiguous(), f), 1e-12, 1e-12);
  // Permuted batch dims.
  Tensor p = rnd({3, 2, 4}, 18).permute({1, 0, 2});  // [2, 3, 4]
  Tensor w = rnd({2, 4, 3}, 19);
  check_close(vals(matmul(p, w)), naive_bmm(p.contiguous(), w), 1e-12, 1e-12);
}

TEST_CASE("matmul: dtypes f64, f16, bf16") {
  Tensor a = make({1, 2, 3, 4}, {2, 2}, kFloat64), b = make({0.5, -1, 0.25, 2}, {2, 2}, kFloat64);
  Tensor c = matmul(a, b);
  CHECK(c.dtype() == kFloat64);
  CHECK(vals(c) == V{1, 3, 2.5, 5});
  // f64 keeps digits f32 would lose.
  Tensor x = make({1 + 1e-12, 1}, {1, 2}, kFloat64), y = make({1, -1}, {2, 1}, kFloat64);
  CHECK(matmul(x, y).item() == doctest::Approx(1e-12).epsilon(1e-3));
  for (DType dt : {kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    Tensor p = rnd({5, 7}, 20, dt), q = rnd({7, 3}, 21, dt);
    Tensor r = matmul(p, q);
    CHECK(r.dtype() == dt);
    CHECK(r.shape() == Shape{5, 3});
    // Reference from the stored (rounded) inputs, accumulated in double; the only
    // error is the final rounding to 16 bits (f32 accumulation error is far smaller).
    double rel = dt == kFloat16 ? 1.0 / 1024 : 1.0 / 128;
    check_close(vals(r), naive_bmm(p, q), rel, 1e-2);
    Tensor pb = rnd({2, 3, 4}, 22, dt), qb = rnd({4, 2}, 23, dt);
    check_close(vals(matmul(pb.transpose(-1, -2).transpose(-1, -2), qb)), naive_bmm(pb, qb), rel, 1e-2);
    // Exact small integers stay exact.
    Tensor i = make({1, 2, 3, 4}, {2, 2}, dt);
    CHECK(vals(matmul(i, i)) == V{7, 10, 15, 22});
  }
}

TEST_CASE("matmul: empty dims") {
  Tensor c = matmul(zeros({2, 0}), zeros({0, 3}));
  CHECK(c.shape() == Shape{2, 3});
  CHECK(vals(c) == V(6, 0));
  CHECK(matmul(zeros({0, 4}), zeros({4, 3})).shape() == Shape{0, 3});
  CHECK(matmul(zeros({0, 2, 4}), zeros({4, 3})).shape() == Shape{0, 2, 3});
}

TEST_CASE("matmul: gradient values by hand") {
  Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2}, TensorOptions(kFloat64, kCPU, true));
  Tensor b = from_vector<double>({5, 6, 7, 8}, {2, 2}, TensorOptions(kFloat64, kCPU, true));
  matmul(a, b).sum().backward();
  // dL/da = 1 @ b^T: each row = row sums of b = [11, 15]; dL/db = a^T @ 1: each column = column sums of a
  CHECK(vals(a.grad()) == V{11, 15, 11, 15});
  CHECK(vals(b.grad()) == V{4, 4, 6, 6});
  Tensor u = from_vector<double>({1, 2, 3}, {3}, TensorOptions(kFloat64, kCPU, true));
  Tensor v = from_vector<double>({4, 5, 6}, {3}, TensorOptions(kFloat64, kCPU, true));
  matmul(u, v).backward();
  CHECK(vals(u.grad()) == V{4, 5, 6});
  CHECK(vals(v.grad()) == V{1, 2, 3});
}

TEST_CASE("matmul: gradcheck every form") {
  auto mm = [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); };
  check_grad(mm, {rnd({4}, 30), rnd({4}, 31)});                 // 1-D . 1-D
  check_grad(mm, {rnd({3}, 32), rnd({3, 2}, 33)});              // 1-D . 2-D
  check_grad(mm, {rnd({2, 3}, 34), rnd({3}, 35)});              // 2-D . 1-D
  check_grad(mm, {rnd({2, 3}, 36), rnd({3, 4}, 37)});           // 2-D . 2-D
  check_grad(mm, {rnd({2, 1, 3, 4}, 38), rnd({5, 4, 2}, 39)});  // batched, broadcast
  check_grad(mm, {rnd({3, 2, 4}, 40), rnd({4, 3}, 41)});        // batched . matrix
  check_grad(mm, {rnd({2, 3}, 42), rnd({4, 3, 2}, 43)});        // matrix . batched
  check_grad(mm, {rnd({4}, 44), rnd({2, 4, 3}, 45)});           // 1-D . batched
  check_grad(mm, {rnd({2, 3, 4}, 46), rnd({4}, 47)});           // batched . 1-D
  // Transposed views as inputs.
  check_grad([](const std::vector<Tensor>& x) { return matmul(x[0].t(), x[1].t()); },
             {rnd({3, 2}, 48), rnd({4, 3}, 49)});
  check_grad([](const std::vector<Tensor>& x) { return matmul(x[0], x[0].transpose(-1, -2)); }, {rnd({2, 3, 4}, 50)});
  // Only one side requires grad.
  Tensor fixed = rnd({3, 2}, 51);
  check_grad([fixed](const std::vector<Tensor>& x) { return matmul(x[0], fixed); }, {rnd({4, 3}, 52)});
  check_grad([fixed](const std::vector<Tensor>& x) { return matmul(fixed.t(), x[0]); }, {rnd({3, 5}, 53)});
}

TEST_CASE("matmul: error messages") {
  std::string m = error_of([] { matmul(zeros({2, 3}), zeros({4, 5})); });
  INFO(m);
  CHECK(contains(m, "matmul"));
  CHECK(contains(m, "[2, 3]"));
  CHECK(contains(m, "[4, 5]"));
  CHECK(contains(m, "3 vs 4"));
  CHECK_THROWS_AS(matmul(zeros({2, 3}), zeros({4, 5})), ShapeError);
  CHECK_THROWS_AS(matmul(zeros({3}), zeros({4})), ShapeError);
  // 1-D forms name the caller's shapes, not internally unsqueezed ones.
  std::string v = error_of([] { matmul(zeros({3}), zeros({4})); });
  CHECK(contains(v, "[3] and [4]"));
  std::string v2 = error_of([] { matmul(zeros({2, 3}), zeros({2})); });
  CHECK(contains(v2, "[2, 3] and [2]"));
  CHECK_THROWS_AS(matmul(zeros({3}), zeros({4, 2})), ShapeError);
  CHECK_THROWS_AS(matmul(zeros({2, 3}), zeros({2})), ShapeError);
  CHECK_THROWS_AS(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})), ShapeError);  // batch 2 vs 3
  CHECK_THROWS_AS(matmul(scalar_tensor(1), zeros({2})), ShapeError);

  std::string d = error_of([] { matmul(zeros({2, 2}), zeros({2, 2}, kFloat64)); });
  CHECK(contains(d, "matmul"));
  CHECK(contains(d, "f32"));
  CHECK(contains(d, "f64"));
  CHECK_THROWS_AS(matmul(zeros({2, 2}), zeros({2, 2}, kFloat64)), DTypeError);
  CHECK_THROWS_AS(matmul(zeros({2, 2}, kFloat16), zeros({2, 2}, kBFloat16)), DTypeError);

  std::string i = error_of([] { matmul(zeros({2, 2}, kInt64), zeros({2, 2}, kInt64)); });
  CHECK(contains(i, "matmul"));
  CHECK(contains(i, "i64"));
  CHECK_THROWS_AS(matmul(zeros({2, 2}, kInt32), zeros({2, 2}, kInt32)), DTypeError);
  CHECK_THROWS_AS(matmul(zeros({2}, kInt64), zeros({2}, kInt64)), DTypeError);
  CHECK_THROWS_AS(matmul(zeros({2, 2}), zeros({2, 2}, Device("cpu:1"))), DeviceError);
}

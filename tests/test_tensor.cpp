// SPDX-License-Identifier: MIT
// Tensor core: factories, seeded random factories, from_vector/from_blob,
// item/to_vector, printing, contiguous/clone, virtual-device moves, errors.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>

#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/memory/allocator.h>
#include "test_util.h"

using namespace snug;
using snug::testing::contains;
using snug::testing::error_of;

TEST_CASE("empty: shape, strides, dtype, device") {
  Tensor t = empty({2, 3, 4});
  CHECK(t.defined());
  CHECK(t.dim() == 3);
  CHECK(t.shape() == Shape{2, 3, 4});
  CHECK(t.strides() == Strides{12, 4, 1});
  CHECK(t.numel() == 24);
  CHECK(t.dtype() == kFloat32);
  CHECK(t.device() == kCPU);
  CHECK(t.is_contiguous());
  CHECK(t.offset() == 0);
  CHECK(t.nbytes() == 96);
  CHECK_FALSE(t.requires_grad());
  CHECK(t.size(-1) == 4);
  CHECK(t.size(0) == 2);
  CHECK(t.stride(-2) == 4);
  CHECK_THROWS_AS(t.size(3), IndexError);
  CHECK_THROWS_AS(t.size(-4), IndexError);

  Tensor s = empty({});
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  Tensor z = empty({3, 0, 2}, kInt64);
  CHECK(z.numel() == 0);
  CHECK(z.nbytes() == 0);
  CHECK(z.dtype() == kInt64);
}

TEST_CASE("zeros/ones/full/scalar_tensor values in several dtypes") {
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kInt8, kUInt8}) {
    INFO(dtype_name(d));
    CHECK(zeros({2, 2}, d).to_vector<double>() == std::vector<double>(4, 0.0));
    CHECK(ones({3}, d).to_vector<double>() == std::vector<double>(3, 1.0));
    CHECK(full({2}, 7, d).to_vector<double>() == std::vector<double>{7, 7});
    CHECK(zeros({2}, d).dtype() == d);
  }
  CHECK(full({2}, 2.5, kFloat32).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
  CHECK(full({2}, 2.7, kInt32).to_vector<int32_t>() == std::vector<int32_t>{2, 2});  // truncates
  CHECK(full({2}, 0.1, kFloat16).to_vector<double>()[0] == 0.0999755859375);
  CHECK(full({2}, -3, kBool).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(zeros({2}, kBool).to_vector<bool>() == std::vector<bool>{false, false});
  Tensor s = scalar_tensor(4.5);
  CHECK(s.dim() == 0);
  CHECK(s.item() == 4.5);
  Tensor g = ones({2}, TensorOptions(kFloat32, kCPU, true));
  CHECK(g.requires_grad());
  CHECK(g.is_leaf());
  CHECK_THROWS_AS(zeros({2}, TensorOptions(kInt64, kCPU, true)), AutogradError);
}

TEST_CASE("*_like factories keep shape, dtype and device") {
  Tensor x = full({2, 3}, 5, TensorOptions(kInt32, Device("cpu:1")));
  for (Tensor y : {empty_like(x), zeros_like(x), ones_like(x), full_like(x, 9)}) {
    CHECK(y.shape() == Shape{2, 3});
    CHECK(y.dtype() == kInt32);
    CHECK(y.device() == Device("cpu:1"));
  }
  CHECK(zeros_like(x).to_vector<int32_t>() == std::vector<int32_t>(6, 0));
  CHECK(ones_like(x).to_vector<int32_t>() == std::vector<int32_t>(6, 1));
  CHECK(full_like(x, 9).to_vector<int32_t>() == std::vector<int32_t>(6, 9));
}

TEST_CASE("arange") {
  Tensor a = arange(5);
  CHECK(a.dtype() == kInt64);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(2, 5).to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  CHECK(arange(1, 2, 0.25, kFloat32).to_vector<float>() == std::vector<float>{1, 1.25f, 1.5f, 1.75f});
  CHECK(arange(5, 0, -2).to_vector<int64_t>() == std::vector<int64_t>{5, 3, 1});
  CHECK(arange(0, 1, 0.3, kFloat64).numel() == 4);  // 0, .3, .6, .9
  CHECK(arange(0).numel() == 0);
  CHECK(arange(3, 1).numel() == 0);
  CHECK(arange(3, 1).shape() == Shape{0});
  CHECK_THROWS_AS(arange(0, 5, 0), ValueError);
  CHECK_THROWS_AS(arange(0, INFINITY), ValueError);
}

TEST_CASE("eye") {
  Tensor e = eye(3);
  CHECK(e.shape() == Shape{3, 3});
  CHECK(e.dtype() == kFloat32);
  CHECK(e.to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(eye(2, kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 1});
  CHECK(eye(0).numel() == 0);
  CHECK_THROWS_AS(eye(-1), ShapeError);
}

TEST_CASE("rand: range and rough uniformity") {
  manual_seed(1);
  Tensor r = rand({10000}, kFloat64);
  auto v = r.to_vector<double>();
  double sum = 0, mn = 1, mx = 0;
  int below_quarter = 0;
  for (double x : v) {
    CHECK_MESSAGE((x >= 0 && x < 1), "value ", x);
    sum += x;
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    below_quarter += x < 0.25;
  }
  CHECK(sum / 10000 == doctest::Approx(0.5).epsilon(0.03));
  CHECK(mn < 0.01);
  CHECK(mx > 0.99);
  CHECK(below_quarter > 2300);
  CHECK(below_quarter < 2700);
  CHECK(rand({4}, kFloat16).dtype() == kFloat16);
  CHECK(rand({4}, kBFloat16).to_vector<double>()[0] < 1.0);
  CHECK_THROWS_AS(rand({2}, kInt32), DTypeError);
}

TEST_CASE("randn: mean 0, variance 1") {
  Generator g(2024);
  auto v = randn({20000}, kFloat64, &g).to_vector<double>();
  double s = 0, s2 = 0;
  int beyond2 = 0;
  for (double x : v) {
    s += x;
    s2 += x * x;
    beyond2 += std::fabs(x) > 2;
  }
  double mean = s / v.size(), var = s2 / v.size() - mean * mean;
  CHECK(std::fabs(mean) < 0.03);
  CHECK(var == doctest::Approx(1.0).epsilon(0.04));
  // P(|x| > 2) = 4.55%
  CHECK(beyond2 > 0.035 * v.size());
  CHECK(beyond2 < 0.056 * v.size());
  CHECK_THROWS_AS(randn({2}, kInt64), DTypeError);
}

TEST_CASE("randint: [low, high), every value hit, dtype") {
  Generator g(5);
  Tensor r = randint(-3, 4, {5000}, kInt64, &g);
  CHECK(r.dtype() == kInt64);
  auto v = r.to_vector<int64_t>();
  std::set<int64_t> seen(v.begin(), v.end());
  CHECK(seen == std::set<int64_t>{-3, -2, -1, 0, 1, 2, 3});
  Tensor r32 = randint(0, 2, {100}, kInt32, &g);
  CHECK(r32.dtype() == kInt32);
  for (int32_t x : r32.to_vector<int32_t>()) CHECK((x == 0 || x == 1));
  CHECK(randint(7, 8, {10}).to_vector<int64_t>() == std::vector<int64_t>(10, 7));
  CHECK_THROWS_AS(randint(3, 3, {2}), ValueError);
  CHECK_THROWS_AS(randint(4, 1, {2}), ValueError);
}

TEST_CASE("random factories: seeded reproducibility") {
  manual_seed(42);
  auto a = rand({100}).to_vector<float>();
  auto b = randn({50}).to_vector<float>();
  auto c = randint(0, 1000, {30}).to_vector<int64_t>();
  manual_seed(42);
  CHECK(rand({100}).to_vector<float>() == a);
  CHECK(randn({50}).to_vector<float>() == b);
  CHECK(randint(0, 1000, {30}).to_vector<int64_t>() == c);
  // Successive draws from one stream differ.
  CHECK(rand({100}).to_vector<float>() != a);
  // A different seed gives different numbers.
  manual_seed(43);
  CHECK(rand({100}).to_vector<float>() != a);
  // Explicit generators are independent of the default one and of each other.
  Generator g1(9), g2(9), g3(10);
  auto x1 = rand({64}, kFloat32, &g1).to_vector<float>();
  manual_seed(0);
  (void)rand({1000});
  CHECK(rand({64}, kFloat32, &g2).to_vector<float>() == x1);
  CHECK(rand({64}, kFloat32, &g3).to_vector<float>() != x1);
  // Restoring a generator's state replays the draw.
  Generator g4(77);
  auto st = g4.get_state();
  auto y1 = randn({33}, kFloat64, &g4).to_vector<double>();
  g4.set_state(st);
  CHECK(randn({33}, kFloat64, &g4).to_vector<double>() == y1);
}

TEST_CASE("from_vector: shape, dtype conversion, errors") {
  Tensor t = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.dtype() == kFloat32);
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor d = from_vector<int64_t>({1, -2}, {2}, kFloat64);
  CHECK(d.dtype() == kFloat64);
  CHECK(d.to_vector<double>() == std::vector<double>{1, -2});
  Tensor one = from_vector<int32_t>({4, 5, 6});
  CHECK(one.shape() == Shape{3});
  CHECK(one.dtype() == kInt32);
  Tensor b = from_vector<bool>({true, false}, {2});
  CHECK(b.dtype() == kBool);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false});
  Tensor e = from_vector<float>({}, {0});
  CHECK(e.numel() == 0);
  Tensor on1 = from_vector<float>({1, 2}, {2}, TensorOptions(kFloat32, Device("cpu:1")));
  CHECK(on1.device() == Device("cpu:1"));
  CHECK(on1.to_vector<float>() == std::vector<float>{1, 2});
  Tensor rg = from_vector<double>({1, 2}, {2}, TensorOptions(kFloat64, kCPU, true));
  CHECK(rg.requires_grad());

  std::string m = error_of([] { from_vector<float>({1, 2, 3}, {2, 2}); });
  CHECK(contains(m, "from_vector"));
  CHECK(contains(m, "[2, 2]"));
  CHECK(contains(m, "3"));
  CHECK_THROWS_AS(from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
}

TEST_CASE("from_blob wraps without copying; deleter runs when the last view dies") {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  int deleted = 0;
  size_t before = memory::allocated(kCPU);
  {
    Tensor t = from_blob(buf, {2, 3}, kFloat32, [&](void* p) {
      CHECK(p == static_cast<void*>(buf));
      ++deleted;
    });
    CHECK(memory::allocated(kCPU) == before);  // not the allocator's memory
    CHECK(t.data_ptr() == static_cast<void*>(buf));
    CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
    buf[4] = 50;  // visible through the tensor
    CHECK(t.to_vector<float>()[4] == 50);
    t.fill_(0.5);  // and writes go to the buffer
    CHECK(buf[0] == 0.5f);
    Tensor v = t.select(0, 1);
    t = Tensor();
    CHECK(deleted == 0);  // v still holds the storage
    CHECK(v.to_vector<float>() == std::vector<float>{0.5f, 0.5f, 0.5f});
  }
  CHECK(deleted == 1);
  // Without a deleter: nothing runs, nothing is freed.
  int64_t ibuf[2] = {7, 8};
  { CHECK(from_blob(ibuf, {2}, kInt64).to_vector<int64_t>() == std::vector<int64_t>{7, 8}); }
  CHECK(ibuf[1] == 8);
  CHECK_THROWS_AS(from_blob(buf, {-1, 2}, kFloat32), ShapeError);
}

TEST_CASE("from_blob_copy copies (and converts)") {
  double buf[4] = {1.5, -2, 3, 4};
  Tensor t = from_blob_copy(buf, {2, 2}, kFloat64, kFloat64);
  CHECK(t.data_ptr() != static_cast<void*>(buf));
  buf[0] = 100;
  CHECK(t.to_vector<double>() == std::vector<double>{1.5, -2, 3, 4});
  Tensor f = from_blob_copy(buf, {4}, kFloat64, kFloat32);  // source f64, result f32
  CHECK(f.dtype() == kFloat32);
  CHECK(f.to_vector<float>() == std::vector<float>{100, -2, 3, 4});
  Tensor i = from_blob_copy(buf, {4}, kFloat64, kInt32);
  CHECK(i.to_vector<int32_t>() == std::vector<int32_t>{100, -2, 3, 4});
}

TEST_CASE("item") {
  CHECK(scalar_tensor(3.25).item() == 3.25);
  CHECK(full({1, 1, 1}, -2, kInt64).item() == -2);
  CHECK(full({1}, 0.1, kFloat16).item() == 0.0999755859375);
  CHECK(full({}, 1, kBool).item() == 1);
  CHECK(full({}, 7, kInt32).item<int>() == 7);
  // An element picked out of a bigger tensor (non-zero offset).
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(x.select(0, 1).select(0, 2).item() == 6);
  CHECK(x.t().select(0, 2).select(0, 0).item() == 3);
  CHECK(full({1}, 5, Device("cpu:1")).item() == 5);

  std::string m = error_of([&] { x.item(); });
  CHECK(contains(m, "item"));
  CHECK(contains(m, "[2, 3]"));
  CHECK_THROWS_AS(x.item(), ValueError);
  CHECK_THROWS_AS(empty({0}).item(), ValueError);
}

// NOTE [ Exact integer reads ]: integers past 2^53 do not survive a double.
TEST_CASE("item<T> and to_vector<T> read integer tensors exactly") {
  const int64_t big = (int64_t(1) << 53) + 1, max = INT64_MAX, min = INT64_MIN;
  const std::vector<int64_t> vals = {big, max, min, -1, 0, -big};
  Tensor t = from_vector(vals);
  for (size_t i = 0; i < vals.size(); ++i) {
    INFO("value ", vals[i]);
    CHECK(t.select(0, int64_t(i)).item<int64_t>() == vals[i]);
    // From another CPU device and through a strided view as well.
    CHECK(t.to(Device("cpu:1")).select(0, int64_t(i)).item<int64_t>() == vals[i]);
  }
  CHECK(t.to_vector<int64_t>() == vals);
  CHECK(t.slice(0, 0, 6, 2).to_vector<int64_t>() == std::vector<int64_t>{big, min, 0});
  CHECK(t.to(Device("cpu:1")).to_vector<int64_t>() == vals);

  Tensor i32 = from_vector<int32_t>({INT32_MAX, INT32_MIN, -1});
  CHECK(i32.select(0, 0).item<int32_t>() == INT32_MAX);
  CHECK(i32.select(0, 1).item<int32_t>() == INT32_MIN);
  CHECK(i32.select(0, 2).item<int32_t>() == -1);
  CHECK(i32.select(0, 1).item<int64_t>() == INT32_MIN);
  CHECK(i32.to_vector<int64_t>() == std::vector<int64_t>{INT32_MAX, INT32_MIN, -1});
  Tensor u8 = from_vector<uint8_t>({255, 0, 7});
  CHECK(u8.select(0, 0).item<uint8_t>() == 255);
  CHECK(u8.select(0, 0).item<int64_t>() == 255);
  CHECK(u8.select(0, 2).item<int32_t>() == 7);
  Tensor i8 = from_vector<int8_t>({-128, 127});
  CHECK(i8.select(0, 0).item<int8_t>() == -128);
  CHECK(i8.select(0, 1).item<int64_t>() == 127);
  Tensor b = from_vector<bool>({true, false});
  CHECK(b.select(0, 0).item<bool>() == true);
  CHECK(b.select(0, 1).item<bool>() == false);
  CHECK(b.select(0, 0).item<int64_t>() == 1);
  // Floating tensors read as integers truncate toward zero, as C++ and PyTorch.
  CHECK(full({}, -2.75, kFloat64).item<int64_t>() == -2);
  CHECK(full({}, 255.5, kFloat32).item<uint8_t>() == 255);
  CHECK(full({}, 0x1p62, kFloat64).item<int64_t>() == (int64_t(1) << 62));
  CHECK(full({}, -0x1p63, kFloat64).item<int64_t>() == min);
  CHECK(full({}, 0.5, kFloat64).item<bool>() == true);
  CHECK(full({}, 3.5, kFloat32).item<float>() == 3.5f);

  // A value the type cannot hold is an error naming the type and the value
  // (LibTorch's checked conversion), never a wrapped or undefined result.
  std::string m = error_of<ValueError>([&] { from_vector<int64_t>({300}).item<uint8_t>(); });
  CHECK(contains(m, "u8"));
  CHECK(contains(m, "300"));
  CHECK_THROWS_AS(t.select(0, 1).item<int32_t>(), ValueError);
  CHECK_THROWS_AS(from_vector<int64_t>({-1}).item<uint8_t>(), ValueError);
  CHECK_THROWS_AS(from_vector<int32_t>({128}).item<int8_t>(), ValueError);
  CHECK_THROWS_AS(full({}, 0x1p63, kFloat64).item<int64_t>(), ValueError);
  CHECK_THROWS_AS(full({}, NAN, kFloat32).item<int32_t>(), ValueError);
  CHECK_THROWS_AS(full({}, -1.0, kFloat32).item<uint8_t>(), ValueError);
  CHECK_THROWS_AS(full({}, 1e30, kFloat64).item<int64_t>(), ValueError);
  CHECK_THROWS_AS(t.item<int64_t>(), ValueError);  // six elements
}

TEST_CASE("to_vector reads views in logical order and converts") {
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(x.t().to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(x.slice(1, 0, 3, 2).to_vector<int64_t>() == std::vector<int64_t>{1, 3, 4, 6});
  CHECK(x.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(x.to_vector<bool>() == std::vector<bool>(6, true));
  CHECK(x.expand({2, 2, 3}).to_vector<float>().size() == 12);
}

TEST_CASE("printing") {
  Tensor x = from_vector<float>({1, 2.5f, -3, 4, 5, 6}, {2, 3});
  std::string s = x.str();
  INFO(s);
  CHECK(contains(s, "2.5"));
  CHECK(contains(s, "-3"));
  CHECK(contains(s, "[[1, 2.5, -3],"));
  CHECK(contains(s, "[4, 5, 6]]"));
  CHECK(contains(s, "shape=[2, 3]"));
  CHECK(contains(s, "dtype=f32"));
  CHECK_FALSE(contains(s, "device"));
  CHECK_FALSE(contains(s, "requires_grad"));

  std::ostringstream os;
  os << x;
  CHECK(os.str() == s);

  std::string big = arange(10).str();
  INFO(big);
  CHECK(contains(big, "[0, 1, 2, ..., 7, 8, 9]"));
  CHECK(contains(big, "dtype=i64"));
  CHECK_FALSE(contains(big, ", 4,"));
  CHECK_FALSE(contains(big, ", 5,"));

  std::string b = from_vector<bool>({true, false}, {2}).str();
  CHECK(contains(b, "[true, false]"));
  CHECK(contains(b, "dtype=bool"));

  std::string sc = scalar_tensor(5, kInt32).str();
  CHECK(contains(sc, "tensor(5,"));
  CHECK(contains(sc, "shape=[]"));

  std::string dev = ones({2}, Device("cpu:1")).str();
  CHECK(contains(dev, "device=cpu:1"));

  std::string rg = ones({2}, TensorOptions(kFloat64, kCPU, true)).str();
  CHECK(contains(rg, "requires_grad=true"));
  CHECK(contains(rg, "dtype=f64"));

  CHECK(contains(x.t().str(), "[[1, 4],"));  // views print in logical order
  CHECK(contains(empty({0}).str(), "[]"));
  CHECK(Tensor().str() == "Tensor(undefined)");
}

TEST_CASE("contiguous copies only when needed; clone always copies") {
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor c = x.contiguous();
  CHECK(c.data_ptr() == x.data_ptr());
  CHECK(c.storage() == x.storage());

  Tensor t = x.t();
  CHECK_FALSE(t.is_contiguous());
  Tensor tc = t.contiguous();
  CHECK(tc.is_contiguous());
  CHECK(tc.data_ptr() != x.data_ptr());
  CHECK(tc.strides() == Strides{2, 1});
  CHECK(tc.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});

  // A size-1 dim with an odd stride still counts as contiguous.
  Tensor row = x.slice(0, 1, 2);  // [1, 3], offset 3
  CHECK(row.is_contiguous());
  CHECK(row.contiguous().data_ptr() == row.data_ptr());
  // Expanded tensors are not contiguous.
  Tensor e = from_vector<float>({1, 2}, {2, 1}).expand({2, 3});
  CHECK_FALSE(e.is_contiguous());
  CHECK(e.contiguous().to_vector<float>() == std::vector<float>{1, 1, 1, 2, 2, 2});

  Tensor k = x.clone();
  CHECK(k.data_ptr() != x.data_ptr());
  CHECK(k.to_vector<float>() == x.to_vector<float>());
  k.fill_(0);
  CHECK(x.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(t.clone().is_contiguous());
  CHECK(t.clone().to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("to(device) between cpu and virtual devices") {
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2});
  size_t before = memory::allocated(Device("cpu:1"));
  Tensor y = x.to("cpu:1");
  CHECK(y.device() == Device("cpu:1"));
  CHECK(y.device().index == 1);
  CHECK(memory::allocated(Device("cpu:1")) > before);
  CHECK(y.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(y.storage() != x.storage());
  Tensor back = y.to(kCPU);
  CHECK(back.device() == kCPU);
  CHECK(back.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(x.to(kCPU).is_same(x));  // same device: no copy
  CHECK(y.to(Device("cpu:2")).device() == Device("cpu:2"));
  // A non-contiguous source arrives in logical order.
  CHECK(x.t().to("cpu:1").to_vector<float>() == std::vector<float>{1, 3, 2, 4});
  // Differentiable: the gradient comes back to the source device.
  Tensor w = from_vector<float>({1, 2}, {2}, TensorOptions(kFloat32, kCPU, true));
  Tensor z = (w.to("cpu:1") * 3.0).sum();
  z.backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().device() == kCPU);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{3, 3});
  y = Tensor();
  back = Tensor();
  z = Tensor();
  CHECK(memory::allocated(Device("cpu:1")) == before);
}

TEST_CASE("version counter: shared by views, bumped by in-place ops") {
  Tensor x = zeros({4});
  Tensor v = x.slice(0, 1, 3);
  uint32_t v0 = x.version();
  v.fill_(1);
  CHECK(x.version() == v0 + 1);
  CHECK(v.version() == x.version());
  x.zero_();
  CHECK(v.version() == v0 + 2);
  Tensor c = x.clone();
  CHECK(c.version() == 0);
}

TEST_CASE("data<T> checks the dtype") {
  Tensor x = zeros({2}, kInt32);
  CHECK(x.data<int32_t>() == x.data_ptr());
  CHECK_THROWS_AS(x.data<float>(), DTypeError);
  std::string m = error_of([&] { x.data<int64_t>(); });
  CHECK(contains(m, "i32"));
  CHECK(contains(m, "i64"));
}

TEST_CASE("errors: negative shapes, undefined tensors") {
  for (auto f : std::vector<std::function<void()>>{[] {
                                                     empty({2, -1});
                                                   },
                                                   [] { zeros({-3}); },
                                                   [] {
                                                     ones({1, -2});
                                                   },
                                                   [] { full({-1}, 1.0); }, [] { rand({-2}); }}) {
    std::string m = error_of(f);
    INFO(m);
    CHECK(contains(m, "negative"));
    CHECK_THROWS_AS(f(), ShapeError);
  }
  CHECK(contains(error_of([] { zeros({2, -1}); }), "[2, -1]"));

  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK_THROWS_AS(u.shape(), ValueError);
  CHECK_THROWS_AS(u.numel(), ValueError);
  CHECK_THROWS_AS(u.item(), ValueError);
  CHECK_THROWS_AS(u.dtype(), ValueError);
  CHECK_THROWS_AS(u.to_vector<float>(), ValueError);
  CHECK_THROWS_AS(u.clone(), ValueError);
  CHECK_THROWS_AS(u + ones({2}), ValueError);
  CHECK_THROWS_AS(ones({2}) * u, ValueError);
  CHECK(contains(error_of([&] { u.numel(); }), "undefined"));
}

// SPDX-License-Identifier: MIT
// DType: sizes, names, parsing, the promotion table, dispatch errors, and
// value conversions through Tensor::to(dtype): f16/bf16 rounding (ties to
// even, overflow, subnormals), float -> int truncation, int narrowing, bool.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include <snug/autograd/ops.h>
#include <snug/core/dtype.h>
#include <snug/core/tensor.h>

using namespace snug;

namespace {
const DType kAll[] = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt8, kUInt8, kInt32, kInt64, kBool};

std::vector<double> conv(const std::vector<double>& v, DType to) {
  return from_vector<double>(v, {static_cast<int64_t>(v.size())}, kFloat64).to(to).to_vector<double>();
}
std::vector<double> conv_f32(const std::vector<float>& v, DType to) {
  return from_vector<float>(v, {static_cast<int64_t>(v.size())}).to(to).to_vector<double>();
}
}  // namespace

TEST_CASE("dtype: sizes") {
  CHECK(dtype_size(kFloat32) == 4);
  CHECK(dtype_size(kFloat16) == 2);
  CHECK(dtype_size(kBFloat16) == 2);
  CHECK(dtype_size(kFloat64) == 8);
  CHECK(dtype_size(kInt8) == 1);
  CHECK(dtype_size(kUInt8) == 1);
  CHECK(dtype_size(kInt32) == 4);
  CHECK(dtype_size(kInt64) == 8);
  CHECK(dtype_size(kBool) == 1);
  // Storage types really have these sizes (the kernels reinterpret bytes).
  CHECK(sizeof(Half) == 2);
  CHECK(sizeof(BFloat16) == 2);
  CHECK(sizeof(bool) == 1);
  CHECK(zeros({3, 5}, kFloat16).nbytes() == 30);
  CHECK(zeros({3, 5}, kInt64).element_size() == 8);
}

TEST_CASE("dtype: names and printing") {
  CHECK(std::string(dtype_name(kFloat32)) == "f32");
  CHECK(std::string(dtype_name(kFloat16)) == "f16");
  CHECK(std::string(dtype_name(kBFloat16)) == "bf16");
  CHECK(std::string(dtype_name(kFloat64)) == "f64");
  CHECK(std::string(dtype_name(kInt8)) == "i8");
  CHECK(std::string(dtype_name(kUInt8)) == "u8");
  CHECK(std::string(dtype_name(kInt32)) == "i32");
  CHECK(std::string(dtype_name(kInt64)) == "i64");
  CHECK(std::string(dtype_name(kBool)) == "bool");
  std::ostringstream os;
  os << kBFloat16 << "," << kBool;
  CHECK(os.str() == "bf16,bool");
}

TEST_CASE("dtype: floating/integral classification") {
  CHECK(is_floating(kFloat32));
  CHECK(is_floating(kFloat16));
  CHECK(is_floating(kBFloat16));
  CHECK(is_floating(kFloat64));
  for (DType d : {kInt8, kUInt8, kInt32, kInt64, kBool}) {
    CHECK_FALSE(is_floating(d));
    CHECK(is_integral(d));
  }
  static_assert(std::is_same_v<compute_t<Half>, float>);
  static_assert(std::is_same_v<compute_t<BFloat16>, float>);
  static_assert(std::is_same_v<compute_t<double>, double>);
  static_assert(std::is_same_v<compute_t<int32_t>, int32_t>);
  static_assert(dtype_v<int64_t> == kInt64 && dtype_v<bool> == kBool && dtype_v<BFloat16> == kBFloat16);
}

TEST_CASE("dtype: parse_dtype accepts short and long names") {
  CHECK(parse_dtype("f32") == kFloat32);
  CHECK(parse_dtype("float32") == kFloat32);
  CHECK(parse_dtype("float") == kFloat32);
  CHECK(parse_dtype("f16") == kFloat16);
  CHECK(parse_dtype("float16") == kFloat16);
  CHECK(parse_dtype("half") == kFloat16);
  CHECK(parse_dtype("bf16") == kBFloat16);
  CHECK(parse_dtype("bfloat16") == kBFloat16);
  CHECK(parse_dtype("f64") == kFloat64);
  CHECK(parse_dtype("float64") == kFloat64);
  CHECK(parse_dtype("double") == kFloat64);
  CHECK(parse_dtype("i8") == kInt8);
  CHECK(parse_dtype("int8") == kInt8);
  CHECK(parse_dtype("u8") == kUInt8);
  CHECK(parse_dtype("uint8") == kUInt8);
  CHECK(parse_dtype("i32") == kInt32);
  CHECK(parse_dtype("int32") == kInt32);
  CHECK(parse_dtype("i64") == kInt64);
  CHECK(parse_dtype("int64") == kInt64);
  CHECK(parse_dtype("long") == kInt64);
  CHECK(parse_dtype("bool") == kBool);
  // Every printed name parses back.
  for (DType d : kAll) CHECK(parse_dtype(dtype_name(d)) == d);
}

TEST_CASE("dtype: parse_dtype rejects unknown names with a message naming them") {
  for (const char* s : {"f8", "", "F32", "int", "float128", "bfloat", " f32"}) {
    INFO("input: \"" << s << "\"");
    bool threw = false;
    try {
      parse_dtype(s);
    } catch (const DTypeError& e) {
      threw = true;
      std::string msg = e.what();
      CHECK(msg.find(std::string("\"") + s + "\"") != std::string::npos);
      CHECK(msg.find("parse_dtype") != std::string::npos);
    }
    CHECK(threw);
  }
}

TEST_CASE("dtype: promote_types full table") {
  // Rows/cols in kAll order: f32 f16 bf16 f64 i8 u8 i32 i64 bool. Written by hand
  // from the rules: bool < integers < floating; f16 with bf16 -> f32;
  // i8 with u8 -> i32 (the narrowest signed type holding both); wider wins.
  using D = DType;
  const D F = D::f32, H = D::f16, B = D::bf16, W = D::f64, I8 = D::i8, U8 = D::u8, I32 = D::i32, I64 = D::i64,
          Z = D::b8;
  const D table[9][9] = {
      /* f32 */ {F, F, F, W, F, F, F, F, F},
      /* f16 */ {F, H, F, W, H, H, H, H, H},
      /* bf16*/ {F, F, B, W, B, B, B, B, B},
      /* f64 */ {W, W, W, W, W, W, W, W, W},
      /* i8  */ {F, H, B, W, I8, I32, I32, I64, I8},
      /* u8  */ {F, H, B, W, I32, U8, I32, I64, U8},
      /* i32 */ {F, H, B, W, I32, I32, I32, I64, I32},
      /* i64 */ {F, H, B, W, I64, I64, I64, I64, I64},
      /* bool*/ {F, H, B, W, I8, U8, I32, I64, Z},
  };
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 9; ++j) {
      INFO(dtype_name(kAll[i]) << " with " << dtype_name(kAll[j]));
      CHECK(promote_types(kAll[i], kAll[j]) == table[i][j]);
    }
}

TEST_CASE("dtype: dispatch helpers name the op on unsupported dtypes") {
  int seen = 0;
  dispatch_all(kInt32, "probe", [&]<class T>() { seen = std::is_same_v<T, int32_t> ? 1 : -1; });
  CHECK(seen == 1);
  dispatch_floating(kBFloat16, "probe", [&]<class T>() { seen = std::is_same_v<T, BFloat16> ? 2 : -1; });
  CHECK(seen == 2);
  try {
    dispatch_floating(kInt64, "myop", [&]<class T>() {});
    FAIL("expected DTypeError");
  } catch (const DTypeError& e) {
    std::string m = e.what();
    CHECK(m.find("myop") != std::string::npos);
    CHECK(m.find("i64") != std::string::npos);
  }
  try {
    dispatch_numeric(kBool, "otherop", [&]<class T>() {});
    FAIL("expected DTypeError");
  } catch (const DTypeError& e) {
    std::string m = e.what();
    CHECK(m.find("otherop") != std::string::npos);
    CHECK(m.find("bool") != std::string::npos);
  }
}

TEST_CASE("to(dtype): f32 -> f16 rounds to nearest, ties to even") {
  const double u = std::ldexp(1.0, -10);  // f16 ulp at 1
  std::vector<float> in = {
      1.0f,
      static_cast<float>(1 + u),              // exact
      static_cast<float>(1 + u / 2),          // tie -> even (1.0)
      static_cast<float>(1 + 3 * u / 2),      // tie -> even (1 + 2u)
      static_cast<float>(1 + u / 2 + u / 8),  // above the tie -> up
      0.1f,                                   // 0x2E66 = 0.0999755859375
      65504.0f,                               // largest finite half
      65519.0f,                               // below the overflow threshold -> 65504
      65520.0f,                               // rounds to inf
      -70000.0f,
      static_cast<float>(std::ldexp(1.0, -24)),      // smallest subnormal, exact
      static_cast<float>(std::ldexp(1.0, -25)),      // tie between 0 and 2^-24 -> 0
      static_cast<float>(3 * std::ldexp(1.0, -26)),  // 0.75 * 2^-24 -> 2^-24
      -0.0f,
  };
  auto out = conv_f32(in, kFloat16);
  CHECK(out[0] == 1.0);
  CHECK(out[1] == 1 + u);
  CHECK(out[2] == 1.0);
  CHECK(out[3] == 1 + 2 * u);
  CHECK(out[4] == 1 + u);
  CHECK(out[5] == 0.0999755859375);
  CHECK(out[6] == 65504.0);
  CHECK(out[7] == 65504.0);
  CHECK(out[8] == std::numeric_limits<double>::infinity());
  CHECK(out[9] == -std::numeric_limits<double>::infinity());
  CHECK(out[10] == std::ldexp(1.0, -24));
  CHECK(out[11] == 0.0);
  CHECK(out[12] == std::ldexp(1.0, -24));
  CHECK(out[13] == 0.0);
  CHECK(std::signbit(out[13]));
  // NaN stays NaN.
  auto nan = conv_f32({std::numeric_limits<float>::quiet_NaN()}, kFloat16);
  CHECK(std::isnan(nan[0]));
}

TEST_CASE("to(dtype): f32 -> bf16 rounds to nearest, ties to even") {
  const double u = std::ldexp(1.0, -7);  // bf16 ulp at 1
  std::vector<float> in = {static_cast<float>(1 + u / 2),
                           static_cast<float>(1 + 3 * u / 2),
                           static_cast<float>(1 + u / 2 + u / 16),
                           0.1f,
                           3.0e38f,
                           -2.5f};
  auto out = conv_f32(in, kBFloat16);
  CHECK(out[0] == 1.0);
  CHECK(out[1] == 1 + 2 * u);
  CHECK(out[2] == 1 + u);
  CHECK(out[3] == 0.10009765625);
  // 3e38 = 1.763... * 2^127; bf16 mantissa rounds to 1.765625 -> 3.0038e38, finite.
  CHECK(out[4] == std::ldexp(1.765625, 127));
  CHECK(out[5] == -2.5);
  auto inf = conv_f32({3.4e38f}, kBFloat16);  // 1.998 * 2^127 rounds past the largest bf16
  CHECK(std::isinf(inf[0]));
}

TEST_CASE("to(dtype): f64 -> f16/bf16 round once (no double rounding through f32)") {
  // 1 + 2^-11 + 2^-40 lies just above the f16 tie between 1 and 1 + 2^-10, so the
  // correctly rounded half is 1 + 2^-10. Rounding to f32 first lands exactly on the
  // tie, which then goes to even (1.0): a double rounding error.
  const double x = 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(conv({x}, kFloat16)[0] == 1 + std::ldexp(1.0, -10));
  CHECK(conv({-x}, kFloat16)[0] == -(1 + std::ldexp(1.0, -10)));
  const double y = 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  CHECK(conv({y}, kBFloat16)[0] == 1 + std::ldexp(1.0, -7));
  // The same holds for wide integers (through f32 they round twice too) and fill.
  // 2^24 + 2^16 + 1 is just above the bf16 tie 2^24 + 2^16: correct is 2^24 + 2^17.
  Tensor wide = from_vector<int32_t>({(1 << 24) + (1 << 16) + 1, (1 << 24) + (1 << 16)}, {2});
  CHECK(wide.to(kBFloat16).to_vector<double>() == std::vector<double>{16908288.0, 16777216.0});
  Tensor wide64 = from_vector<int64_t>({(int64_t{1} << 62) + (int64_t{1} << 54) + 1}, {1});
  CHECK(wide64.to(kBFloat16).to_vector<double>()[0] == std::ldexp(1.0, 62) + std::ldexp(1.0, 55));
  CHECK(full({1}, x, kFloat16).item() == 1 + std::ldexp(1.0, -10));
  CHECK(full({1}, y, kBFloat16).item() == 1 + std::ldexp(1.0, -7));
  // Plain cases still right.
  CHECK(conv({0.1}, kFloat16)[0] == 0.0999755859375);
  CHECK(conv({1e-50}, kBFloat16)[0] == 0.0);
  CHECK(conv({-3.0e38}, kBFloat16)[0] == -std::ldexp(1.765625, 127));
  CHECK(conv({1e39}, kBFloat16)[0] == std::numeric_limits<double>::infinity());
  CHECK(conv({1 + std::ldexp(1.0, -11)}, kFloat16)[0] == 1.0);  // exact tie -> even
  CHECK(conv({65520.0}, kFloat16)[0] == std::numeric_limits<double>::infinity());
  CHECK(conv({65519.99}, kFloat16)[0] == 65504.0);
  CHECK(conv({1e300}, kBFloat16)[0] == std::numeric_limits<double>::infinity());
  CHECK(conv({std::ldexp(1.0, -24)}, kFloat16)[0] == std::ldexp(1.0, -24));
  CHECK(conv({std::ldexp(1.0, -25) + std::ldexp(1.0, -60)}, kFloat16)[0] == std::ldexp(1.0, -24));
  CHECK(std::isnan(conv({std::numeric_limits<double>::quiet_NaN()}, kFloat16)[0]));
  CHECK(std::isnan(conv({std::numeric_limits<double>::quiet_NaN()}, kBFloat16)[0]));
}

TEST_CASE("to(dtype): f16/bf16 -> wider types is exact") {
  Tensor h = from_vector<double>({0.0999755859375, -65504, std::ldexp(1.0, -24), 2049}, {4}, kFloat16);
  // 2049 is not a half: it rounds to the even neighbour 2048.
  auto f = h.to(kFloat32).to_vector<float>();
  CHECK(f[0] == 0.0999755859375f);
  CHECK(f[1] == -65504.0f);
  CHECK(f[2] == static_cast<float>(std::ldexp(1.0, -24)));
  CHECK(f[3] == 2048.0f);
  auto d = h.to(kFloat64).to_vector<double>();
  CHECK(d[0] == 0.0999755859375);
  Tensor b = from_vector<double>({0.10009765625, -3.0}, {2}, kBFloat16);
  CHECK(b.to(kFloat64).to_vector<double>() == std::vector<double>{0.10009765625, -3.0});
  // f16 -> bf16 goes through an exact f32, so it rounds once: 0.0999755859375 -> 0.10009765625.
  CHECK(h.to(kBFloat16).to_vector<double>()[0] == 0.10009765625);
  CHECK(h.to(kInt32).to_vector<int32_t>() == std::vector<int32_t>{0, -65504, 0, 2048});
}

TEST_CASE("to(dtype): float -> int truncates toward zero") {
  std::vector<double> v = {-2.7, -0.5, 0.5, 2.7, 3.999, -3.999, 100.0};
  CHECK(conv(v, kInt32) == std::vector<double>{-2, 0, 0, 2, 3, -3, 100});
  CHECK(conv(v, kInt64) == std::vector<double>{-2, 0, 0, 2, 3, -3, 100});
  CHECK(conv(v, kInt8) == std::vector<double>{-2, 0, 0, 2, 3, -3, 100});
  CHECK(conv({0.9, 1.5, 200.7, 255.0}, kUInt8) == std::vector<double>{0, 1, 200, 255});
  auto f = conv_f32({-1.9f, 7.99f}, kInt64);
  CHECK(f == std::vector<double>{-1, 7});
  Tensor h = from_vector<double>({-1.5, 2.75}, {2}, kFloat16);
  CHECK(h.to(kInt32).to_vector<int32_t>() == std::vector<int32_t>{-1, 2});
  Tensor b = from_vector<double>({-1.5, 2.75}, {2}, kBFloat16);
  CHECK(b.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{-1, 2});
}

TEST_CASE("to(dtype): integer conversions and narrowing") {
  Tensor big = from_vector<int64_t>({(int64_t{1} << 53) + 1, 16777217, -5}, {3});
  auto d = big.to(kFloat64).to_vector<double>();
  CHECK(d[0] == std::ldexp(1.0, 53));  // 2^53 + 1 is not a double: ties to even
  CHECK(d[1] == 16777217.0);           // exact in f64
  auto f = big.to(kFloat32).to_vector<float>();
  CHECK(f[1] == 16777216.0f);  // 2^24 + 1 rounds to even in f32
  CHECK(f[2] == -5.0f);
  // Integer narrowing wraps modulo 2^bits, as a C++ cast (and PyTorch) does.
  Tensor w = from_vector<int64_t>({300, -1, 127, 128}, {4});
  CHECK(w.to(kUInt8).to_vector<int64_t>() == std::vector<int64_t>{44, 255, 127, 128});
  CHECK(w.to(kInt8).to_vector<int64_t>() == std::vector<int64_t>{44, -1, 127, -128});
  // i32 -> f16: 2051 lies halfway between 2050 and 2052 -> even mantissa (2052).
  Tensor i = from_vector<int32_t>({2049, 2051, 7}, {3});
  CHECK(i.to(kFloat16).to_vector<double>() == std::vector<double>{2048, 2052, 7});
  // u8 -> i8 -> i64 keeps values that fit.
  Tensor u = from_vector<uint8_t>({0, 5, 250}, {3});
  CHECK(u.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, 5, 250});
  CHECK(u.to(kInt8).to_vector<int64_t>() == std::vector<int64_t>{0, 5, -6});
}

TEST_CASE("to(dtype): bool conversions") {
  // Anything nonzero (NaN included) is true.
  std::vector<double> v = {0.0, -0.0, 0.5, -1.0, 1e-300, std::numeric_limits<double>::quiet_NaN()};
  auto b = from_vector<double>(v, {6}, kFloat64).to(kBool).to_vector<bool>();
  CHECK(b == std::vector<bool>{false, false, true, true, true, true});
  Tensor f = from_vector<float>({0.25f, 0.0f, -3.0f}, {3});
  CHECK(f.to(kBool).to_vector<bool>() == std::vector<bool>{true, false, true});
  Tensor i = from_vector<int64_t>({0, 2, -7, 256}, {4});
  // 256 is nonzero as an integer: it must not wrap to 0 through u8 first.
  CHECK(i.to(kBool).to_vector<bool>() == std::vector<bool>{false, true, true, true});
  Tensor h = from_vector<double>({0.0, 0.001}, {2}, kFloat16);
  CHECK(h.to(kBool).to_vector<bool>() == std::vector<bool>{false, true});
  Tensor t = from_vector<bool>({true, false, true}, {3});
  CHECK(t.to(kFloat32).to_vector<float>() == std::vector<float>{1, 0, 1});
  CHECK(t.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(t.to(kFloat16).to_vector<double>() == std::vector<double>{1, 0, 1});
  CHECK(t.to(kBFloat16).to_vector<double>() == std::vector<double>{1, 0, 1});
  CHECK(t.to(kUInt8).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  // to() with the same dtype returns the same tensor (no copy).
  CHECK(t.to(kBool).is_same(t));
}

TEST_CASE("to(dtype): round trip f32 -> f64 -> f32 is exact; non-contiguous input") {
  Tensor x = from_vector<float>({1.1f, -2.2f, 3.3f, 4.4f, 5.5f, 6.6f}, {2, 3});
  Tensor y = x.to(kFloat64).to(kFloat32);
  CHECK(y.to_vector<float>() == x.to_vector<float>());
  Tensor xt = x.t();  // [[1.1, 4.4], [-2.2, 5.5], [3.3, 6.6]]
  auto v = xt.to(kInt32).to_vector<int32_t>();
  CHECK(v == std::vector<int32_t>{1, 4, -2, 5, 3, 6});
  CHECK(xt.to(kFloat64).is_contiguous());
}

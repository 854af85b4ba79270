// SPDX-License-Identifier: MIT
// core/half.h and core/cpu/half_convert.cpp (at the CPU level in use): every f16 pattern, every tie between adjacent
// f16 and bf16 values, the overflow and subnormal edges, millions of random
// floats, each against two references written independently of the code under
// test (exact math in double, and the F16C instructions where the CPU has them).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <snug/core/cpu/half_convert.h>
#include <snug/core/cpu_isa.h>
#include <snug/core/half.h>

#if defined(__F16C__) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif

using namespace snug;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

// ---- references -------------------------------------------------------------

// Exact value of a half by its definition; NaN for NaN patterns.
double ref_half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v;
  if (e == 31) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(double(m), -24);
  } else {
    v = std::ldexp(double(1024 + m), e - 25);
  }
  return (h & 0x8000) ? -v : v;
}

// float -> half by exact arithmetic: find the binade, scale so that one half
// ulp is 1, round with nearbyint (ties to even in the default mode), rebuild.
uint16_t ref_float_to_half(float f) {
  const uint32_t x = bits_of(f);
  const uint16_t sign = (x >> 31) ? 0x8000 : 0;
  if (std::isnan(f)) return uint16_t(sign | 0x7e00 | ((x >> 13) & 0x3ff));
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return uint16_t(sign | 0x7c00);
  if (a == 0.0) return sign;
  int e2;
  std::frexp(a, &e2);                                      // a = frac * 2^e2, frac in [0.5, 1)
  int e = std::max(e2 - 1, -14);                           // unbiased half exponent (subnormals share -14)
  const double q = std::nearbyint(std::ldexp(a, 10 - e));  // significand in ulps
  uint32_t bits;
  if (e == -14 && q < 1024) {
    bits = uint32_t(q);  // subnormal (or zero)
  } else {
    // q in [1024, 2048]; q == 2048 carries into the next binade naturally.
    bits = (uint32_t(e + 15) << 10) + (uint32_t(q) - 1024);
  }
  return uint16_t(sign | bits);
}

// float -> bf16 by comparing distances to the two bf16 neighbours in double.
uint16_t ref_float_to_bf16(float f) {
  const uint32_t x = bits_of(f);
  if (std::isnan(f)) return uint16_t((x >> 16) | 0x40);
  const uint32_t toward0 = x & 0xffff0000u;
  if (toward0 == x) return uint16_t(x >> 16);
  const uint32_t away = toward0 + 0x10000u;
  const double a = std::fabs(double(f));
  const double lo = std::fabs(double(float_of(toward0)));
  // The neighbour past the largest finite bf16 is inf; IEEE rounds as if it
  // were the next power of two, 2^128.
  const double hi = ((away & 0x7fffffffu) == 0x7f800000u) ? std::ldexp(1.0, 128) : std::fabs(double(float_of(away)));
  const double dlo = a - lo, dhi = hi - a;
  uint32_t pick;
  if (dlo < dhi) {
    pick = toward0;
  } else if (dhi < dlo) {
    pick = away;
  } else {
    pick = ((toward0 >> 16) & 1) ? away : toward0;
  }
  return uint16_t(pick >> 16);
}

// ---- mismatch counting (one CHECK per family, not per value) ----------------

struct Mismatches {
  const char* what;
  int64_t count = 0;
  int64_t checked = 0;
  void add(uint32_t input, uint32_t got, uint32_t want) {
    ++checked;
    if (got == want) return;
    if (count < 8) {
      std::printf("%s: input 0x%08x got 0x%08x want 0x%08x\n", what, input, got, want);
    }
    ++count;
  }
};

// Check float_to_half(f) against both references.
void check_f2h(float f, Mismatches& vs_math, Mismatches& vs_hw) {
  const uint16_t got = float_to_half(f);
  vs_math.add(bits_of(f), got, ref_float_to_half(f));
#if defined(__F16C__)
  vs_hw.add(bits_of(f), got, uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)));
#else
  (void)vs_hw;
#endif
}

void check_f2b(float f, Mismatches& m) { m.add(bits_of(f), float_to_bf16(f), ref_float_to_bf16(f)); }

// Floats that stress float -> half: all halves, all midpoints and their
// neighbours, the edges; then random floats.
std::vector<float> half_stress_floats(int random_count) {
  std::vector<float> v;
  for (uint32_t h = 0; h < 65536; ++h) v.push_back(half_to_float(uint16_t(h)));
  for (uint32_t h = 0; h <= 0x7bff; ++h) {
    const double lo = ref_half_value(uint16_t(h));
    const double hi = (h == 0x7bff) ? 65536.0 : ref_half_value(uint16_t(h + 1));
    const float mid = float((lo + hi) / 2);  // 12 significant bits: exact in float
    for (float s : {1.0f, -1.0f}) {
      v.push_back(s * mid);
      v.push_back(s * std::nextafter(mid, 0.0f));
      v.push_back(s * std::nextafter(mid, INFINITY));
    }
  }
  const float edges[] = {
      65504.0f,
      65519.0f,
      65520.0f,
      std::nextafter(65520.0f, 0.0f),
      std::nextafter(65520.0f, INFINITY),
      65536.0f,
      1e10f,
      std::numeric_limits<float>::max(),
      INFINITY,
      std::ldexp(1.0f, -14),
      std::nextafter(std::ldexp(1.0f, -14), 0.0f),
      std::ldexp(1.0f, -24),
      std::ldexp(1.0f, -25),
      std::nextafter(std::ldexp(1.0f, -25), 0.0f),
      std::nextafter(std::ldexp(1.0f, -25), 1.0f),
      std::ldexp(1.0f, -26),
      3 * std::ldexp(1.0f, -26),
      std::ldexp(1.5f, -25),
      std::numeric_limits<float>::min(),
      std::numeric_limits<float>::denorm_min(),
      0.0f,
      1.0f,
      0.1f,
      1.0f / 3.0f,
      std::numeric_limits<float>::quiet_NaN(),
      float_of(0x7f800001u),
      float_of(0x7fbfffffu),
      float_of(0x7fc00001u),
      float_of(0x7fffe000u),
  };
  for (float e : edges) {
    v.push_back(e);
    v.push_back(-e);
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < random_count; ++i) v.push_back(float_of(rng()));  // any bit pattern
  std::uniform_int_distribution<int> exp_in_range(-30, 17);
  std::uniform_real_distribution<float> frac(1.0f, 2.0f);
  for (int i = 0; i < random_count; ++i) {
    const float f = std::ldexp(frac(rng), exp_in_range(rng));
    v.push_back((rng() & 1) ? f : -f);
  }
  return v;
}

std::vector<float> bf16_stress_floats(int random_count) {
  std::vector<float> v;
  // Every bf16 (as a float), every tie between neighbours, and the floats
  // next to the ties and next to the bf16 values themselves.
  for (uint32_t b = 0; b < 65536; ++b) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      v.push_back(float_of((b << 16) | low));
    }
  }
  std::mt19937 rng(777);
  for (int i = 0; i < random_count; ++i) v.push_back(float_of(rng()));
  return v;
}

}  // namespace

TEST_CASE("half -> float: all 65536 patterns, exact") {
  Mismatches vs_math{"h2f vs math"}, vs_hw{"h2f vs F16C"};
  int64_t nan_ok = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(uint16_t(h));
    const double want = ref_half_value(uint16_t(h));
    if (half_is_nan(uint16_t(h))) {
      // NaN stays NaN, keeps its sign and payload, and comes back quiet.
      const uint32_t u = bits_of(f);
      const bool ok =
          std::isnan(f) && (u >> 31) == (h >> 15) && (u & 0x400000u) && ((u >> 13) & 0x3ffu) == ((h & 0x3ffu) | 0x200u);
      nan_ok += ok;
      vs_math.add(h, ok, 1);
    } else {
      // Compare bit patterns, so -0 must stay -0.
      vs_math.add(h, bits_of(f), bits_of(float(want)));
    }
#if defined(__F16C__)
    vs_hw.add(h, bits_of(f), bits_of(_cvtsh_ss(uint16_t(h))));
#endif
  }
  CHECK(vs_math.count == 0);
  CHECK(vs_hw.count == 0);
  CHECK(nan_ok == 2 * 1023);
  CHECK(bits_of(half_to_float(0x8000)) == 0x80000000u);
  CHECK(half_to_float(0x7bff) == 65504.0f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_to_float(0x7c00) == INFINITY);
  CHECK(half_to_float(0xfc00) == -INFINITY);
}

TEST_CASE("half -> float -> half round-trips every pattern") {
  int64_t bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = float_to_half(half_to_float(uint16_t(h)));
    // A signalling NaN comes back quiet; everything else comes back unchanged.
    const uint16_t want = half_is_nan(uint16_t(h)) ? uint16_t(h | 0x200) : uint16_t(h);
    bad += back != want;
  }
  CHECK(bad == 0);
}

TEST_CASE("float -> half: ties, neighbours, edges and random floats") {
  const std::vector<float> floats = half_stress_floats(2'000'000);
  Mismatches vs_math{"f2h vs math"}, vs_hw{"f2h vs F16C"};
  for (float f : floats) check_f2h(f, vs_math, vs_hw);
  CHECK(vs_math.count == 0);
  CHECK(vs_hw.count == 0);
  CHECK(vs_math.checked > 4'000'000);

  SUBCASE("named values") {
    CHECK(float_to_half(65504.0f) == 0x7bff);
    CHECK(float_to_half(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
    CHECK(float_to_half(65520.0f) == 0x7c00);  // tie with odd 65504 -> inf
    CHECK(float_to_half(-65520.0f) == 0xfc00);
    CHECK(float_to_half(1e30f) == 0x7c00);
    CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie -> even (1.0)
    CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie -> even (up)
    CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);
    CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);  // tie -> even (0)
    CHECK(float_to_half(-std::ldexp(1.0f, -25)) == 0x8000);
    CHECK(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(float_to_half(std::ldexp(3.0f, -25)) == 0x0002);                        // 1.5 ulp tie -> 2
    CHECK(float_to_half(std::nextafter(std::ldexp(1.0f, -14), 0.0f)) == 0x0400);  // rounds up to min normal
    CHECK(float_to_half(-0.0f) == 0x8000);
    CHECK(half_is_nan(float_to_half(NAN)));
    CHECK(half_is_nan(float_to_half(float_of(0x7f800001u))));  // payload only in low bits: still NaN
    CHECK(float_to_half(float_of(0xff800001u)) == 0xfe00);
  }
}

TEST_CASE("bf16 -> float is exact and round-trips every pattern") {
  int64_t bad = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    bad += bits_of(f) != (b << 16);
    const bool nan = ((b & 0x7f80) == 0x7f80) && (b & 0x7f);
    const uint16_t want = nan ? uint16_t(b | 0x40) : uint16_t(b);
    bad += float_to_bf16(f) != want;
  }
  CHECK(bad == 0);
}

TEST_CASE("float -> bf16: ties, neighbours, edges and random floats") {
  const std::vector<float> floats = bf16_stress_floats(3'000'000);
  Mismatches m{"f2b vs math"};
  for (float f : floats) check_f2b(f, m);
  const float edges[] = {std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                         std::numeric_limits<float>::denorm_min(), INFINITY, 0.0f};
  for (float e : edges) {
    check_f2b(e, m);
    check_f2b(-e, m);
  }
  CHECK(m.count == 0);

  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(float_of(0x3f808000u)) == 0x3f80);  // tie -> even
  CHECK(float_to_bf16(float_of(0x3f818000u)) == 0x3f82);  // tie -> even (up)
  CHECK(float_to_bf16(float_of(0x3f808001u)) == 0x3f81);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // overflows to inf
  CHECK(float_to_bf16(float_of(0x7f7f7fffu)) == 0x7f7f);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  CHECK(float_to_bf16(float_of(0x00008000u)) == 0x0000);  // subnormal tie -> 0
  CHECK(float_to_bf16(float_of(0x00018000u)) == 0x0002);  // subnormal tie -> even (up)
  CHECK(float_to_bf16(float_of(0x7f800001u)) == 0x7fc0);  // sNaN with low payload -> quiet NaN
  CHECK(float_to_bf16(float_of(0xffc00000u)) == 0xffc0);
}

namespace {
void check_array_conversions() {
  std::vector<float> floats = half_stress_floats(200'000);
  const std::vector<float> bfloats = bf16_stress_floats(0);
  floats.insert(floats.end(), bfloats.begin(), bfloats.end());
  const int64_t n = int64_t(floats.size());

  std::vector<uint16_t> h(n), b(n);
  float_to_half_array(floats.data(), h.data(), n);
  float_to_bf16_array(floats.data(), b.data(), n);
  int64_t bad_h = 0, bad_b = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad_h += h[i] != float_to_half(floats[i]);
    bad_b += b[i] != float_to_bf16(floats[i]);
  }
  CHECK(bad_h == 0);
  CHECK(bad_b == 0);

  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  std::vector<float> out(65536);
  half_to_float_array(all.data(), out.data(), 65536);
  int64_t bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) bad += bits_of(out[i]) != bits_of(half_to_float(uint16_t(i)));
  bf16_to_float_array(all.data(), out.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) bad += bits_of(out[i]) != bits_of(bf16_to_float(uint16_t(i)));
  CHECK(bad == 0);

  {  // every short length and misalignment (SIMD body + scalar tail)
    int64_t bad_short = 0;
    for (int start = 0; start < 17; ++start) {
      for (int len = 0; len < 50; ++len) {
        std::vector<uint16_t> h16(len + 1, 0xabcd), b16(len + 1, 0xabcd);
        std::vector<float> f32(len + 1, -7.0f), g32(len + 1, -7.0f);
        const float* src = floats.data() + 70000 + start;
        float_to_half_array(src, h16.data(), len);
        float_to_bf16_array(src, b16.data(), len);
        half_to_float_array(all.data() + 0x7bf0 + start, f32.data(), len);
        bf16_to_float_array(all.data() + 0x7f70 + start, g32.data(), len);
        for (int i = 0; i < len; ++i) {
          bad_short += h16[i] != float_to_half(src[i]);
          bad_short += b16[i] != float_to_bf16(src[i]);
          bad_short += bits_of(f32[i]) != bits_of(half_to_float(uint16_t(0x7bf0 + start + i)));
          bad_short += bits_of(g32[i]) != bits_of(bf16_to_float(uint16_t(0x7f70 + start + i)));
        }
        // Nothing written past the end.
        bad_short += h16[len] != 0xabcd || b16[len] != 0xabcd || f32[len] != -7.0f || g32[len] != -7.0f;
      }
    }
    CHECK(bad_short == 0);
  }
}
}  // namespace

// At every CPU level this machine runs (NOTE [ CPU levels ]): AVX-512, F16C
// and AVX2, and the scalar baseline each have their own bodies.
TEST_CASE("array conversions equal the scalar ones, at every CPU level") {
  const std::string saved = cpu_isa();
  for (const std::string& level : cpu_isas_supported()) {
    CAPTURE(level);
    set_cpu_isa(level);
    check_array_conversions();
  }
  set_cpu_isa(saved);
}

#if defined(__AVX512BF16__)
// Why float_to_bf16_array does not use vcvtneps2bf16: it agrees with
// float_to_bf16 everywhere except on f32 subnormals, which it flushes to zero.
TEST_CASE("vcvtneps2bf16 differs from float_to_bf16 only on f32 subnormals") {
  const std::vector<float> floats = bf16_stress_floats(100'000);
  int64_t bad_normal = 0, flushed = 0;
  for (size_t i = 0; i + 16 <= floats.size(); i += 16) {
    const __m256bh r = _mm512_cvtneps_pbh(_mm512_loadu_ps(floats.data() + i));
    uint16_t hw[16];
    std::memcpy(hw, &r, sizeof hw);
    for (int j = 0; j < 16; ++j) {
      const float f = floats[i + j];
      const bool subnormal = std::fpclassify(f) == FP_SUBNORMAL;
      if (!subnormal) {
        bad_normal += hw[j] != float_to_bf16(f);
      } else {
        flushed += (hw[j] & 0x7fff) == 0;
      }
    }
  }
  CHECK(bad_normal == 0);
  CHECK(flushed > 0);
}
#endif

TEST_CASE("Half and BFloat16 storage types") {
  static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);
  const Half a = 1.5f, b = 2.25f;
  CHECK(float(a + b) == 3.75f);
  CHECK(float(a - b) == -0.75f);
  CHECK(float(a * b) == 3.375f);
  CHECK(float(b / a) == 1.5f);
  CHECK(float(-a) == -1.5f);
  CHECK(a < b);
  CHECK(a == Half(1.5f));
  static_assert(std::is_same_v<decltype(a + b), Half>);
  static_assert(std::is_same_v<decltype(a + 1.0f), float>);
  static_assert(std::is_same_v<decltype(1.0 * a), double>);
  static_assert(std::is_same_v<decltype(a * 2), Half>);
  CHECK(a + 1.0f == 2.5f);
  CHECK(float(a * 2) == 3.0f);
  Half c = a;
  c += b;
  CHECK(float(c) == 3.75f);
  c *= 2.0f;
  CHECK(float(c) == 7.5f);
  // Sums are rounded back to half: 2048 + 1 is not representable (ulp 2), tie -> even.
  CHECK(float(Half(2048.0f) + Half(1.0f)) == 2048.0f);
  CHECK(Half::from_bits(0x3c00) == 1.0f);
  CHECK(Half(65520.0f).bits == 0x7c00);

  const BFloat16 x = 3.0f, y = 0.5f;
  CHECK(float(x * y) == 1.5f);
  CHECK(float(x + y) == 3.5f);
  static_assert(std::is_same_v<decltype(x + y), BFloat16>);
  CHECK(float(BFloat16(257.0f)) == 256.0f);  // 8 significant bits, tie -> even
  CHECK(BFloat16::from_bits(0x3f80) == 1.0f);
  CHECK(float(-x) == -3.0f);

  // Mixed 16-bit types compute and stay in float.
  static_assert(std::is_same_v<decltype(a + x), float>);
  CHECK(a + x == 4.5f);
  BFloat16 z = x;
  z += a;
  CHECK(float(z) == 4.5f);
}

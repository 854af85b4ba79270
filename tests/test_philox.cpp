// SPDX-License-Identifier: MIT
// core/philox.h and core/generator.h: the Random123 known answers, the element
// mapping contract (NOTE [ Philox element mapping ]), distribution sanity, and
// the generator's offset bookkeeping.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include <snug/core/generator.h>
#include <snug/core/philox.h>

using namespace snug;

namespace {

void check_kat(std::initializer_list<uint32_t> ctr_l, std::initializer_list<uint32_t> key_l,
               std::initializer_list<uint32_t> want_l) {
  uint32_t ctr[4], key[2], want[4];
  std::copy(ctr_l.begin(), ctr_l.end(), ctr);
  std::copy(key_l.begin(), key_l.end(), key);
  std::copy(want_l.begin(), want_l.end(), want);
  const PhiloxBlock got = philox4x32_10(ctr, key);
  for (int i = 0; i < 4; ++i) CHECK(got[i] == want[i]);
}

std::vector<float> uniforms(PhiloxState s, uint64_t n) {
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = uniform_at(s, i);
  return v;
}

std::vector<float> normals(PhiloxState s, uint64_t n) {
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = normal_at(s, i);
  return v;
}

}  // namespace

// The "philox4x32 10" lines of Random123's tests/kat_vectors
// (github.com/DEShawResearch/random123): CTR (4 words), KEY (2 words), expected output.
TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors") {
  check_kat({0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000},
            {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  check_kat({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
            {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  check_kat({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
            {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("element i follows the documented (seed, offset) -> counter/key mapping") {
  // Offsets that carry from the low counter word into the high one, and seeds
  // with both key words in use.
  for (PhiloxState s : {PhiloxState{0, 0}, PhiloxState{0x0123456789abcdefULL, 0xfffffffeULL},
                        PhiloxState{0xffffffffffffffffULL, 0x00000001ffffffffULL}}) {
    for (uint64_t i = 0; i < 40; ++i) {
      const uint64_t c = s.offset + i / 4;
      const uint32_t ctr[4] = {uint32_t(c & 0xffffffffu), uint32_t(c >> 32), 0, 0};
      const uint32_t key[2] = {uint32_t(s.seed & 0xffffffffu), uint32_t(s.seed >> 32)};
      CHECK(philox_word(s, i) == philox4x32_10(ctr, key)[int(i % 4)]);
    }
  }
  // Offset 0, seed 0, element 0..3 is the all-zero KAT.
  CHECK(philox_word({0, 0}, 0) == 0x6627e8d5u);
  CHECK(philox_word({0, 0}, 3) == 0x9b00dbd8u);
  CHECK(philox_counters(0) == 0);
  CHECK(philox_counters(1) == 1);
  CHECK(philox_counters(4) == 1);
  CHECK(philox_counters(5) == 2);
}

TEST_CASE("elements are independent: a sub-range drawn by offset equals the full draw") {
  const PhiloxState s{42, 1000};
  const uint64_t n = 1003;
  const std::vector<float> all_u = uniforms(s, n), all_n = normals(s, n);
  for (uint64_t k : {1u, 7u, 100u, 250u}) {
    const PhiloxState later{s.seed, s.offset + k};
    const std::vector<float> part_u = uniforms(later, n - 4 * k), part_n = normals(later, n - 4 * k);
    bool same = true;
    for (uint64_t i = 0; i < n - 4 * k; ++i) {
      same &= part_u[i] == all_u[i + 4 * k];
      same &= part_n[i] == all_n[i + 4 * k];
    }
    CHECK(same);
  }
  // Different seeds and different offsets give different streams.
  CHECK(uniforms({43, 1000}, 8) != uniforms(s, 8));
  CHECK(uniforms({42, 1001}, 4) != uniforms(s, 4));
}

TEST_CASE("uniform_float: [0, 1), 24-bit, mean and variance") {
  CHECK(uniform_float(0) == 0.0f);
  CHECK(uniform_float(0xffffffffu) == 1.0f - std::ldexp(1.0f, -24));
  CHECK(uniform_float(0xffffffffu) < 1.0f);
  CHECK(uniform_float(0x80000000u) == 0.5f);
  CHECK(uniform_float(0x000000ffu) == 0.0f);  // only the top 24 bits count
  CHECK(uniform_float_open0(0) == std::ldexp(1.0f, -24));
  CHECK(uniform_float_open0(0xffffffffu) == 1.0f);

  const uint64_t n = 1 << 20;
  const std::vector<float> v = uniforms({2024, 0}, n);
  double sum = 0, sq = 0;
  float lo = 1, hi = 0;
  for (float x : v) {
    sum += x;
    sq += double(x) * x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  CHECK(lo >= 0.0f);
  CHECK(hi < 1.0f);
  CHECK(lo < 1e-4f);
  CHECK(hi > 1.0f - 1e-4f);
  // Standard error of the mean is sqrt(1/12/n) ~ 2.8e-4.
  CHECK(std::abs(mean - 0.5) < 2e-3);
  CHECK(std::abs(var - 1.0 / 12.0) < 1e-3);

  // Each of 16 buckets holds 1/16 of the draws, within 5 sigma.
  std::vector<int64_t> buckets(16, 0);
  for (float x : v) ++buckets[int(x * 16)];
  const double expect = double(n) / 16, sigma = std::sqrt(expect * (15.0 / 16));
  for (int64_t c : buckets) CHECK(std::abs(double(c) - expect) < 5 * sigma);
}

TEST_CASE("normal_at: mean 0, variance 1, finite") {
  const uint64_t n = 1 << 20;
  const std::vector<float> v = normals({7, 123}, n);
  double sum = 0, sq = 0, quart = 0;
  int64_t within1 = 0;
  bool finite = true;
  for (float x : v) {
    finite &= std::isfinite(x);
    sum += x;
    sq += double(x) * x;
    quart += double(x) * x * x * x;
    within1 += std::abs(x) < 1.0f;
  }
  CHECK(finite);
  const double mean = sum / n, var = sq / n - mean * mean;
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::abs(var - 1.0) < 0.01);
  CHECK(std::abs(quart / n - 3.0) < 0.05);                  // kurtosis of a normal
  CHECK(std::abs(double(within1) / n - 0.682689) < 0.003);  // P(|z| < 1)

  // Extremes: u1 is never 0, so the largest radius is sqrt(-2 ln 2^-24) ~ 5.77.
  const NormalPair z = box_muller(0, 0);
  CHECK(std::isfinite(z.z0));
  CHECK(z.z0 == doctest::Approx(std::sqrt(-2.0 * std::log(std::ldexp(1.0, -24)))).epsilon(1e-5));
  const NormalPair one = box_muller(0xffffffffu, 0);
  CHECK(one.z0 == 0.0f);
  CHECK(one.z1 == 0.0f);
}

TEST_CASE("Generator: seed, offset, reserve, state save and restore") {
  Generator g(5);
  CHECK(g.seed() == 5);
  CHECK(g.offset() == 0);

  const PhiloxState a = g.reserve(philox_counters(10));  // 3 counters
  CHECK(a.seed == 5);
  CHECK(a.offset == 0);
  CHECK(g.offset() == 3);
  const PhiloxState b = g.reserve(1);
  CHECK(b.offset == 3);
  CHECK(g.offset() == 4);

  g.set_offset(100);
  CHECK(g.reserve(0).offset == 100);
  CHECK(g.offset() == 100);

  g.manual_seed(77);
  CHECK(g.seed() == 77);
  CHECK(g.offset() == 0);

  // Save, draw twice, restore, draw twice: the same numbers (the replay that
  // recomputation of dropout relies on).
  g.reserve(9);
  const PhiloxState saved = g.get_state();
  const std::vector<float> first1 = uniforms(g.reserve(philox_counters(50)), 50);
  const std::vector<float> first2 = normals(g.reserve(philox_counters(33)), 33);
  const PhiloxState after = g.get_state();
  g.set_state(saved);
  CHECK(g.seed() == 77);
  CHECK(g.offset() == 9);
  const std::vector<float> again1 = uniforms(g.reserve(philox_counters(50)), 50);
  const std::vector<float> again2 = normals(g.reserve(philox_counters(33)), 33);
  CHECK(first1 == again1);
  CHECK(first2 == again2);
  CHECK(g.get_state().offset == after.offset);
  CHECK(first1 != uniforms(g.reserve(philox_counters(50)), 50));
}

TEST_CASE("Generator::reserve is thread-safe: concurrent ranges are disjoint") {
  Generator g(1);
  constexpr int kThreads = 4, kPerThread = 20000;
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) got[t].push_back(g.reserve(uint64_t(t + 1)).offset);
    });
  }
  for (auto& th : threads) th.join();
  // Each reservation [offset, offset + t + 1) must not overlap any other.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t total = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (uint64_t o : got[t]) ranges.emplace_back(o, o + t + 1);
    total += uint64_t(kPerThread) * (t + 1);
  }
  std::sort(ranges.begin(), ranges.end());
  bool disjoint = true;
  for (size_t i = 1; i < ranges.size(); ++i) disjoint &= ranges[i].first == ranges[i - 1].second;
  CHECK(disjoint);
  CHECK(ranges.front().first == 0);
  CHECK(g.offset() == total);
}

TEST_CASE("default_generator and snug::manual_seed") {
  const PhiloxState before = default_generator().get_state();
  manual_seed(1234);
  CHECK(default_generator().seed() == 1234);
  CHECK(default_generator().offset() == 0);
  const std::vector<float> x = uniforms(default_generator().reserve(2), 8);
  manual_seed(1234);
  CHECK(uniforms(default_generator().reserve(2), 8) == x);
  default_generator().set_state(before);
}

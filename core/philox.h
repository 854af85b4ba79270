// SPDX-License-Identifier: MIT
// Philox4x32-10, the counter-based RNG of Salmon et al., "Parallel Random
// Numbers: As Easy as 1, 2, 3" (SC11), and the mapping from (seed, offset,
// element index) to random numbers. A leaf header compiled for host and device.
//
// NOTE [ Philox element mapping ]
// A random tensor drawn at PhiloxState{seed, offset} gets, for its element i
// (i = 0, 1, 2, ... in the order the op defines, normally the contiguous
// linear index):
//
//   c     = offset + i / 4                      (64-bit, wraps mod 2^64)
//   ctr   = { lo32(c), hi32(c), 0, 0 }          (words 2 and 3 are reserved, 0)
//   key   = { lo32(seed), hi32(seed) }
//   word  = philox4x32_10(ctr, key)[i % 4]
//
// and turns `word` into a value as below (uniform_float for uniforms and
// dropout masks, normal_at for normals). No element depends on any other, so a
// CPU loop, a CUDA thread per element, or a CUDA thread per 4 elements all
// produce the same numbers; a tensor of n elements consumes
// philox_counters(n) = ceil(n / 4) counters, and the Generator
// (core/generator.h) advances its offset by that much. This is what makes
// CUDA dropout equal CPU dropout and recomputed dropout equal the original.
#pragma once
#include <cmath>
#include <cstdint>

#include <snug/base/macros.h>

namespace snug {

// Where a draw starts: the key (seed) and the first counter (offset).
struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// One Philox output block: four 32-bit words.
struct PhiloxBlock {
  uint32_t w[4];
  SNUG_HOST_DEVICE SNUG_INLINE uint32_t operator[](int i) const { return w[i]; }
};

namespace detail {
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // round multipliers
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // key schedule (Weyl) increments
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
}  // namespace detail

// The bijection itself: 10 rounds, the key bumped between rounds.
SNUG_HOST_DEVICE SNUG_INLINE PhiloxBlock philox4x32_10(const uint32_t counter[4], const uint32_t key[2]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += detail::kPhiloxW0;
      k1 += detail::kPhiloxW1;
    }
    const uint64_t p0 = uint64_t(detail::kPhiloxM0) * c0;
    const uint64_t p1 = uint64_t(detail::kPhiloxM1) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// Counters consumed by a draw of n elements (see the NOTE above).
SNUG_HOST_DEVICE SNUG_INLINE uint64_t philox_counters(uint64_t n) { return (n + 3) / 4; }

// The block holding elements 4*b .. 4*b+3 of a draw at state s.
SNUG_HOST_DEVICE SNUG_INLINE PhiloxBlock philox_block(PhiloxState s, uint64_t b) {
  const uint64_t c = s.offset + b;
  const uint32_t ctr[4] = {uint32_t(c), uint32_t(c >> 32), 0u, 0u};
  const uint32_t key[2] = {uint32_t(s.seed), uint32_t(s.seed >> 32)};
  return philox4x32_10(ctr, key);
}

// The 32-bit word for element i of a draw at state s.
SNUG_HOST_DEVICE SNUG_INLINE uint32_t philox_word(PhiloxState s, uint64_t i) {
  return philox_block(s, i / 4)[int(i % 4)];
}

// [0, 1) with a full 24-bit mantissa: the top 24 bits times 2^-24. Exact, so
// identical on every device; the largest value is 1 - 2^-24.
SNUG_HOST_DEVICE SNUG_INLINE float uniform_float(uint32_t u) {
  return float(u >> 8) * 5.9604644775390625e-8f;  // 2^-24
}

// (0, 1]: for logarithms that must not see 0.
SNUG_HOST_DEVICE SNUG_INLINE float uniform_float_open0(uint32_t u) {
  return float((u >> 8) + 1u) * 5.9604644775390625e-8f;
}

struct NormalPair {
  float z0, z1;
};

// Box-Muller: two words -> two independent standard normals. Uses logf,
// sqrtf, sinf, cosf, so CPU and CUDA agree to a few ulp, not bit for bit
// (uniforms and dropout masks are bit-identical).
SNUG_HOST_DEVICE SNUG_INLINE NormalPair box_muller(uint32_t a, uint32_t b) {
  const float u1 = uniform_float_open0(a);
  const float u2 = uniform_float(b);
  const float r = sqrtf(-2.0f * logf(u1));
  const float theta = 6.2831853071795864769f * u2;
  return NormalPair{r * cosf(theta), r * sinf(theta)};
}

// Uniform [0, 1) element i of a draw at state s.
SNUG_HOST_DEVICE SNUG_INLINE float uniform_at(PhiloxState s, uint64_t i) { return uniform_float(philox_word(s, i)); }

// Standard normal element i of a draw at state s. Element 4b+j uses block b:
// elements 4b, 4b+1 are the pair from words (0, 1), elements 4b+2, 4b+3 the
// pair from words (2, 3). Still one block per element, so still independent.
SNUG_HOST_DEVICE SNUG_INLINE float normal_at(PhiloxState s, uint64_t i) {
  const PhiloxBlock blk = philox_block(s, i / 4);
  const int j = int(i % 4);
  const int pair = j & ~1;
  const NormalPair z = box_muller(blk[pair], blk[pair + 1]);
  return (j & 1) ? z.z1 : z.z0;
}

// A fill's element from its standard draw v (uniform_at or normal_at): uniform
// on [a, b), or normal with mean a and standard deviation b. In double, then
// rounded by the caller to the output type (core/cpu/random.cpp, cuda/random.cu).
SNUG_HOST_DEVICE SNUG_INLINE double random_value(bool normal, double a, double b, float v) {
  return normal ? a + b * static_cast<double>(v) : a + (b - a) * static_cast<double>(v);
}

}  // namespace snug

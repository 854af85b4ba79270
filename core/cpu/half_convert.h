// SPDX-License-Identifier: MIT
// Whole arrays of 16-bit floats to float and back (core/cpu/half_convert.cpp),
// compiled per CPU level (NOTE [ CPU levels ] in core/cpu/level.h): SIMD where
// the level has it, bit-identical to the scalar conversions of core/half.h.
// `n` is an element count; src and dst must not overlap. Outside core/cpu/
// these are the "dispatch" level's forwarders to the level in use.
#pragma once
#include <snug/core/cpu/level.h>

#include <cstdint>

#include <snug/core/half.h>

namespace snug::inline SNUG_CPU_LEVEL {

void half_to_float_array(const uint16_t* src, float* dst, int64_t n);
void float_to_half_array(const float* src, uint16_t* dst, int64_t n);
void bf16_to_float_array(const uint16_t* src, float* dst, int64_t n);
void float_to_bf16_array(const float* src, uint16_t* dst, int64_t n);

}  // namespace snug::SNUG_CPU_LEVEL

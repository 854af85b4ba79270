// SPDX-License-Identifier: MIT
// NOTE [ One f32 softmax row ]
// y[0, L) = softmax(scale * x[0, L)), or log_softmax when `log`, for one
// contiguous f32 row. Shared by softmax (core/cpu/softmax.cpp) and the causal
// attention softmax (core/cpu/causal_softmax.cpp, scale = 1/sqrt(head size), L =
// the visible part of the row). Max and sum keep 16 lanes of partial results
// so the loops vectorize without reassociating one accumulator (the compiler
// may not without -ffast-math); the sum is in f64; exp is fmath::exp_approx
// (NOTE [ Vectorizable exp and erf for float ]). A NaN input makes the row NaN.
#pragma once
#include <cstdint>

namespace snug::cpu {
void softmax_row_f32(const float* x, float* y, int64_t L, float scale, bool log);
}  // namespace snug::cpu

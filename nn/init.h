// SPDX-License-Identifier: MIT
// Parameter initializers (in place, without recording). Seeded through the
// default generator or the one given.
#pragma once
#include <snug/core/generator.h>
#include <snug/core/tensor.h>

namespace snug::nn::init {

void normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
void uniform_(const Tensor& t, double lo = 0.0, double hi = 1.0, Generator* gen = nullptr);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);
void constant_(const Tensor& t, double value);
// fan_in / fan_out of a weight: dim 1 / dim 0 times the receptive field (dims 2..).
std::pair<int64_t, int64_t> fans(const Tensor& t);
// Kaiming (He): std = gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2)) for leaky relu slope a.
void kaiming_normal_(const Tensor& t, double a = 0.0, Generator* gen = nullptr);
void kaiming_uniform_(const Tensor& t, double a = 0.0, Generator* gen = nullptr);
// Xavier (Glorot): std = gain * sqrt(2 / (fan_in + fan_out)).
void xavier_normal_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);
void xavier_uniform_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace snug::nn::init

// SPDX-License-Identifier: MIT
// Quantization parameters and the affine int8 map (docs/compression.md):
//
//   q = clamp(round(x / scale) + zero_point, qmin, qmax)      quantize
//   x' = (q - zero_point) * scale                              dequantize
//
// u8 [0, 255] (activations, affine) or i8 [-128, 127] (weights, usually
// symmetric: zero_point 0). Per tensor (axis = -1) or per channel (one scale
// and zero point per index of `axis`). The range always contains 0, so 0 is
// represented exactly (zero padding and ReLU zeros stay exact). For x inside
// the observed [min, max], |x - x'| <= scale / 2.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <snug/core/tensor.h>

namespace snug::quant {

struct QParams {
  DType dtype = DType::u8;  // u8 or i8
  int64_t axis = -1;        // -1: per tensor
  std::vector<float> scale;
  std::vector<int32_t> zero_point;
  int64_t qmin() const { return dtype == DType::u8 ? 0 : -128; }
  int64_t qmax() const { return dtype == DType::u8 ? 255 : 127; }
  bool per_channel() const { return axis >= 0; }
  std::string str() const;  // "u8 per-tensor scale=0.0123 zp=17"
};

// From observed minima and maxima (one entry per tensor, or per channel).
// symmetric: zero_point 0 for i8 (128 for u8), scale = max|x| / ((qmax - qmin) / 2).
// affine: scale = (max - min) / (qmax - qmin), zero_point = qmin - round(min / scale).
QParams choose_qparams(const std::vector<float>& mins, const std::vector<float>& maxs, DType dtype, bool symmetric,
                       int64_t axis = -1);

// x (any shape, floating) -> q (same shape, qp.dtype); and back to f32.
Tensor quantize(const Tensor& x, const QParams& qp);
Tensor dequantize(const Tensor& q, const QParams& qp);

// Per-channel minima and maxima of x along axis (-1: one pair for the whole tensor).
void min_max(const Tensor& x, int64_t axis, std::vector<float>& mins, std::vector<float>& maxs);

// Fake quantization for quantization-aware training: dequantize(quantize(x))
// in the forward; in the backward the straight-through estimator passes the
// gradient where x was inside the representable range and zero where it
// was clamped. Differentiable in x only.
Tensor fake_quantize(const Tensor& x, const QParams& qp);

}  // namespace snug::quant

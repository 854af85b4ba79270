// SPDX-License-Identifier: MIT
// Convolution followed by ReLU in one op on the CPU (nn::functional::conv2d_relu;
// docs/cnn.md). The ReLU is applied to each image's output while it is still
// in cache, and the backward masks each image's gradient (y > 0) where the
// convolution's backward reads it, instead of two more passes over the whole
// activation. Same values and gradients as conv2d then relu, bit for bit.
#pragma once
#include <snug/core/cpu/level.h>

#include <snug/core/backend.h>
#include <snug/core/tensor.h>

namespace snug::inline SNUG_CPU_LEVEL::cpu {

// x (N, C, H, W), weight (Cout, C/groups, kH, kW), bias (Cout) or undefined,
// out (N, Cout, Ho, Wo): contiguous, f32 or f64, on the CPU.
// out = relu(conv2d(x, weight, bias)).
void conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, const Tensor& out);
// The gradients of conv2d_relu given y = its output: as conv2d_backward with
// grad_out * (y > 0). Undefined grad_x / grad_weight / grad_bias are skipped.
void conv2d_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x, const Tensor& weight,
                          const Conv2dParams& p, const Tensor& grad_x, const Tensor& grad_weight,
                          const Tensor& grad_bias);

}  // namespace snug::SNUG_CPU_LEVEL::cpu

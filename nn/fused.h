// Ops that do the work of two in one pass (the rest of nn::functional is in
// nn/functional.h).
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace snug::nn::functional {

// relu(conv2d(x, weight, bias, ...)) as one op: on the CPU in f32/f64 the ReLU
// and, in backward, its mask run per image inside the convolution
// (core/cpu_conv.h): no separate passes over the activation and no second
// activation tensor. Elsewhere (GPU, 16-bit) it is conv2d then relu. The same
// values and gradients either way. nn::Sequential uses it for a Conv2d
// followed by a ReLU.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                   std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

}  // namespace snug::nn::functional

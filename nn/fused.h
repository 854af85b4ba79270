// SPDX-License-Identifier: MIT
// Ops that do the work of two in one pass (the rest of nn::functional is in
// nn/functional.h). Defined beside their unfused forms: conv2d_relu in
// nn/functional_conv.cpp, the linear and MLP ops in nn/functional.cpp.
#pragma once

#include <array>
#include <cstdint>

#include <snug/autograd/ops.h>
#include <snug/core/tensor.h>

namespace snug::nn::functional {

// relu(conv2d(x, weight, bias, ...)) as one op: on the CPU in f32/f64 the ReLU
// and, in backward, its mask run per image inside the convolution
// (core/cpu/conv.h): no separate passes over the activation and no second
// activation tensor. Elsewhere (GPU, 16-bit) it is conv2d then relu. The same
// values and gradients either way. nn::Sequential uses it for a Conv2d
// followed by a ReLU.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                   std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

// relu(linear(x, weight, bias)) and gelu(linear(x, weight, bias)) as one op:
// on the CPU in f32 the GEMM applies the activation to each row panel of the
// output right after computing it (kernels::gemm_f32_bias_act), so the
// activation is not a separate pass over memory. Elsewhere (GPU, f64, 16-bit,
// non-contiguous weights) it is linear then the activation. The same values
// and gradients either way. Backward is one elementwise pass for the
// activation's derivative, then linear's backward. nn::Sequential uses them
// for a Linear followed by a ReLU or GELU (when relu_mlp / gelu_mlp below do
// not take the pair with the Linear after it).
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   GeluApprox approximate = GeluApprox::none);

// linear(relu(linear(x, w1, b1)), w2, b2) and the same with GELU, as one op:
// a two-layer MLP. On the CPU in f32 the forward is linear_relu/linear_gelu's
// GEMM and the second GEMM; the backward computes the first layer's output
// gradient times the activation's derivative in the store of the GEMM that
// makes it (kernels::gemm_f32_act_grad), so neither the separate elementwise
// pass nor the (N, hidden) gradient before it exists. The same values and
// gradients as the three ops (tested bit for bit). nn::Sequential uses them
// for Linear, ReLU/GELU, Linear when that Linear is not itself followed by an
// activation; the GPT block's MLP calls gelu_mlp.
Tensor relu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2);
Tensor gelu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                GeluApprox approximate = GeluApprox::none);

}  // namespace snug::nn::functional

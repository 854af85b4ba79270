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

// Each is one autograd node whose arithmetic is a backend entry (core/backend.h,
// NOTE [ Fused ops are backend entries ] in core/fused_defaults.cpp): a backend
// with a fused kernel runs it, any other the composed default. nn::fuse
// (nn/fuse.h) rewrites a model's layers into the modules that call these.

// relu(conv2d(x, weight, bias, ...)) as one op: on the CPU in f32/f64 the ReLU
// and, in backward, its mask run per image inside the convolution
// (core/cpu/conv.h): no separate passes over the activation and no second
// activation tensor. Elsewhere (GPU, 16-bit) the backend's default, conv2d
// then relu. The same values and gradients either way. nn::Conv2dReLU
// (nn/fuse.h) calls it.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                   std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

// relu(linear(x, weight, bias)) and gelu(linear(x, weight, bias)) as one op:
// on the CPU in f32 the GEMM applies the activation to each row panel of the
// output right after computing it (core/cpu/linear.cpp), so the activation is
// not a separate pass over memory. Elsewhere (GPU, f64, non-contiguous
// weights) the backend's default, the GEMM then the activation. The same
// values and gradients either way. Backward is one elementwise pass for the
// activation's derivative, then linear's backward. nn::LinearAct (nn/fuse.h)
// calls them.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   GeluApprox approximate = GeluApprox::none);

// linear(relu(linear(x, w1, b1)), w2, b2) and the same with GELU, as one op:
// a two-layer MLP. The forward is linear_relu/linear_gelu's GEMM and the
// second GEMM; the backward computes the first layer's output gradient times
// the activation's derivative in one backend call (linear_backward_act: on
// the CPU in f32, in the store of the GEMM that makes it), so neither the
// separate elementwise pass nor the (N, hidden) gradient before it exists.
// The same values and gradients as the three ops (tested bit for bit).
// nn::FusedMLP (nn/fuse.h) calls them; the GPT block's MLP calls gelu_mlp.
Tensor relu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2);
Tensor gelu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                GeluApprox approximate = GeluApprox::none);

}  // namespace snug::nn::functional

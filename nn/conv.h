// SPDX-License-Identifier: MIT
// The convolution layer, Conv2d (LibTorch's name and defaults); its math is in
// nn/functional_conv.cpp. Pooling layers: nn/pool.h; batch norm: nn/batch_norm.h.
#pragma once
#include <array>

#include <snug/nn/functional.h>
#include <snug/nn/module.h>

namespace snug::nn {

// x (N, in, H, W) -> (N, out, Ho, Wo). weight (out, in/groups, k, k), bias (out).
// Init as PyTorch (kaiming_uniform with a = sqrt(5)): weight and bias
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * k * k.
// groups == in == out gives a depthwise convolution.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1,
         int64_t groups = 1, bool bias = true, TensorOptions opt = {});
  // Non-square kernels and per-dimension geometry ((h, w) pairs).
  Conv2d(int64_t in, int64_t out, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
         std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups = 1, bool bias = true,
         TensorOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, groups;
  std::array<int64_t, 2> kernel_size, stride, padding, dilation;

 protected:
  // For layers that stand in for a Conv2d (NOTE [ Replacing a child ] in
  // nn/module.h): like's geometry, and no tensors; the subclass registers what it holds.
  Conv2d(std::string name, const Conv2d& like);
};

}  // namespace snug::nn

// SPDX-License-Identifier: MIT
// Convolution, pooling and batch-norm layers (LibTorch names and defaults).
// The math is in nn/functional_conv.cpp, functional_pool.cpp, functional_norm.cpp.
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

// Per-channel normalization of (N, C, H, W) (or (N, C)). weight = 1, bias = 0;
// buffers running_mean = 0, running_var = 1, num_batches_tracked (i64 scalar).
// Training uses batch statistics and updates the running ones; eval uses them.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       TensorOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t num_features;
  double eps, momentum;
};

// stride 0 (the default) means stride = kernel.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  std::array<int64_t, 2> kernel_size, stride, padding;
};

// count_include_pad, as PyTorch's default.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  std::array<int64_t, 2> kernel_size, stride, padding;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::array<int64_t, 2> output_size);
  explicit AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d({output_size, output_size}) {}
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  std::array<int64_t, 2> output_size;
};

}  // namespace snug::nn

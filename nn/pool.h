// SPDX-License-Identifier: MIT
// The pooling layers, MaxPool2d, AvgPool2d and AdaptiveAvgPool2d (LibTorch's
// names and defaults); their math is in nn/functional_pool.cpp.
#pragma once
#include <array>

#include <snug/nn/functional.h>
#include <snug/nn/module.h>

namespace snug::nn {

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

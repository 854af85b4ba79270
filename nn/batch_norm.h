// SPDX-License-Identifier: MIT
// The batch-norm layer, BatchNorm2d (LibTorch's name and defaults); its math is
// in nn/functional_norm.cpp.
#pragma once
#include <snug/nn/functional.h>
#include <snug/nn/module.h>

namespace snug::nn {

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

}  // namespace snug::nn

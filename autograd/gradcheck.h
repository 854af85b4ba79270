// SPDX-License-Identifier: MIT
// gradcheck: compares autograd gradients with central finite differences,
// computed in f64.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <snug/core/tensor.h>

namespace snug::autograd {

struct GradcheckOptions {
  double eps = 1e-6;  // finite-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // first mismatch: input, element, analytic vs numeric
  explicit operator bool() const { return ok; }
};

// fn maps inputs to one output tensor (any shape). Inputs are converted to
// f64 copies that require grad (integer inputs are passed through untouched
// and not checked). The check uses a random projection of the output
// (sum(out * w)) so every output element contributes.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opt = {});

}  // namespace snug::autograd

// The backward engine and autograd::grad.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace snug::autograd {

// Runs backward from roots with the given seeds (undefined = ones for a
// one-element root). Accumulates into leaves' .grad.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              bool retain_graph = false);

// Gradients of outputs with respect to inputs, returned in order (undefined
// when an input is unreachable and allow_unused). Leaves' .grad is not touched.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

}  // namespace snug::autograd

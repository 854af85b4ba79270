// SPDX-License-Identifier: MIT
// The backward engine and autograd::grad.
#pragma once
#include <vector>

#include <snug/core/tensor.h>

namespace snug::autograd {

// Runs backward from roots with the given seeds (undefined = ones for a
// one-element root). Accumulates into leaves' .grad.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {}, bool retain_graph = false);

// Gradients of outputs with respect to inputs, returned in order (undefined
// when an input is unreachable and allow_unused). Leaves' .grad is not touched.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

// True while a node's backward runs in a backward pass that frees its saved
// tensors once it returns (retain_graph is false). A backward closure that is
// done with one of its saved tensors halfway may then release it early
// (FunctionNode::saved[i].release()), e.g. linear_relu / linear_gelu drop the
// activation before their GEMMs.
bool saved_tensors_die_after_node();

}  // namespace snug::autograd

// SPDX-License-Identifier: MIT
// Pruning: masks that zero parts of a parameter and stay applied through
// training (docs/compression.md).
//
//   prune::l1_unstructured(*fc, "weight", 0.9);          // 90% smallest |w| -> 0
//   prune::ln_structured(*conv, "weight", 0.5, 2, 0);    // half the output channels
//   ... train: gradients are masked, weights re-masked after every optimizer step
//   prune::remove(*fc, "weight");                         // permanent; the mask is dropped
//
// A parameter is addressed as in PyTorch, by its module and its name there.
// Pruning zeroes the pruned entries at once, registers a gradient hook that
// multiplies the parameter's gradient by the mask, and (once per process) a
// global optimizer step post-hook that multiplies every masked parameter an
// optimizer stepped by its mask again, so weight decay, momentum or a
// quantized optimizer state can never bring a pruned weight back.
//
// Masks are f32 tensors of the parameter's shape, 1 = kept, 0 = pruned. They
// live in a registry keyed (weakly) by the parameter, not in the module's
// state_dict; `mask(p)` returns one. Pruning a parameter again combines the
// masks: the amount is then a fraction of the entries (or slices) still
// alive, as PyTorch's iterative pruning does.
//
// Unstructured pruning keeps the full-size tensor; prune/compact.h turns
// structured pruning into smaller tensors.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <snug/core/generator.h>
#include <snug/nn/attention.h>
#include <snug/nn/module.h>

namespace snug::prune {

// amount in [0, 1]: the fraction of the still-alive entries to prune.
void l1_unstructured(nn::Module& m, const std::string& name, double amount);
void random_unstructured(nn::Module& m, const std::string& name, double amount, Generator* gen = nullptr);

// Prunes whole slices along `dim` (dim 0 of a Linear weight = output rows, of
// a Conv2d weight = output channels) with the smallest L`n` norm (n >= 1, or
// INFINITY). amount: fraction of the still-alive slices.
void ln_structured(nn::Module& m, const std::string& name, double amount, double n, int64_t dim);

// Output channels of a Linear or Conv2d: ln_structured on "weight" along
// dim 0, and the same channels of "bias" (if any) masked too, so a pruned
// channel outputs exactly zero and prune::compact can drop it.
void output_channels(nn::Module& layer, double amount, double n = 2);

// Whole attention heads: the round(amount * alive heads) heads with the
// smallest L2 norm of their q, k, v rows and proj columns are masked (those
// rows of qkv's weight and bias, those columns of proj's weight), so
// prune::compact can remove them.
void attention_heads(nn::MultiheadAttention& attn, double amount);

// L1 over all the given parameters together: the smallest |w| across them
// are pruned, so layers end up with different sparsities.
using ParamRef = std::pair<nn::Module*, std::string>;
void global_unstructured(const std::vector<ParamRef>& params, double amount);

// N:M semi-structured: in every group of M consecutive entries along the last
// dim of the parameter viewed as (rows, K) (K = in for Linear, in*kh*kw for
// Conv2d), the N largest |w| are kept (2:4 = NVIDIA's sparse tensor cores).
// K must be a multiple of M.
void n_m_unstructured(nn::Module& m, const std::string& name, int64_t n = 2, int64_t m_group = 4);

// Any 0/1 mask of the parameter's shape.
void custom_from_mask(nn::Module& m, const std::string& name, const Tensor& mask);

// Makes pruning permanent: the weight keeps its zeros, the mask and the
// gradient masking go away. Throws ValueError if the parameter is not pruned.
void remove(nn::Module& m, const std::string& name);
// remove() for every pruned parameter of model (and its descendants).
void remove_all(nn::Module& model);

bool is_pruned(const Tensor& param);
Tensor mask(const Tensor& param);  // undefined when not pruned
// Multiplies every pruned parameter of `params` by its mask (what the step hook does).
void apply_masks(const std::vector<Tensor>& params);

// ---- report --------------------------------------------------------------------
struct LayerSparsity {
  std::string name;  // "3.weight"
  Shape shape;
  int64_t numel = 0;
  int64_t zeros = 0;    // exact zeros in the values
  bool masked = false;  // has a live mask
  double sparsity() const { return numel ? double(zeros) / double(numel) : 0.0; }
};
// Every parameter of the model, in named_parameters order.
std::vector<LayerSparsity> sparsity_report(const nn::Module& model);
// A table: name, shape, numel, zeros, sparsity, masked; and a total line.
std::string format_sparsity_report(const std::vector<LayerSparsity>& rows);

}  // namespace snug::prune

// SPDX-License-Identifier: MIT
// Autocast: a thread-local scope in which ops choose their own precision
// (torch.autocast for the CPU). docs/mixed_precision.md has the policy table
// and why it is shaped this way; in short:
//
//   lower  (cast floating inputs to the scope's f16/bf16): matmul, linear,
//          conv2d, attention (its matmuls), and the output of embedding.
//   widen  (cast f16/bf16 inputs to f32, f32 result): log_softmax, the losses
//          (nll, mse, bce-with-logits), sum/mean/var/logsumexp, exp/log/pow.
//   f32 math, f32 result, no cast: cross_entropy reads 16-bit logits as they
//          are and writes their gradient in their dtype (NOTE [ Fused
//          cross-entropy ] in core/fused_defaults.cpp).
//   f32 math, input's storage: softmax, causal_softmax, layer_norm,
//          batch_norm. Their kernels widen every element to f32 and keep
//          statistics in f32; the output keeps the input's dtype, because the
//          next op (a matmul) would round it to half anyway and saving an f32
//          copy for backward would double the biggest activations.
//   anything else runs in the dtype it is given (elementwise ops on half
//          storage compute in f32 per element: core/half.h).
//
// Casts of a parameter (a leaf that requires grad) are cached for the
// lifetime of the outermost scope, keyed by the tensor and its version
// counter, so a weight used by several ops, or in several micro-batches of a
// step, is converted once. The casts are differentiable (Tensor::to): the
// gradient comes back to the parameter in its own dtype.
#pragma once
#include <cstddef>

#include <snug/core/tensor.h>

namespace snug::autocast {

bool is_enabled();
DType dtype();  // the scope's low-precision dtype (meaningful when enabled)

// Enables autocast with `dt` (f16 or bf16; anything else is a DTypeError)
// for its lifetime, or disables it with enabled = false (for a region that
// must run in full precision). When the outermost enabled scope ends, the
// cast cache is cleared.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dt, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
  int depth_before_;
};

// Drops the cached casts (e.g. between steps inside one long scope).
void clear_cache();
std::size_t cache_size();
// The bytes of the cached casts: parameters' 16-bit copies that live until
// the outermost scope ends (the memory planner counts them, nn/planner.h).
std::size_t cache_bytes();

// The policy helpers the ops call. Both return x unchanged outside a scope.
// lower: an f32 (or other-half) floating x cast to the scope's dtype; cached
// when x is a parameter and grad mode is on. Integer and f64 tensors pass.
Tensor lower(const Tensor& x);
// widen: an f16/bf16 x cast to f32 (differentiable). Others pass.
Tensor widen(const Tensor& x);

}  // namespace snug::autocast

namespace snug {
using autocast::AutocastGuard;
}

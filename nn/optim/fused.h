// SPDX-License-Identifier: MIT
// Fused, allocation-free optimizer updates (CPU loops here, CUDA kernels in
// cuda/fused.cu): one pass over a parameter, its gradient and its state, in
// place. The per-element math is core/update_math.h, shared by both.
//
// Why: the op-by-op update (optimizer.cpp's reference path) makes several
// temporaries per parameter and passes over memory five or six times. The
// fused loop makes none and passes once, so an optimizer step that has
// created its state cannot run out of memory halfway: either every parameter
// is updated or none is (NOTE [ Failure-atomic optimizer steps ] in
// optimizer.cpp). The reference path stays for tensors these kernels do not
// take (strided tensors), and tests/test_optim.cpp compares the two
// (tests/test_cuda_parity.cpp compares the CUDA kernels with the CPU loops).
#pragma once
#include <snug/core/tensor.h>

namespace snug::nn::optim::fused {

// Whether the kernels take these tensors: all on CPU devices or all on one
// CUDA device, contiguous, the target and state f32, the gradient f32, f16 or
// bf16, equal sizes.
bool supported(const Tensor& target, const Tensor& grad, const Tensor& s1 = Tensor(), const Tensor& s2 = Tensor());

struct AdamArgs {
  double lr, beta1, beta2, eps, weight_decay;
  double bias_correction1, bias_correction2;  // 1 - beta^t
  bool decoupled;                             // AdamW: p -= lr wd p; Adam: g += wd p
};
// (p, m, v) f32 (n); g (n) f32/f16/bf16. Per element, in f32:
//   AdamW: p -= lr wd p        Adam: g += wd p
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamArgs& a);

struct SgdArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first;  // the momentum buffer's first step: buf = d (as PyTorch)
};
// p f32 (n), g (n) f32/f16/bf16, buf f32 (n) or undefined when momentum is 0:
//   d = g + wd p;  buf = first ? d : momentum buf + (1 - dampening) d
//   step = nesterov ? d + momentum buf : buf (or d without momentum);  p -= lr step
void sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdArgs& a);

}  // namespace snug::nn::optim::fused

// SPDX-License-Identifier: MIT
// The per-element math of the fused optimizer updates and of the loss
// scaler's unscale, written once for the host and the GPU (NOTE [ One
// definition of each op's math ] in core/functors.h). The CPU loops
// (core/cpu/update.cpp) and the CUDA kernels (cuda/update.cu) both call these,
// with constants prepared once on the host by the make_* functions, so both
// devices start from the same f32 constants. The step's hyperparameters
// (AdamArgs, SgdArgs) are what Backend::adam_update / sgd_update take
// (core/backend.h); the composed default (core/update.cpp) uses them as they are.
//
// A leaf header apart from base/macros.h: nvcc compiles it too.
#pragma once
#include <cmath>

#include <snug/base/macros.h>

namespace snug::update {

// ---- Adam / AdamW -----------------------------------------------------------
// Per element, in f32:
//   AdamW: p *= 1 - lr wd        Adam: g += wd p
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)      (bc = 1 - beta^t)
struct AdamArgs {
  double lr, beta1, beta2, eps, weight_decay;
  double bias_correction1, bias_correction2;  // 1 - beta^t
  bool decoupled;                             // AdamW: p -= lr wd p; Adam: g += wd p
};

struct AdamConsts {
  float b1, b2, c1, c2, eps, wd, decay, inv_sqrt_bc2, step;
  bool decoupled;
};

inline AdamConsts make_adam_consts(double lr, double beta1, double beta2, double eps, double weight_decay,
                                   double bias_correction1, double bias_correction2, bool decoupled) {
  AdamConsts k;
  k.b1 = static_cast<float>(beta1);
  k.b2 = static_cast<float>(beta2);
  k.c1 = static_cast<float>(1 - beta1);
  k.c2 = static_cast<float>(1 - beta2);
  k.eps = static_cast<float>(eps);
  k.wd = static_cast<float>(weight_decay);
  k.decay = static_cast<float>(1 - lr * weight_decay);
  k.inv_sqrt_bc2 = static_cast<float>(1 / std::sqrt(bias_correction2));
  k.step = static_cast<float>(lr / bias_correction1);
  k.decoupled = decoupled;
  return k;
}
inline AdamConsts make_adam_consts(const AdamArgs& a) {
  return make_adam_consts(a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.bias_correction1, a.bias_correction2,
                          a.decoupled);
}

// p, m, v: the element's f32 parameter and moments, updated in place; g: its
// gradient widened to f32.
SNUG_HOST_DEVICE SNUG_INLINE void adam(float& p, float g, float& m, float& v, const AdamConsts& k) {
  float pi = p;
  if (k.decoupled)
    pi *= k.decay;
  else
    g += k.wd * pi;
  const float mi = k.b1 * m + k.c1 * g;
  const float vi = k.b2 * v + k.c2 * g * g;
  m = mi;
  v = vi;
#ifdef __CUDA_ARCH__
  const float root = ::sqrtf(vi);  // correctly rounded, as the host's (nvcc's default -prec-sqrt=true)
#else
  const float root = std::sqrt(vi);
#endif
  p = pi - k.step * (mi / (root * k.inv_sqrt_bc2 + k.eps));
}

// ---- SGD --------------------------------------------------------------------
// Per element, in f32:
//   d = g + wd p;  buf = first ? d : momentum buf + (1 - dampening) d
//   step = nesterov ? d + momentum buf : buf (or d without momentum);  p -= lr step
struct SgdArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first;  // the momentum buffer's first step: buf = d (as PyTorch)
};

struct SgdConsts {
  float lr, mom, damp, wd;
  bool nesterov, first;
};

inline SgdConsts make_sgd_consts(double lr, double momentum, double dampening, double weight_decay, bool nesterov,
                                 bool first) {
  return {static_cast<float>(lr),
          static_cast<float>(momentum),
          static_cast<float>(1 - dampening),
          static_cast<float>(weight_decay),
          nesterov,
          first};
}
inline SgdConsts make_sgd_consts(const SgdArgs& a) {
  return make_sgd_consts(a.lr, a.momentum, a.dampening, a.weight_decay, a.nesterov, a.first);
}

// With a momentum buffer (momentum != 0) and without: two functions rather
// than a branch on a pointer, so each CPU loop vectorizes.
SNUG_HOST_DEVICE SNUG_INLINE void sgd_momentum(float& p, float g, float& buf, const SgdConsts& k) {
  const float d = g + k.wd * p;
  const float b = k.first ? d : k.mom * buf + k.damp * d;
  buf = b;
  p = p - k.lr * (k.nesterov ? d + k.mom * b : b);
}
SNUG_HOST_DEVICE SNUG_INLINE void sgd_plain(float& p, float g, const SgdConsts& k) { p = p - k.lr * (g + k.wd * p); }

// ---- loss scaler ------------------------------------------------------------
// The unscaled gradient element and whether it is finite. In the element's
// compute type: f32 for f32/f16/bf16 gradients (widened first, so small
// values survive the division), f64 for f64.
template <class C>
SNUG_HOST_DEVICE SNUG_INLINE C unscale(C g, C inv, bool& finite) {
  const C y = g * inv;  // a tiny scale (inv > 1) may overflow here: that counts as inf too
#ifdef __CUDA_ARCH__
  finite = ::isfinite(y);
#else
  finite = std::isfinite(y);
#endif
  return y;
}

}  // namespace snug::update

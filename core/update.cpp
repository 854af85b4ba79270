// SPDX-License-Identifier: MIT
// The composed defaults of Backend::adam_update, sgd_update and
// unscale_and_check (core/backend.h; NOTE [ Composed defaults, fused
// overrides ]): the optimizer updates and the loss scaler's unscale op by op,
// from raw ops and the backend's own primitives. They take what the fused
// kernels do not (f64 or strided parameters, a gradient on another device
// type, a backend without an override) and are the definition those kernels
// follow (tests/test_optim.cpp checks both against plain arithmetic). Unlike
// the kernels, they allocate temporaries.
#include <cmath>

#include <snug/core/backend.h>
#include <snug/core/raw_ops.h>

namespace snug {

namespace {

// The in-place steps of Tensor::mul_ and Tensor::add_ without the tape (core/
// records nothing): the same backend calls, so the same numbers. t and o
// share t's shape, dtype and device here.
void scale_in_place(Backend& be, const Tensor& t, double a) {
  be.unary(UnaryOp::affine, a, 0.0, t, t);
  t.bump_version();
}
// t += alpha o
void add_in_place(Backend& be, const Tensor& t, const Tensor& o, double alpha) {
  const Tensor s = alpha == 1.0 ? o : raw::binary_scalar(BinaryOp::mul, o, alpha);
  if (s.dtype() == t.dtype() && s.device() == t.device() && s.shape() == t.shape() && s.storage() != t.storage())
    be.binary(BinaryOp::add, t, s, t);
  else
    raw::copy_(t, raw::binary(BinaryOp::add, t, s));
  t.bump_version();
}
// The gradient in the parameter's dtype.
Tensor grad_like(const Tensor& g, const Tensor& p) { return g.dtype() == p.dtype() ? g : raw::to_dtype(g, p.dtype()); }

}  // namespace

// m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
// p -= lr (m / bc1) / (sqrt(v / bc2) + eps)   (AdamW decays p first; Adam adds wd p to g)
void Backend::adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                          const update::AdamArgs& a) {
  SNUG_CHECK(m.defined() && v.defined(), ValueError, "adam_update: exp_avg and exp_avg_sq must be given");
  Tensor grad = grad_like(g, p);
  if (a.decoupled) {
    if (a.weight_decay != 0) scale_in_place(*this, p, 1 - a.lr * a.weight_decay);
  } else if (a.weight_decay != 0) {
    grad = raw::binary(BinaryOp::add, grad, raw::binary_scalar(BinaryOp::mul, p, a.weight_decay));
  }
  scale_in_place(*this, m, a.beta1);
  add_in_place(*this, m, grad, 1 - a.beta1);
  scale_in_place(*this, v, a.beta2);
  add_in_place(*this, v, raw::binary(BinaryOp::mul, grad, grad), 1 - a.beta2);
  // denom = sqrt(v) / sqrt(bc2) + eps;  p -= (lr / bc1) m / denom
  const Tensor denom =
      raw::unary(UnaryOp::affine, raw::unary(UnaryOp::sqrt, v), 1.0 / std::sqrt(a.bias_correction2), a.eps);
  add_in_place(*this, p, raw::binary(BinaryOp::div, m, denom), -a.lr / a.bias_correction1);
}

// d = g + wd p;  buf = first ? d : momentum buf + (1 - dampening) d
// p -= lr (nesterov ? d + momentum buf : buf)   (d itself without momentum)
void Backend::sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const update::SgdArgs& a) {
  SNUG_CHECK(a.momentum == 0 || buf.defined(), ValueError, "sgd_update: momentum ", a.momentum,
             " needs a momentum buffer");
  const Tensor grad = grad_like(g, p);
  Tensor d = a.weight_decay != 0
                 ? raw::binary(BinaryOp::add, grad, raw::binary_scalar(BinaryOp::mul, p, a.weight_decay))
                 : grad;
  if (a.momentum != 0) {
    if (a.first) {
      raw::copy_(buf, d);
    } else {
      scale_in_place(*this, buf, a.momentum);
      add_in_place(*this, buf, d, 1 - a.dampening);
    }
    d = a.nesterov ? raw::binary(BinaryOp::add, d, raw::binary_scalar(BinaryOp::mul, buf, a.momentum)) : buf;
  }
  add_in_place(*this, p, d, -a.lr);
}

void Backend::unscale_and_check(const Tensor& g, const Tensor& out, double inv, const Tensor& flags, int64_t slot) {
  SNUG_CHECK(flags.defined() && flags.dtype() == DType::i32 && slot >= 0 && slot < flags.numel(), ValueError,
             "unscale_and_check: flags must be an i32 tensor with slot ", slot);
  // Half gradients are widened first: g / scale in f16 would flush small values to zero.
  if (out.is_same(g)) {
    scale_in_place(*this, g, inv);
  } else {
    raw::copy_(out, raw::binary_scalar(BinaryOp::mul, raw::to_dtype(g, out.dtype()), inv));
  }
  // sum(out * 0) is 0 for finite out and NaN as soon as one element is inf or
  // NaN; NaN != NaN. The flag stays on the device.
  const Tensor probe = raw::reduce(ReduceOp::sum, raw::binary_scalar(BinaryOp::mul, out, 0.0), {}, false);
  const Tensor bad = raw::to_dtype(raw::compare(CompareOp::ne, probe, probe), DType::i32);
  const Tensor f = raw::slice(flags, 0, slot, slot + 1, 1);
  raw::copy_(f, raw::binary(BinaryOp::maximum, f, bad));
}

}  // namespace snug

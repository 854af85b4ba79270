// SPDX-License-Identifier: MIT
// nn::functional::batch_norm: checks, the backend's batch norm entries
// (core/backend.h: composed from raw ops by default, core/batch_norm.cpp;
// cuDNN's fused batch norm on a GPU, cuda/batch_norm.cpp) and the backward
// beside it. Statistics are taken in f32 (f64 for f64 inputs), whatever the
// input's dtype.
#include <cmath>

#include <snug/autograd/node.h>
#include <snug/core/backend.h>
#include <snug/core/raw_ops.h>
#include <snug/nn/functional.h>

namespace snug::nn::functional {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

// x (N, C, *) normalized per channel c over the M = N * prod(*) values of that channel:
//   training: mu, var = mean and biased variance over (N, *);  eval: the running buffers
//   xhat = (x - mu) * rstd,  rstd = 1 / sqrt(var + eps);  y = xhat * weight + bias
//   training also updates, under no-grad, running = (1 - momentum) running + momentum stat,
//   with the unbiased variance var * M / (M - 1) going into running_var (as PyTorch).
// backward, with gh = g * weight:
//   training: gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat))  (means over (N, *))
//   eval:     gx = rstd * gh
//   gw = sum(g * xhat),  gb = sum(g)  (sums over (N, *))
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  SNUG_CHECK(x.dim() >= 2, ShapeError, "batch_norm: expected input (N, C, ...), got ", shape_str(x.shape()));
  SNUG_CHECK(x.is_floating_point(), DTypeError, "batch_norm: expected a floating input, got ", dtype_name(x.dtype()));
  const int64_t C = x.size(1);
  const int64_t M = C ? x.numel() / C : 0;  // values per channel
  const char* names[] = {"running_mean", "running_var", "weight", "bias"};
  const Tensor* given[] = {&running_mean, &running_var, &weight, &bias};
  for (int i = 0; i < 4; ++i)
    if (given[i]->defined()) {
      SNUG_CHECK(given[i]->dim() == 1 && given[i]->size(0) == C, ShapeError, "batch_norm: ", names[i], " of shape ",
                 shape_str(given[i]->shape()), " does not match the ", C, " channels of input ", shape_str(x.shape()));
      SNUG_CHECK(given[i]->device() == x.device(), DeviceError, "batch_norm: ", names[i], " is on ",
                 given[i]->device().str(), " but the input is on ", x.device().str());
    }
  SNUG_CHECK(running_mean.defined() == running_var.defined(), ValueError,
             "batch_norm: give both running_mean and running_var, or neither");
  if (training)
    SNUG_CHECK(M > 1, ValueError, "batch_norm: expected more than 1 value per channel when training, got input ",
               shape_str(x.shape()));
  else
    SNUG_CHECK(running_mean.defined(), ValueError,
               "batch_norm: evaluation mode needs running_mean and running_var (none were given)");
  SNUG_CHECK(momentum >= 0 && momentum <= 1, ValueError, "batch_norm: momentum must be in [0, 1], got ", momentum);
  Backend& be = backend_for(x.device());
  const DType cd = x.dtype() == DType::f64 ? DType::f64 : DType::f32;  // the statistics' dtype
  const TensorOptions so(cd, x.device());
  const Tensor xc = raw::contiguous(x);
  Tensor y = empty(x.shape(), x.options());
  Tensor mean, invstd;  // (C): what backward reads besides x and weight
  if (training) {
    mean = empty({C}, so);
    invstd = empty({C}, so);
    be.batch_norm_forward_training(xc, weight, bias, running_mean, running_var, momentum, eps, y, mean, invstd);
    if (running_mean.defined()) {
      running_mean.bump_version();
      running_var.bump_version();
    }
  } else {
    be.batch_norm_forward_inference(xc, weight, bias, running_mean, running_var, eps, y);
  }

  if (any_requires_grad({x, weight, bias})) {
    if (!training) {  // backward's statistics: the running ones (copied: they may change before backward runs)
      mean = raw::clone(raw::to_dtype(running_mean, cd));
      invstd = raw::unary(UnaryOp::rsqrt, raw::unary(UnaryOp::affine, raw::to_dtype(running_var, cd), 1.0, eps));
    }
    const TensorOptions wo = weight.defined() ? weight.options() : x.options();
    const TensorOptions bo = bias.defined() ? bias.options() : x.options();
    record("batch_norm", {x, weight, bias}, {y}, {xc, weight, mean, invstd},
           [training, eps, C, wo, bo](FunctionNode& self, const G& g) -> G {
             const Tensor xs = self.saved_at(0), ws = self.saved_at(1);
             const Tensor gy = raw::contiguous(raw::to_dtype(g[0], xs.dtype()));
             const Tensor gx = self.needs_grad(0) ? empty(xs.shape(), xs.options()) : Tensor();
             const Tensor gw = self.needs_grad(1) ? empty({C}, wo) : Tensor();
             const Tensor gb = self.needs_grad(2) ? empty({C}, bo) : Tensor();
             backend_for(xs.device())
                 .batch_norm_backward(gy, xs, ws, self.saved_at(2), self.saved_at(3), training, eps, gx, gw, gb);
             return {gx, gw, gb};
           });
  }
  return y;
}

}  // namespace snug::nn::functional

// SPDX-License-Identifier: MIT
// nn::functional::batch_norm, composed from raw ops (so it runs on every
// backend that has them) with its backward beside it. Statistics are taken
// in f32 (f64 for f64 inputs), whatever the input's dtype. On a GPU the
// cases cuDNN takes go to its fused batch norm instead (cuda/batch_norm.cpp):
// one call each way, the same formulas.
#include <cmath>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/node.h>
#include <snug/core/raw_ops.h>
#include <snug/cuda/fused_api.h>
#include <snug/nn/functional.h>

namespace snug::nn::functional {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

namespace {

// Statistics (and cuDNN's per-channel tensors) are f64 for f64 inputs, f32 otherwise.
DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// cuDNN's batch norm takes x of 2 to 4 dims in f32/f16/f64 with the per-channel
// tensors in f32 (f64 for f64 x). Evaluation goes to it only when no gradient
// is wanted (its inference call has no backward); anything else composes.
bool cudnn_takes(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                 const Tensor& bias, bool training) {
  if (!x.device().is_cuda() || x.dim() > 4) return false;
  if (x.dtype() != DType::f32 && x.dtype() != DType::f16 && x.dtype() != DType::f64) return false;
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    if (t->defined() && t->dtype() != stats_dtype(x.dtype())) return false;
  if (!training && any_requires_grad({x, weight, bias})) return false;
  return true;
}

// The cuDNN path (checks done by batch_norm). Missing weight and bias are
// ones and zeros; their gradients are then dropped.
Tensor batch_norm_cudnn(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                        const Tensor& bias, bool training, double momentum, double eps) {
  const int64_t C = x.size(1);
  const TensorOptions po(stats_dtype(x.dtype()), x.device());
  Tensor xc = raw::contiguous(x);
  Tensor w = weight.defined() ? raw::contiguous(weight) : ones({C}, po);
  Tensor b = bias.defined() ? raw::contiguous(bias) : zeros({C}, po);
  Tensor y = empty(x.shape(), x.options());
  if (!training) {
    cuda::batch_norm_forward_inference(xc, w, b, raw::contiguous(running_mean), raw::contiguous(running_var), eps, y);
    return y;
  }
  Tensor mean = empty({C}, po), invstd = empty({C}, po);
  cuda::batch_norm_forward_training(xc, w, b, running_mean, running_var, momentum, eps, y, mean, invstd);
  if (running_mean.defined()) {
    running_mean.bump_version();
    running_var.bump_version();
  }
  if (any_requires_grad({x, weight, bias})) {
    record("batch_norm", {x, weight, bias}, {y}, {xc, w, mean, invstd}, [eps](FunctionNode& self, const G& g) -> G {
      Tensor xs = self.saved_at(0), ws = self.saved_at(1);
      Tensor go = raw::contiguous(raw::to_dtype(g[0], xs.dtype()));
      Tensor gx = empty(xs.shape(), xs.options()), gw = empty(ws.shape(), ws.options()),
             gb = empty(ws.shape(), ws.options());
      cuda::batch_norm_backward(xs, go, ws, self.saved_at(2), self.saved_at(3), eps, gx, gw, gb);
      return {self.needs_grad(0) ? gx : Tensor(), self.needs_grad(1) ? gw : Tensor(),
              self.needs_grad(2) ? gb : Tensor()};
    });
  }
  return y;
}

}  // namespace

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
  if (cudnn_takes(x, running_mean, running_var, weight, bias, training))
    return batch_norm_cudnn(x, running_mean, running_var, weight, bias, training, momentum, eps);

  const DType dt = x.dtype(), cd = stats_dtype(dt);
  std::vector<int64_t> dims{0};  // every dim but the channel dim
  Shape bshape(size_t(x.dim()), 1);  // (1, C, 1, ...): per-channel values broadcast over x
  bshape[1] = C;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  auto per_channel = [&](const Tensor& t) { return raw::view(raw::contiguous(raw::to_dtype(t, cd)), bshape); };

  Tensor xf = raw::to_dtype(x, cd);
  Tensor mu, rstd;
  if (training) {
    mu = raw::reduce(ReduceOp::mean, xf, dims, true);  // (1, C, 1, ...)
    Tensor xc = raw::binary(BinaryOp::sub, xf, mu);
    Tensor var = raw::reduce(ReduceOp::mean, raw::unary(UnaryOp::square, xc), dims, true);  // biased
    rstd = raw::unary(UnaryOp::rsqrt, raw::unary(UnaryOp::affine, var, 1.0, eps));
    if (running_mean.defined()) {
      NoGradGuard ng;
      const double unbias = double(M) / double(M - 1);
      Tensor rm = raw::binary(BinaryOp::add, raw::unary(UnaryOp::affine, raw::to_dtype(running_mean, cd), 1 - momentum, 0),
                              raw::unary(UnaryOp::affine, raw::view(mu, {C}), momentum, 0));
      Tensor rv = raw::binary(BinaryOp::add, raw::unary(UnaryOp::affine, raw::to_dtype(running_var, cd), 1 - momentum, 0),
                              raw::unary(UnaryOp::affine, raw::view(var, {C}), momentum * unbias, 0));
      raw::copy_(running_mean, rm);
      raw::copy_(running_var, rv);
      running_mean.bump_version();
      running_var.bump_version();
    }
  } else {
    mu = per_channel(running_mean);
    rstd = raw::unary(UnaryOp::rsqrt, raw::unary(UnaryOp::affine, per_channel(running_var), 1.0, eps));
  }
  Tensor xhat = raw::binary(BinaryOp::mul, raw::binary(BinaryOp::sub, xf, mu), rstd);  // x's shape, cd
  Tensor w = weight.defined() ? per_channel(weight) : Tensor();
  Tensor y = xhat;
  if (w.defined()) y = raw::binary(BinaryOp::mul, y, w);
  if (bias.defined()) y = raw::binary(BinaryOp::add, y, per_channel(bias));
  y = raw::to_dtype(y, dt);
  if (y.is_same(xhat)) y = raw::clone(y);  // no affine, same dtype: y must not alias the saved xhat

  if (any_requires_grad({x, weight, bias})) {
    const DType wdt = weight.defined() ? weight.dtype() : dt, bdt = bias.defined() ? bias.dtype() : dt;
    record("batch_norm", {x, weight, bias}, {y}, {xhat, rstd, w},
           [training, dims, dt, wdt, bdt](FunctionNode& self, const G& g) -> G {
             Tensor xh = self.saved_at(0), rs = self.saved_at(1), ws = self.saved_at(2);
             Tensor go = raw::to_dtype(g[0], xh.dtype());
             Tensor gx, gw, gb;
             if (self.needs_grad(1))
               gw = raw::to_dtype(raw::reduce(ReduceOp::sum, raw::binary(BinaryOp::mul, go, xh), dims, false), wdt);
             if (self.needs_grad(2)) gb = raw::to_dtype(raw::reduce(ReduceOp::sum, go, dims, false), bdt);
             if (self.needs_grad(0)) {
               Tensor gh = ws.defined() ? raw::binary(BinaryOp::mul, go, ws) : go;
               if (training) {
                 Tensor m1 = raw::reduce(ReduceOp::mean, gh, dims, true);
                 Tensor m2 = raw::reduce(ReduceOp::mean, raw::binary(BinaryOp::mul, gh, xh), dims, true);
                 gh = raw::binary(BinaryOp::sub, raw::binary(BinaryOp::sub, gh, m1), raw::binary(BinaryOp::mul, xh, m2));
               }
               gx = raw::to_dtype(raw::binary(BinaryOp::mul, gh, rs), dt);
             }
             return {gx, gw, gb};
           });
  }
  return y;
}

}  // namespace snug::nn::functional

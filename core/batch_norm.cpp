// SPDX-License-Identifier: MIT
// The composed default of Backend::batch_norm_* (core/backend.h; NOTE
// [ Composed defaults, fused overrides ]): batch norm from raw ops and the
// backend's own primitives, so it runs on every backend that has them. It is
// the CPU's batch norm; the CUDA backend takes the cases cuDNN takes
// (cuda/batch_norm.cpp) and hands the rest here. The formulas are beside
// nn::functional::batch_norm (nn/functional_norm.cpp), which calls these.
#include <snug/core/backend.h>
#include <snug/core/raw_ops.h>

namespace snug {

namespace {

// Statistics are f64 for f64 inputs, f32 otherwise.
DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// x (N, C, *): the dims a channel's statistics run over (all but 1), and the
// shape (1, C, 1, ...) that broadcasts a per-channel value over x.
struct Channels {
  std::vector<int64_t> dims{0};
  Shape bshape;
  explicit Channels(const Tensor& x) : bshape(size_t(x.dim()), 1) {
    bshape[1] = x.size(1);
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  }
  // t (C) as (1, C, 1, ...) in dtype cd.
  Tensor per_channel(const Tensor& t, DType cd) const {
    return raw::view(raw::contiguous(raw::to_dtype(t, cd)), bshape);
  }
};

// out = a op b (a and b share a dtype): straight into out when it has that
// dtype, else computed there and converted as raw::to_dtype would.
void binary_to(Backend& be, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.dtype() == a.dtype())
    be.binary(op, a, b, out);
  else
    be.copy(raw::binary(op, a, b), out);
}

// y = xc * rstd * weight + bias, left to right, the last step written into y.
// xc = x - mean and rstd in the stats dtype; weight and bias may be undefined.
void normalize_to(Backend& be, const Channels& ch, const Tensor& xc, const Tensor& rstd, const Tensor& weight,
                  const Tensor& bias, const Tensor& y) {
  const DType cd = xc.dtype();
  std::vector<std::pair<BinaryOp, Tensor>> steps{{BinaryOp::mul, rstd}};
  if (weight.defined()) steps.emplace_back(BinaryOp::mul, ch.per_channel(weight, cd));
  if (bias.defined()) steps.emplace_back(BinaryOp::add, ch.per_channel(bias, cd));
  Tensor r = xc;
  for (size_t i = 0; i + 1 < steps.size(); ++i) r = raw::binary(steps[i].first, r, steps[i].second);
  binary_to(be, steps.back().first, r, steps.back().second, y);
}

}  // namespace

void Backend::batch_norm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                          const Tensor& running_mean, const Tensor& running_var, double momentum,
                                          double eps, const Tensor& y, const Tensor& mean, const Tensor& invstd) {
  const int64_t C = x.size(1), M = C ? x.numel() / C : 0;  // M: values per channel
  const DType cd = stats_dtype(x.dtype());
  const Channels ch(x);
  const Tensor xf = raw::to_dtype(x, cd);
  const Tensor mu = raw::reduce(ReduceOp::mean, xf, ch.dims, true);  // (1, C, 1, ...)
  const Tensor xc = raw::binary(BinaryOp::sub, xf, mu);
  const Tensor var = raw::reduce(ReduceOp::mean, raw::unary(UnaryOp::square, xc), ch.dims, true);  // biased
  const Tensor rstd = raw::unary(UnaryOp::rsqrt, raw::unary(UnaryOp::affine, var, 1.0, eps));
  if (running_mean.defined()) {
    const double unbias = double(M) / double(M - 1);
    const Tensor rm =
        raw::binary(BinaryOp::add, raw::unary(UnaryOp::affine, raw::to_dtype(running_mean, cd), 1 - momentum, 0),
                    raw::unary(UnaryOp::affine, raw::view(mu, {C}), momentum, 0));
    const Tensor rv =
        raw::binary(BinaryOp::add, raw::unary(UnaryOp::affine, raw::to_dtype(running_var, cd), 1 - momentum, 0),
                    raw::unary(UnaryOp::affine, raw::view(var, {C}), momentum * unbias, 0));
    raw::copy_(running_mean, rm);
    raw::copy_(running_var, rv);
  }
  raw::copy_(mean, raw::view(mu, {C}));
  raw::copy_(invstd, raw::view(rstd, {C}));
  normalize_to(*this, ch, xc, rstd, weight, bias, y);
}

void Backend::batch_norm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                           const Tensor& running_mean, const Tensor& running_var, double eps,
                                           const Tensor& y) {
  const DType cd = stats_dtype(x.dtype());
  const Channels ch(x);
  const Tensor rstd =
      raw::unary(UnaryOp::rsqrt, raw::unary(UnaryOp::affine, ch.per_channel(running_var, cd), 1.0, eps));
  const Tensor xc = raw::binary(BinaryOp::sub, raw::to_dtype(x, cd), ch.per_channel(running_mean, cd));
  normalize_to(*this, ch, xc, rstd, weight, bias, y);
}

// With gh = gy * weight and xhat = (x - mean) * invstd (recomputed: the
// forward keeps only x and the (C) statistics):
//   training: gx = invstd (gh - mean(gh) - xhat mean(gh xhat));  eval: gx = invstd gh
//   gweight = sum(gy xhat),  gbias = sum(gy)   (means and sums over all dims but 1)
void Backend::batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& invstd, bool training, double eps, const Tensor& gx,
                                  const Tensor& gweight, const Tensor& gbias) {
  const DType cd = stats_dtype(x.dtype());
  const Channels ch(x);
  const Tensor rs = ch.per_channel(invstd, cd);
  const Tensor xc = raw::binary(BinaryOp::sub, raw::to_dtype(x, cd), ch.per_channel(mean, cd));
  const Tensor xh = raw::binary(BinaryOp::mul, xc, rs);
  const Tensor go = raw::to_dtype(gy, cd);
  if (gweight.defined())
    raw::copy_(gweight, raw::reduce(ReduceOp::sum, raw::binary(BinaryOp::mul, go, xh), ch.dims, false));
  if (gbias.defined()) raw::copy_(gbias, raw::reduce(ReduceOp::sum, go, ch.dims, false));
  if (!gx.defined()) return;
  Tensor gh = weight.defined() ? raw::binary(BinaryOp::mul, go, ch.per_channel(weight, cd)) : go;
  if (training) {
    const Tensor m1 = raw::reduce(ReduceOp::mean, gh, ch.dims, true);
    const Tensor m2 = raw::reduce(ReduceOp::mean, raw::binary(BinaryOp::mul, gh, xh), ch.dims, true);
    gh = raw::binary(BinaryOp::sub, raw::binary(BinaryOp::sub, gh, m1), raw::binary(BinaryOp::mul, xh, m2));
  }
  binary_to(*this, BinaryOp::mul, gh, rs, gx);
}

}  // namespace snug

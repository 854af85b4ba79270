// SPDX-License-Identifier: MIT
#include <snug/autograd/gradcheck.h>

#include <cmath>

#include <snug/autograd/engine.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>

namespace snug::autograd {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  std::vector<Tensor> xs;
  std::vector<bool> checked;
  for (const Tensor& in : inputs) {
    if (in.defined() && in.is_floating_point()) {
      Tensor x = raw::clone(raw::to_dtype(in, DType::f64));
      x.requires_grad_(true);
      xs.push_back(x);
      checked.push_back(true);
    } else {
      xs.push_back(in);
      checked.push_back(false);
    }
  }
  Tensor out0 = fn(xs);
  SNUG_CHECK(out0.is_floating_point(), DTypeError, "gradcheck: function output must be floating");
  Generator gen(12345);
  Tensor w = rand(out0.shape(), TensorOptions(DType::f64, out0.device()), &gen) + 0.5;
  auto scalar_of = [&](const std::vector<Tensor>& args) {
    NoGradGuard ng;
    Tensor o = raw::to_dtype(fn(args), DType::f64);
    return raw::reduce(ReduceOp::sum, raw::binary(BinaryOp::mul, o, w), {}, false).item();
  };
  // Analytic.
  Tensor loss = sum(out0.to(DType::f64) * w);
  std::vector<Tensor> wrt;
  std::vector<size_t> idx;
  for (size_t i = 0; i < xs.size(); ++i)
    if (checked[i]) {
      wrt.push_back(xs[i]);
      idx.push_back(i);
    }
  std::vector<Tensor> analytic = grad({loss}, wrt, {}, false, true);
  // Numeric, element by element.
  for (size_t k = 0; k < wrt.size(); ++k) {
    size_t i = idx[k];
    Tensor x = xs[i];
    int64_t n = x.numel();
    std::vector<double> a =
        analytic[k].defined() ? raw::contiguous(analytic[k]).to_vector<double>() : std::vector<double>(n, 0.0);
    for (int64_t e = 0; e < n; ++e) {
      std::vector<Tensor> plus = xs, minus = xs;
      Tensor xp = raw::clone(x), xm = raw::clone(x);
      double* pp = static_cast<double*>(xp.data_ptr());
      double* pm = static_cast<double*>(xm.data_ptr());
      pp[e] += opt.eps;
      pm[e] -= opt.eps;
      plus[i] = xp;
      minus[i] = xm;
      double num = (scalar_of(plus) - scalar_of(minus)) / (2 * opt.eps);
      double diff = std::fabs(num - a[e]);
      if (!(diff <= opt.atol + opt.rtol * std::fabs(num))) {
        GradcheckResult r;
        r.ok = false;
        r.message = str("gradcheck: input ", i, " element ", e, ": analytic ", a[e], " vs numeric ", num, " (|diff| ",
                        diff, ")");
        return r;
      }
    }
  }
  return {};
}

}  // namespace snug::autograd

// SPDX-License-Identifier: MIT
#include <snug/nn/batch_norm.h>

#include <snug/autograd/grad_mode.h>

namespace snug::nn {

namespace F = functional;

BatchNorm2d::BatchNorm2d(int64_t c, double e, double m, bool affine, TensorOptions opt)
    : Module("BatchNorm2d"), num_features(c), eps(e), momentum(m) {
  SNUG_CHECK(c > 0, ValueError, "BatchNorm2d: channels must be positive, got ", c);
  SNUG_CHECK(e > 0, ValueError, "BatchNorm2d: eps must be positive, got ", e);
  SNUG_CHECK(m >= 0 && m <= 1, ValueError, "BatchNorm2d: momentum must be in [0, 1], got ", m);
  TensorOptions o = opt.with_requires_grad(false);
  if (affine) {
    weight = register_parameter("weight", ones({c}, o));
    bias = register_parameter("bias", zeros({c}, o));
  }
  running_mean = register_buffer("running_mean", zeros({c}, o));
  running_var = register_buffer("running_var", ones({c}, o));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, TensorOptions(DType::i64, o.device)));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  SNUG_CHECK(x.dim() >= 2 && x.size(1) == num_features, ShapeError, "BatchNorm2d(", num_features, "): input of shape ",
             shape_str(x.shape()), " does not have ", num_features, " channels in dim 1");
  if (is_training()) {
    NoGradGuard ng;
    num_batches_tracked.add_(1.0);
  }
  return F::batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum, eps);
}

std::string BatchNorm2d::repr() const {
  return str("BatchNorm2d(", num_features, ", eps=", eps, ", momentum=", momentum,
             ", affine=", weight.defined() ? "true" : "false", ")");
}

}  // namespace snug::nn

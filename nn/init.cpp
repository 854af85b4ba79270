// SPDX-License-Identifier: MIT
#include <snug/nn/init.h>

#include <cmath>

#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_ops.h>

namespace snug::nn::init {

namespace {
void assign(const Tensor& t, const Tensor& v) {
  NoGradGuard ng;
  raw::copy_(t, v);
  t.bump_version();
}
}  // namespace

void normal_(const Tensor& t, double mean, double std, Generator* gen) {
  SNUG_CHECK(std >= 0, ValueError, "init::normal_: std must be >= 0, got ", std);
  Tensor r = randn(t.shape(), TensorOptions(DType::f32, t.device()), gen);
  assign(t, raw::unary(UnaryOp::affine, r, std, mean));
}
void uniform_(const Tensor& t, double lo, double hi, Generator* gen) {
  SNUG_CHECK(lo <= hi, ValueError, "init::uniform_: expected lo <= hi, got ", lo, " and ", hi);
  Tensor r = rand(t.shape(), TensorOptions(DType::f32, t.device()), gen);
  assign(t, raw::unary(UnaryOp::affine, r, hi - lo, lo));
}
void zeros_(const Tensor& t) { constant_(t, 0.0); }
void ones_(const Tensor& t) { constant_(t, 1.0); }
void constant_(const Tensor& t, double v) {
  NoGradGuard ng;
  raw::fill_(t, v);
  t.bump_version();
}

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  SNUG_CHECK(t.dim() >= 2, ShapeError, "init: fan in/out need a weight with at least 2 dims, got ",
             shape_str(t.shape()));
  int64_t field = 1;
  for (int64_t i = 2; i < t.dim(); ++i) field *= t.size(i);
  return {t.size(1) * field, t.size(0) * field};
}

void kaiming_normal_(const Tensor& t, double a, Generator* gen) {
  double std = std::sqrt(2.0 / (1 + a * a)) / std::sqrt(static_cast<double>(fans(t).first));
  normal_(t, 0, std, gen);
}
void kaiming_uniform_(const Tensor& t, double a, Generator* gen) {
  double bound = std::sqrt(3.0) * std::sqrt(2.0 / (1 + a * a)) / std::sqrt(static_cast<double>(fans(t).first));
  uniform_(t, -bound, bound, gen);
}
void xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  normal_(t, 0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)), gen);
}
void xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
  uniform_(t, -bound, bound, gen);
}

}  // namespace snug::nn::init

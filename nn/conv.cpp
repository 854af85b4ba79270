// SPDX-License-Identifier: MIT
#include <snug/nn/conv.h>

#include <cmath>

#include <snug/autograd/grad_mode.h>
#include <snug/nn/init.h>

namespace snug::nn {

namespace F = functional;

namespace {
std::string pair_str(std::array<int64_t, 2> a) { return a[0] == a[1] ? str(a[0]) : str("(", a[0], ", ", a[1], ")"); }
}  // namespace

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d, int64_t g, bool has_bias,
               TensorOptions opt)
    : Conv2d(in, out, {k, k}, {s, s}, {p, p}, {d, d}, g, has_bias, opt) {}

Conv2d::Conv2d(int64_t in, int64_t out, std::array<int64_t, 2> k, std::array<int64_t, 2> s, std::array<int64_t, 2> p,
               std::array<int64_t, 2> d, int64_t g, bool has_bias, TensorOptions opt)
    : Module("Conv2d"),
      in_channels(in),
      out_channels(out),
      groups(g),
      kernel_size(k),
      stride(s),
      padding(p),
      dilation(d) {
  SNUG_CHECK(in > 0 && out > 0, ValueError, "Conv2d: channels must be positive, got in=", in, ", out=", out);
  SNUG_CHECK(g >= 1 && in % g == 0 && out % g == 0, ValueError, "Conv2d: groups=", g, " must divide both in=", in,
             " and out=", out);
  SNUG_CHECK(k[0] >= 1 && k[1] >= 1, ValueError, "Conv2d: kernel size must be >= 1, got ", pair_str(k));
  SNUG_CHECK(s[0] >= 1 && s[1] >= 1 && d[0] >= 1 && d[1] >= 1 && p[0] >= 0 && p[1] >= 0, ValueError,
             "Conv2d: expected stride >= 1, dilation >= 1, padding >= 0, got stride ", pair_str(s), ", dilation ",
             pair_str(d), ", padding ", pair_str(p));
  // kaiming_uniform(a = sqrt(5)) gives bound sqrt(6 / (1 + 5) / fan_in) = 1 / sqrt(fan_in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(in / g * k[0] * k[1]));
  weight = register_parameter("weight", empty({out, in / g, k[0], k[1]}, opt.with_requires_grad(false)));
  init::uniform_(weight, -bound, bound);
  if (has_bias) {
    bias = register_parameter("bias", empty({out}, opt.with_requires_grad(false)));
    init::uniform_(bias, -bound, bound);
  }
}

Conv2d::Conv2d(std::string name, const Conv2d& like)
    : Module(std::move(name)),
      in_channels(like.in_channels),
      out_channels(like.out_channels),
      groups(like.groups),
      kernel_size(like.kernel_size),
      stride(like.stride),
      padding(like.padding),
      dilation(like.dilation) {}

Tensor Conv2d::forward(const Tensor& x) { return F::conv2d(x, weight, bias, stride, padding, dilation, groups); }

std::string Conv2d::repr() const {
  std::string s = str("Conv2d(", in_channels, ", ", out_channels, ", kernel_size=", pair_str(kernel_size));
  if (stride != std::array<int64_t, 2>{1, 1}) s += str(", stride=", pair_str(stride));
  if (padding != std::array<int64_t, 2>{0, 0}) s += str(", padding=", pair_str(padding));
  if (dilation != std::array<int64_t, 2>{1, 1}) s += str(", dilation=", pair_str(dilation));
  if (groups != 1) s += str(", groups=", groups);
  if (!bias.defined()) s += ", bias=false";
  return s + ")";
}

}  // namespace snug::nn

// SPDX-License-Identifier: MIT
#include <snug/nn/pool.h>

namespace snug::nn {

namespace F = functional;

namespace {
std::string pair_str(std::array<int64_t, 2> a) { return a[0] == a[1] ? str(a[0]) : str("(", a[0], ", ", a[1], ")"); }
}  // namespace

MaxPool2d::MaxPool2d(int64_t k, int64_t s, int64_t p)
    : Module("MaxPool2d"), kernel_size{k, k}, stride{s == 0 ? k : s, s == 0 ? k : s}, padding{p, p} {
  SNUG_CHECK(k >= 1 && s >= 0 && p >= 0 && 2 * p <= k, ValueError,
             "MaxPool2d: expected kernel >= 1, stride >= 0 (0 = kernel), 0 <= padding <= kernel / 2, got kernel ", k,
             ", stride ", s, ", padding ", p);
}
Tensor MaxPool2d::forward(const Tensor& x) { return F::max_pool2d(x, kernel_size, stride, padding); }
std::string MaxPool2d::repr() const {
  return str("MaxPool2d(kernel_size=", pair_str(kernel_size), ", stride=", pair_str(stride),
             ", padding=", pair_str(padding), ")");
}

AvgPool2d::AvgPool2d(int64_t k, int64_t s, int64_t p)
    : Module("AvgPool2d"), kernel_size{k, k}, stride{s == 0 ? k : s, s == 0 ? k : s}, padding{p, p} {
  SNUG_CHECK(k >= 1 && s >= 0 && p >= 0 && 2 * p <= k, ValueError,
             "AvgPool2d: expected kernel >= 1, stride >= 0 (0 = kernel), 0 <= padding <= kernel / 2, got kernel ", k,
             ", stride ", s, ", padding ", p);
}
Tensor AvgPool2d::forward(const Tensor& x) { return F::avg_pool2d(x, kernel_size, stride, padding); }
std::string AvgPool2d::repr() const {
  return str("AvgPool2d(kernel_size=", pair_str(kernel_size), ", stride=", pair_str(stride),
             ", padding=", pair_str(padding), ")");
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::array<int64_t, 2> o) : Module("AdaptiveAvgPool2d"), output_size(o) {
  SNUG_CHECK(o[0] >= 1 && o[1] >= 1, ValueError, "AdaptiveAvgPool2d: output size must be >= 1, got ", pair_str(o));
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return F::adaptive_avg_pool2d(x, output_size); }
std::string AdaptiveAvgPool2d::repr() const { return str("AdaptiveAvgPool2d(", pair_str(output_size), ")"); }

}  // namespace snug::nn

// SPDX-License-Identifier: MIT
// A consumer of snug: the umbrella header, a tensor, one backward, a module.
// Prints d/dw of sum((x w)^2) and exits 0 when it matches the closed form.
// Built without CMAKE_CXX_STANDARD (snug::snug asks for C++20) and, with
// pkg-config, by a plain Makefile (tests/consumer/Makefile).
#include <cmath>
#include <cstdio>
#include <cstring>

#include <snug/snug.h>

// snug's headers must not need Eigen: it is private to libsnug, and no
// include path of the consumer leads to it.
#if __has_include(<Eigen/Core>)
#error "Eigen is on the consumer's include path; snug::snug must not put it there"
#endif
static_assert(__cplusplus >= 202002L, "snug::snug should have asked for C++20");

int main() {
  using namespace snug;
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});              // (2,3)
  Tensor w = from_vector<float>({0.5f, -1.0f, 2.0f}, {3, 1}).requires_grad_();  // (3,1)
  const Tensor y = matmul(x, w);                                                // (2,1)
  const Tensor loss = sum(y * y);                                               // ()
  loss.backward();

  // d loss / d w = 2 x^T (x w)
  const auto g = w.grad().to_vector<float>();
  const double want0 = 2 * (1 * 4.5 + 4 * 9.0);  // x w = [4.5, 9]
  nn::Linear lin(3, 2);
  const Tensor z = lin.forward(x);  // (2,2)
  std::printf("snug %s consumer: loss %.3f, dloss/dw[0] %.3f (want %.3f), linear out %s, cuda devices %d\n", version(),
              loss.item(), g[0], want0, shape_str(z.shape()).c_str(), cuda::device_count());
  const bool version_ok = std::strcmp(version(), SNUG_VERSION_STRING) == 0;
  if (!version_ok) std::printf("libsnug is %s, the headers %s\n", version(), SNUG_VERSION_STRING);
  return std::fabs(g[0] - want0) < 1e-3 && version_ok ? 0 : 1;
}

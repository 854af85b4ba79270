// SPDX-License-Identifier: MIT
// A consumer of snug: only the umbrella header, tensors, one backward.
// Prints d/dw of sum((x w)^2) and exits 0 when it matches the closed form.
#include <cmath>
#include <cstdio>

#include <snug/snug.h>

int main() {
  using namespace snug;
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});   // (2,3)
  Tensor w = from_vector<float>({0.5f, -1.0f, 2.0f}, {3, 1}).requires_grad_();  // (3,1)
  const Tensor y = matmul(x, w);   // (2,1)
  const Tensor loss = sum(y * y);  // ()
  loss.backward();

  // d loss / d w = 2 x^T (x w)
  const auto g = w.grad().to_vector<float>();
  const double want0 = 2 * (1 * 4.5 + 4 * 9.0);  // x w = [4.5, 9]
  std::printf("snug consumer: loss %.3f, dloss/dw[0] %.3f (want %.3f), cuda devices %d\n", loss.item(), g[0],
              want0, cuda::device_count());
  return std::fabs(g[0] - want0) < 1e-3 ? 0 : 1;
}

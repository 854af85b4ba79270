// SPDX-License-Identifier: MIT
// softmax and log_softmax along one dim: forward and backward side by side.
// Both save only their output y; the gradients are written in terms of it
// (the kernels are core/cpu/softmax.cpp):
//   softmax:      dx = y * (g - sum(g * y))
//   log_softmax:  dx = g - exp(y) * sum(g)
#include <snug/autograd/autocast.h>
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/raw_ops.h>

namespace snug {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

namespace {
Tensor softmax_impl(const char* name, const Tensor& x, int64_t dim, bool log) {
  Tensor y = raw::softmax(x, dim, log);
  if (any_requires_grad({x}))
    record(name, {x}, {y}, {y}, [dim, log](FunctionNode& self, const G& g) -> G {
      return {raw::softmax_backward(g[0], self.saved_at(0), dim, log)};
    });
  return y;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }
// Under autocast log_softmax widens to f32 (its output feeds losses); softmax
// computes in f32 and keeps the input's storage (autograd/autocast.h).
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl("log_softmax", autocast::widen(x), dim, true); }

Tensor Tensor::softmax(int64_t dim) const { return snug::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return snug::log_softmax(*this, dim); }

}  // namespace snug

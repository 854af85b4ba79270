// SPDX-License-Identifier: MIT
// dropout: out = x * mask / (1 - p), mask ~ Bernoulli(1 - p) from Philox.
// Element i keeps when uniform_at(state, i) >= p, on every device, so a
// recomputed (checkpointed) segment that restores the generator state gets
// the exact same mask.
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>

namespace snug {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  SNUG_CHECK(p >= 0 && p <= 1, ValueError, "dropout: probability must be in [0, 1], got ", p);
  SNUG_CHECK(x.is_floating_point(), DTypeError, "dropout: expected a floating tensor, got ", dtype_name(x.dtype()));
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  // The scaled mask: 1/(1-p) where kept, 0 where dropped, in x's dtype.
  Tensor u = rand(x.shape(), TensorOptions(DType::f32, x.device()), gen);
  Tensor keep = raw::compare_scalar(CompareOp::ge, u, p);
  // Scaled in x's dtype directly: an f32 detour would round 1/(1-p) to f32
  // for f64 inputs, so forward and backward (which scales in g's dtype) would
  // use different scales.
  Tensor mask = raw::unary(UnaryOp::affine, raw::to_dtype(keep, x.dtype()), 1.0 / (1.0 - p), 0.0);
  Tensor out = raw::binary(BinaryOp::mul, x, mask);
  if (any_requires_grad({x})) {
    // Save the 1-byte keep mask, not the scaled mask in x's dtype.
    double scale = 1.0 / (1.0 - p);
    record("dropout", {x}, {out}, {keep}, [scale](FunctionNode& self, const G& g) -> G {
      Tensor m = raw::to_dtype(self.saved_at(0), g[0].dtype());
      return {raw::binary(BinaryOp::mul, g[0], raw::unary(UnaryOp::affine, m, scale, 0.0))};
    });
  }
  return out;
}

}  // namespace snug

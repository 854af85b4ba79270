// SPDX-License-Identifier: MIT
// dropout: out = x * mask / (1 - p), mask ~ Bernoulli(1 - p) from Philox.
// Element i keeps when uniform_at(state, i) >= p, on every device, so a
// recomputed (checkpointed) segment that restores the generator state gets
// the exact same mask.
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/backend.h>
#include <snug/core/generator.h>
#include <snug/core/profiler.h>
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
  // One backend entry each way (core/backend.h: dropout, dropout_backward; on a GPU one kernel):
  // the keep mask from the generator's Philox stream, as rand() would draw it, and the product
  // with 1/(1-p) in x's dtype.
  Generator& g = gen ? *gen : default_generator();
  const Tensor xc = raw::contiguous(x);
  const PhiloxState st = g.reserve((static_cast<uint64_t>(xc.numel()) + 3) / 4);
  Tensor out = empty(x.shape(), x.options()), keep = empty(x.shape(), TensorOptions(DType::b8, x.device()));
  {
    profiler::RecordOp rec("dropout", x.device());
    if (xc.numel() > 0) backend_for(x.device()).dropout(xc, p, st, out, keep);
  }
  if (any_requires_grad({x})) {
    // Save the 1-byte keep mask, not the scaled mask in x's dtype.
    const double scale = 1.0 / (1.0 - p);
    record("dropout", {x}, {out}, {keep}, [scale](FunctionNode& self, const G& g) -> G {
      const Tensor gc = raw::contiguous(g[0]);
      Tensor gx = empty(gc.shape(), gc.options());
      profiler::RecordOp rec("dropout_backward", gc.device());
      if (gc.numel() > 0) backend_for(gc.device()).dropout_backward(gc, self.saved_at(0), scale, gx);
      return {gx};
    });
  }
  return out;
}

}  // namespace snug

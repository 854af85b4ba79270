// SPDX-License-Identifier: MIT
// matmul: out = a @ b, torch.matmul semantics.
//   a (..., M, K) @ b (..., K, N) -> (..., M, N), batch dims broadcast.
//   backward: ga = g @ b^T, gb = a^T @ g, each summed over broadcast batch dims.
#include <snug/autograd/autocast.h>
#include <snug/autograd/checkpoint.h>
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/raw_ops.h>

namespace snug {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  // Autocast: low precision (autograd/autocast.h); identity outside a scope.
  const Tensor a = autocast::lower(a_in), b = autocast::lower(b_in);
  // Check the contracted dim here, with the caller's shapes: the 1-D forms
  // below reach raw::matmul with unsqueezed shapes the caller never wrote.
  SNUG_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "matmul: both arguments need at least 1 dim, got shapes ",
             shape_str(a.shape()), " and ", shape_str(b.shape()));
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  SNUG_CHECK(ka == kb, ShapeError, "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
             " cannot be multiplied (", ka, " vs ", kb, " in the contracted dim)");
  // 1-D operands: promote with differentiable views, then drop the added dim.
  if (a.dim() == 1 && b.dim() == 1) {
    // Dot product: [1, K] @ [K, 1] -> [1, 1] -> 0-d. (Going through the 1-D . 2-D
    // branch would squeeze dim -2 of a 1-D result, which does not exist.)
    return matmul(a.unsqueeze(0), b.unsqueeze(1)).squeeze();
  }
  if (a.dim() == 1) {
    Tensor r = matmul(a.unsqueeze(0), b);
    return r.squeeze(-2);
  }
  if (b.dim() == 1 && a.dim() >= 2) {
    Tensor r = matmul(a, b.unsqueeze(1));
    return r.squeeze(-1);
  }
  Tensor out = autograd::keep_or_compute("matmul", [&] { return std::vector<Tensor>{raw::matmul(a, b)}; })[0];
  if (any_requires_grad({a, b})) {
    Shape sa = a.shape(), sb = b.shape();
    record("matmul", {a, b}, {out}, {b.requires_grad() ? a : Tensor(), a.requires_grad() ? b : Tensor()},
           [sa, sb](FunctionNode& self, const G& g) -> G {
             Tensor ga, gb;
             if (self.needs_grad(0)) ga = raw::sum_to(raw::matmul(g[0], raw::transpose(self.saved_at(1), -1, -2)), sa);
             if (self.needs_grad(1)) gb = raw::sum_to(raw::matmul(raw::transpose(self.saved_at(0), -1, -2), g[0]), sb);
             return {ga, gb};
           });
  }
  return out;
}

}  // namespace snug

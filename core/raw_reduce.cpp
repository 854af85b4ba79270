// SPDX-License-Identifier: MIT
// Raw ops, reductions: checks, output allocation, dispatch (softmax: core/raw_softmax.cpp).
#include <algorithm>

#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>

namespace snug::raw {

namespace {

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string r = "[";
  for (size_t i = 0; i < dims.size(); ++i) r += (i ? ", " : "") + std::to_string(dims[i]);
  return r + "]";
}

// x's shape with the dims in `reduced` set to 1.
Shape keepdim_shape(const Shape& shape, const std::vector<int64_t>& reduced) {
  Shape s = shape;
  for (int64_t d : reduced) s[d] = 1;
  return s;
}

// x's shape without the dims in `reduced`.
Shape dropdim_shape(const Shape& shape, const std::vector<int64_t>& reduced) {
  Shape s;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
    if (std::find(reduced.begin(), reduced.end(), i) == reduced.end()) s.push_back(shape[i]);
  return s;
}

// The same contiguous tensor seen with another shape of the same numel.
Tensor reshaped(const Tensor& t, const Shape& shape) {
  return as_strided(t, shape, contiguous_strides(shape), t.offset());
}

}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  profiler::RecordOp rec(reduce_op_name(op), x.device());
  const char* name = reduce_op_name(op);
  const int64_t nd = x.dim();
  std::vector<int64_t> red;
  if (dims.empty()) {
    for (int64_t i = 0; i < nd; ++i) red.push_back(i);
  } else {
    for (int64_t d : dims) {
      int64_t w = wrap_dim(d, nd, name);
      if (nd == 0) continue;  // dim 0 / -1 of a 0-d tensor: nothing to reduce
      SNUG_CHECK(std::find(red.begin(), red.end(), w) == red.end(), ShapeError, name, ": dim ", d,
                 " appears more than once in dims ", dims_str(dims));
      red.push_back(w);
    }
  }
  SNUG_CHECK(op != ReduceOp::mean || is_floating(x.dtype()), DTypeError,
             "mean: expected a floating dtype (f32, f16, bf16, f64), got ", dtype_name(x.dtype()),
             "; convert with .to(kFloat32)");
  SNUG_CHECK(x.dtype() != DType::b8 || op != ReduceOp::prod, DTypeError, "prod: not defined for bool tensors");
  if (op == ReduceOp::max || op == ReduceOp::min) {
    for (int64_t d : red)
      SNUG_CHECK(x.shape()[d] != 0, ShapeError, name, ": cannot reduce over dim ", d, " of shape ",
                 shape_str(x.shape()), ", which has size 0 (the ", name, " of no elements is undefined)");
  }
  // Sums and products of integers (and bool) widen to i64, as in PyTorch.
  const bool widen = (op == ReduceOp::sum || op == ReduceOp::prod) && is_integral(x.dtype());
  const DType odt = widen ? DType::i64 : x.dtype();
  const Shape keep = keepdim_shape(x.shape(), red);
  Tensor out = empty(keepdim ? keep : dropdim_shape(x.shape(), red), TensorOptions(odt, x.device()));
  backend_for(x.device()).reduce(op, x, red, keepdim ? out : reshaped(out, keep));
  return out;
}

Tensor arg_reduce(bool is_max, const Tensor& x, int64_t dim, bool keepdim) {
  profiler::RecordOp rec(is_max ? "argmax" : "argmin", x.device());
  const char* name = is_max ? "argmax" : "argmin";
  const int64_t d = wrap_dim(dim, x.dim(), name);
  if (x.dim() == 0) return zeros({}, TensorOptions(DType::i64, x.device()));
  SNUG_CHECK(x.shape()[d] != 0, ShapeError, name, ": dim ", dim, " of shape ", shape_str(x.shape()),
             " has size 0 (the ", name, " of no elements is undefined)");
  const Shape keep = keepdim_shape(x.shape(), {d});
  Tensor out = empty(keepdim ? keep : dropdim_shape(x.shape(), {d}), TensorOptions(DType::i64, x.device()));
  backend_for(x.device()).arg_reduce(is_max, x, d, keepdim ? out : reshaped(out, keep));
  return out;
}

// grad has a shape that `shape` broadcasts to; sums the broadcast dims away.
Tensor sum_to(const Tensor& grad, const Shape& shape) {
  profiler::RecordOp rec("sum_to", grad.device());
  if (grad.shape() == shape) return grad;
  const int64_t nd = grad.dim(), ns = static_cast<int64_t>(shape.size()), lead = nd - ns;
  SNUG_CHECK(lead >= 0, ShapeError, "sum_to: cannot sum a gradient of shape ", shape_str(grad.shape()),
             " down to shape ", shape_str(shape), ", which has more dims");
  std::vector<int64_t> red;
  for (int64_t i = 0; i < nd; ++i) {
    if (i < lead) {
      red.push_back(i);
      continue;
    }
    int64_t want = shape[i - lead], have = grad.shape()[i];
    if (want == have) continue;
    SNUG_CHECK(want == 1, ShapeError, "sum_to: shape ", shape_str(shape),
               " does not broadcast to the gradient's shape ", shape_str(grad.shape()), " (dim ", i, ": ", want, " vs ",
               have, ")");
    red.push_back(i);
  }
  Tensor out = empty(shape, grad.options());
  backend_for(grad.device()).reduce(ReduceOp::sum, grad, red, reshaped(out, keepdim_shape(grad.shape(), red)));
  return out;
}

}  // namespace snug::raw

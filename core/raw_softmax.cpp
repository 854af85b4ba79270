// SPDX-License-Identifier: MIT
// Raw ops, softmax and log-softmax (forward and backward): checks, output
// allocation, dispatch to the backend (core/cpu/softmax.cpp, cuda/softmax.cu).
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>

namespace snug::raw {

Tensor softmax(const Tensor& x, int64_t dim, bool log) {
  profiler::RecordOp rec(log ? "log_softmax" : "softmax", x.device());
  const char* name = log ? "log_softmax" : "softmax";
  SNUG_CHECK(is_floating(x.dtype()), DTypeError, name, ": expected a floating dtype (f32, f16, bf16, f64), got ",
             dtype_name(x.dtype()), "; convert with .to(kFloat32)");
  const int64_t d = wrap_dim(dim, x.dim(), name);
  Tensor out = empty(x.shape(), x.options());
  if (x.dim() == 0) {  // a 0-d tensor is one row of one element
    backend_for(x.device()).softmax(as_strided(x, {1}, {1}, x.offset()), 0, log, as_strided(out, {1}, {1}, 0));
  } else {
    backend_for(x.device()).softmax(x, d, log, out);
  }
  return out;
}

Tensor softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim, bool log) {
  profiler::RecordOp rec(log ? "log_softmax_backward" : "softmax_backward", y.device());
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  SNUG_CHECK(grad_out.shape() == y.shape(), ShapeError, name, ": grad_out has shape ", shape_str(grad_out.shape()),
             " but the forward output has shape ", shape_str(y.shape()), " (expected them equal)");
  SNUG_CHECK(grad_out.dtype() == y.dtype(), DTypeError, name, ": grad_out has dtype ", dtype_name(grad_out.dtype()),
             " but the forward output has dtype ", dtype_name(y.dtype()), " (expected them equal)");
  SNUG_CHECK(grad_out.device() == y.device(), DeviceError, name, ": tensors are on different devices (",
             grad_out.device().str(), " and ", y.device().str(), "); move one with .to(device)");
  SNUG_CHECK(is_floating(y.dtype()), DTypeError, name, ": expected a floating dtype (f32, f16, bf16, f64), got ",
             dtype_name(y.dtype()));
  const int64_t d = wrap_dim(dim, y.dim(), name);
  Tensor gin = empty(y.shape(), y.options());
  if (y.dim() == 0) {
    backend_for(y.device())
        .softmax_backward(as_strided(grad_out, {1}, {1}, grad_out.offset()), as_strided(y, {1}, {1}, y.offset()), 0,
                          log, as_strided(gin, {1}, {1}, 0));
  } else {
    backend_for(y.device()).softmax_backward(grad_out, y, d, log, gin);
  }
  return gin;
}

}  // namespace snug::raw

// SPDX-License-Identifier: MIT
// Raw, non-recording ops: checks, output allocation, dispatch to the backend.
// Public differentiable ops (autograd/ops.h) call these and record a node.
// User code normally wants the autograd versions; these are for kernels,
// backward functions and NoGrad-style internals.
#pragma once
#include <optional>
#include <vector>

#include <snug/core/backend.h>
#include <snug/core/tensor.h>

namespace snug::raw {

Tensor unary(UnaryOp op, const Tensor& x, double a = 0, double b = 0);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);  // broadcast + type promotion
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s);  // a op s (s takes a's dtype)
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);
Tensor compare_scalar(CompareOp op, const Tensor& a, double s);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// Reductions; empty dims = all dims.
Tensor reduce(ReduceOp op, const Tensor& x, std::vector<int64_t> dims, bool keepdim);
Tensor arg_reduce(bool is_max, const Tensor& x, int64_t dim, bool keepdim);
// Sums grad (broadcast shape) back down to `shape` (undoing broadcasting).
Tensor sum_to(const Tensor& grad, const Shape& shape);

Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul semantics
Tensor softmax(const Tensor& x, int64_t dim, bool log);
Tensor softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim, bool log);

Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);  // out-of-place
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);  // out-of-place

// Views without autograd (the geometry math lives here, once).
Tensor as_strided(const Tensor& x, const Shape& shape, const Strides& strides, int64_t offset);
Tensor view(const Tensor& x, Shape shape);  // throws if strides are incompatible
bool can_view(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Shape infer_shape(const Shape& shape, int64_t numel, const char* op);  // resolves one -1

Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);                  // always a fresh contiguous copy
Tensor to_dtype(const Tensor& x, DType dtype);  // x itself if already dtype
Tensor to_device(const Tensor& x, Device device);
// x on `device`, the copy queued on device's current stream without waiting
// for it (Backend::copy_across_async): that stream may use the result at
// once, another stream after memory::wait_stream. A pinned host source's
// block is not reused until the copy is done (memory::pinned_record_stream);
// a pageable one is staged by the driver, as good as synchronous. Where no
// asynchronous copy exists (CPU devices) it is to_device.
Tensor to_device_async(const Tensor& x, Device device);
void copy_(const Tensor& dst, const Tensor& src);  // broadcast + convert + cross-device
void fill_(const Tensor& dst, double value);

}  // namespace snug::raw

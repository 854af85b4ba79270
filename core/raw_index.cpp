// SPDX-License-Identifier: MIT
// Raw ops, concatenation and indexing: checks, output allocation, dispatch.
// Index values are checked here, once for every backend, so kernels can
// trust them (an out-of-range index is an IndexError, never a wild read).
#include <vector>

#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>

namespace snug::raw {

namespace {

void check_device(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  SNUG_CHECK(a.device() == b.device(), DeviceError, op, ": ", an, " is on ", a.device().str(), " but ", bn, " is on ",
             b.device().str(), " (expected the same device; move one with .to(device))");
}

void check_index_dtype(const Tensor& index, const char* op) {
  SNUG_CHECK(index.dtype() == DType::i64, DTypeError, op, ": index must have dtype i64, got ",
             dtype_name(index.dtype()), "; convert it with .to(kInt64)");
}

void check_not_scalar(const Tensor& x, const char* op, const char* what) {
  SNUG_CHECK(x.dim() > 0, ShapeError, op, ": ", what, " is 0-d; expected at least 1 dim");
}

// Every value of index (any shape and strides) lies in [0, size).
void check_index_range(const Tensor& index, int64_t size, int64_t dim, const char* op) {
  if (index.numel() == 0) return;
  const Tensor h = index.device().is_cpu() ? index : to_device(index, kCPU);
  const int64_t* p = static_cast<const int64_t*>(h.data_ptr());
  const int64_t nd = h.dim();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t n = 0; n < h.numel(); ++n) {
    const int64_t v = p[off];
    SNUG_CHECK(v >= 0 && v < size, IndexError, op, ": index ", v, " is out of range for dim ", dim, " of size ", size,
               " (expected 0 <= index < ", size, ")");
    for (int64_t d = nd - 1; d >= 0; --d) {  // odometer step
      off += h.strides()[d];
      if (++idx[d] < h.shape()[d]) break;
      off -= h.strides()[d] * h.shape()[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  profiler::RecordOp rec("cat", xs.empty() ? kCPU : xs[0].device());
  SNUG_CHECK(!xs.empty(), ValueError, "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < xs.size(); ++i) {
    SNUG_CHECK(xs[i].defined(), ValueError, "cat: tensor ", i, " is undefined");
    SNUG_CHECK(xs[i].dim() > 0, ShapeError, "cat: tensor ", i,
               " is 0-d; zero-dimensional tensors cannot be concatenated (use stack, or unsqueeze them)");
  }
  const Tensor& x0 = xs[0];
  const int64_t d = wrap_dim(dim, x0.dim(), "cat");
  Shape shape = x0.shape();
  shape[d] = 0;
  DType dt = x0.dtype();
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    SNUG_CHECK(x.dim() == x0.dim(), ShapeError, "cat: tensor ", i, " has shape ", shape_str(x.shape()),
               " but tensor 0 has shape ", shape_str(x0.shape()), " (expected the same number of dims)");
    for (int64_t k = 0; k < x.dim(); ++k)
      SNUG_CHECK(k == d || x.shape()[k] == x0.shape()[k], ShapeError, "cat: tensor ", i, " has shape ",
                 shape_str(x.shape()), " but tensor 0 has shape ", shape_str(x0.shape()),
                 " (expected equal sizes in every dim but dim ", d, "; they differ in dim ", k, ")");
    SNUG_CHECK(x.device() == x0.device(), DeviceError, "cat: tensor ", i, " is on ", x.device().str(),
               " but tensor 0 is on ", x0.device().str(), " (expected the same device; move it with .to(device))");
    dt = promote_types(dt, x.dtype());
    shape[d] += x.shape()[d];
  }
  Tensor out = empty(shape, TensorOptions(dt, x0.device()));
  Backend& be = backend_for(x0.device());
  int64_t pos = 0;
  for (const Tensor& x : xs) {
    const int64_t n = x.shape()[d];
    if (x.numel() > 0) {
      Shape s = shape;
      s[d] = n;
      be.copy(x, as_strided(out, s, out.strides(), out.offset() + pos * out.strides()[d]));
    }
    pos += n;
  }
  return out;
}

// x (.., S, ..), index (n) -> (.., n, ..)
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  profiler::RecordOp rec("index_select", x.device());
  check_not_scalar(x, "index_select", "x");
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  check_index_dtype(index, "index_select");
  check_device(x, index, "index_select", "x", "index");
  SNUG_CHECK(index.dim() <= 1, ShapeError, "index_select: index must be 1-D, got shape ", shape_str(index.shape()));
  check_index_range(index, x.shape()[d], d, "index_select");
  Shape shape = x.shape();
  shape[d] = index.numel();
  Tensor out = empty(shape, x.options());
  backend_for(x.device()).index_select(x, d, index, out);
  return out;
}

// The checks index_add and scatter_add share: base not a scalar, index i64,
// one device, src of base's dtype. Returns the wrapped dim.
static int64_t check_add_operands(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src,
                                  const char* op) {
  check_not_scalar(base, op, "base");
  const int64_t d = wrap_dim(dim, base.dim(), op);
  check_index_dtype(index, op);
  check_device(base, index, op, "base", "index");
  check_device(base, src, op, "base", "src");
  SNUG_CHECK(src.dtype() == base.dtype(), DTypeError, op, ": src has dtype ", dtype_name(src.dtype()),
             " but base has dtype ", dtype_name(base.dtype()), " (expected them equal)");
  return d;
}

// base (.., S, ..), index (n), src (.., n, ..) -> base with src's slices added at rows index.
Tensor index_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  profiler::RecordOp rec("index_add", base.device());
  const int64_t d = check_add_operands(base, dim, index, src, "index_add");
  SNUG_CHECK(index.dim() <= 1, ShapeError, "index_add: index must be 1-D, got shape ", shape_str(index.shape()));
  SNUG_CHECK(src.dim() == base.dim(), ShapeError, "index_add: src has shape ", shape_str(src.shape()),
             " but base has shape ", shape_str(base.shape()), " (expected the same number of dims)");
  SNUG_CHECK(src.shape()[d] == index.numel(), ShapeError, "index_add: src has shape ", shape_str(src.shape()),
             ", size ", src.shape()[d], " in dim ", d, ", but index has ", index.numel(),
             " elements (expected them equal)");
  for (int64_t k = 0; k < base.dim(); ++k)
    SNUG_CHECK(k == d || src.shape()[k] == base.shape()[k], ShapeError, "index_add: src has shape ",
               shape_str(src.shape()), " but base has shape ", shape_str(base.shape()),
               " (expected equal sizes in every dim but dim ", d, ")");
  check_index_range(index, base.shape()[d], d, "index_add");
  Tensor out = clone(base);
  backend_for(base.device()).index_add(out, d, index, src);
  return out;
}

// out[i][j] = x[index[i][j]][j] (dim 0), out has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  profiler::RecordOp rec("gather", x.device());
  check_not_scalar(x, "gather", "x");
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  check_index_dtype(index, "gather");
  check_device(x, index, "gather", "x", "index");
  SNUG_CHECK(index.dim() == x.dim(), ShapeError, "gather: index has shape ", shape_str(index.shape()),
             " but x has shape ", shape_str(x.shape()), " (expected the same number of dims)");
  for (int64_t k = 0; k < x.dim(); ++k)
    SNUG_CHECK(k == d || index.shape()[k] <= x.shape()[k], ShapeError, "gather: index has shape ",
               shape_str(index.shape()), " but x has shape ", shape_str(x.shape()), " (expected index.size(", k,
               ") <= x.size(", k, ") in every dim but dim ", d, ")");
  check_index_range(index, x.shape()[d], d, "gather");
  Tensor out = empty(index.shape(), x.options());
  backend_for(x.device()).gather(x, d, index, out);
  return out;
}

// out = base; out[index[i][j]][j] += src[i][j] (dim 0).
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  profiler::RecordOp rec("scatter_add", base.device());
  const int64_t d = check_add_operands(base, dim, index, src, "scatter_add");
  SNUG_CHECK(index.dim() == base.dim() && src.dim() == base.dim(), ShapeError, "scatter_add: base ",
             shape_str(base.shape()), ", index ", shape_str(index.shape()), " and src ", shape_str(src.shape()),
             " must have the same number of dims");
  for (int64_t k = 0; k < base.dim(); ++k) {
    SNUG_CHECK(index.shape()[k] <= src.shape()[k], ShapeError, "scatter_add: index has shape ",
               shape_str(index.shape()), " but src has shape ", shape_str(src.shape()), " (expected index.size(", k,
               ") <= src.size(", k, "))");
    SNUG_CHECK(k == d || index.shape()[k] <= base.shape()[k], ShapeError, "scatter_add: index has shape ",
               shape_str(index.shape()), " but base has shape ", shape_str(base.shape()), " (expected index.size(", k,
               ") <= base.size(", k, ") in every dim but dim ", d, ")");
  }
  check_index_range(index, base.shape()[d], d, "scatter_add");
  Tensor out = clone(base);
  backend_for(base.device()).scatter_add(out, d, index, src);
  return out;
}

}  // namespace snug::raw

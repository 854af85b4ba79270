// SPDX-License-Identifier: MIT
// Shape ops: cat, stack, split, chunk, and the index ops index_select,
// gather, scatter_add. Forward and backward side by side; split and chunk
// are narrow() views and inherit its gradient.
#include <algorithm>

#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/raw_ops.h>

namespace snug {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

namespace {

std::string sizes_str(const std::vector<int64_t>& v) {
  std::string r = "[";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  return r + "]";
}

// Zeros of `shape` for the out-of-place raw scatters: a broadcast 0-d zero,
// so the raw op's own copy of its base is the only full-size allocation.
Tensor zeros_base(const Shape& shape, const Tensor& like) { return raw::expand(zeros({}, like.options()), shape); }

int64_t split_dim(const Tensor& x, int64_t dim, const char* op) {
  SNUG_CHECK(x.dim() > 0, ShapeError, op, ": x is 0-d; expected at least 1 dim");
  return wrap_dim(dim, x.dim(), op);
}

}  // namespace

// Each input's gradient is its slice of g along dim (converted back to the
// input's dtype if cat promoted it).
Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  Tensor out = raw::cat(xs, dim);
  if (any_requires_grad(xs)) {
    const int64_t d = wrap_dim(dim, xs[0].dim(), "cat");
    std::vector<int64_t> sizes;
    std::vector<DType> dtypes;
    for (const Tensor& x : xs) {
      sizes.push_back(x.shape()[d]);
      dtypes.push_back(x.dtype());
    }
    record("cat", xs, {out}, {}, [d, sizes, dtypes](FunctionNode& self, const G& g) -> G {
      G grads(sizes.size());
      int64_t pos = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (self.needs_grad(i)) grads[i] = raw::to_dtype(raw::slice(g[0], d, pos, pos + sizes[i], 1), dtypes[i]);
        pos += sizes[i];
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  SNUG_CHECK(!xs.empty(), ValueError, "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < xs.size(); ++i) {
    SNUG_CHECK(xs[i].defined(), ValueError, "stack: tensor ", i, " is undefined");
    SNUG_CHECK(xs[i].shape() == xs[0].shape(), ShapeError, "stack: tensor ", i, " has shape ", shape_str(xs[i].shape()),
               " but tensor 0 has shape ", shape_str(xs[0].shape()), " (expected all shapes equal)");
  }
  const int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> us;
  us.reserve(xs.size());
  for (const Tensor& x : xs) us.push_back(x.unsqueeze(d));
  return cat(us, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  const int64_t d = split_dim(x, dim, "split");
  const int64_t n = x.shape()[d];
  SNUG_CHECK(split_size > 0 || (split_size == 0 && n == 0), ValueError, "split: split_size must be positive, got ",
             split_size, " (dim ", d, " has size ", n, ")");
  if (n == 0) return {x.narrow(d, 0, 0)};
  std::vector<Tensor> out;
  for (int64_t s = 0; s < n; s += split_size) out.push_back(x.narrow(d, s, std::min(split_size, n - s)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t d = split_dim(x, dim, "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    SNUG_CHECK(s >= 0, ValueError, "split: sizes must be non-negative, got ", sizes_str(sizes));
    total += s;
  }
  SNUG_CHECK(total == x.shape()[d], ShapeError, "split: sizes ", sizes_str(sizes), " sum to ", total, " but dim ", d,
             " of shape ", shape_str(x.shape()), " has size ", x.shape()[d], " (expected them equal)");
  std::vector<Tensor> out;
  int64_t pos = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, pos, s));
    pos += s;
  }
  return out;
}

// Pieces of ceil(n / chunks); fewer than `chunks` pieces when n is not
// divisible that way, as in PyTorch.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  const int64_t d = split_dim(x, dim, "chunk");
  SNUG_CHECK(chunks > 0, ValueError, "chunk: chunks must be positive, got ", chunks);
  const int64_t n = x.shape()[d];
  return split(x, n == 0 ? 0 : (n + chunks - 1) / chunks, d);
}

// d out / d x: g's rows added back at the rows they were selected from.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = raw::index_select(x, dim, index);
  if (any_requires_grad({x})) {
    const int64_t d = wrap_dim(dim, x.dim(), "index_select");
    Shape in = x.shape();
    record("index_select", {x}, {out}, {index}, [d, in](FunctionNode& self, const G& g) -> G {
      return {raw::index_add(zeros_base(in, g[0]), d, self.saved_at(0), g[0])};
    });
  }
  return out;
}

// d out / d x: g scattered (added) back to the positions it was gathered from.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = raw::gather(x, dim, index);
  if (any_requires_grad({x})) {
    const int64_t d = wrap_dim(dim, x.dim(), "gather");
    Shape in = x.shape();
    record("gather", {x}, {out}, {index}, [d, in](FunctionNode& self, const G& g) -> G {
      return {raw::scatter_add(zeros_base(in, g[0]), d, self.saved_at(0), g[0])};
    });
  }
  return out;
}

// out = x + scatter(src): d/dx = g;  d/dsrc = g gathered at index (zero for
// the part of src outside index's shape, which is never read).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = raw::scatter_add(x, dim, index, src);
  if (any_requires_grad({x, src})) {
    const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
    Shape src_shape = src.shape();
    record("scatter_add", {x, src}, {out}, {index}, [d, src_shape](FunctionNode& self, const G& g) -> G {
      Tensor gx, gs;
      if (self.needs_grad(0)) gx = g[0];
      if (self.needs_grad(1)) {
        Tensor idx = self.saved_at(0);
        gs = raw::gather(g[0], d, idx);
        if (gs.shape() != src_shape) {
          Tensor z = zeros(src_shape, gs.options());
          raw::copy_(raw::as_strided(z, idx.shape(), z.strides(), z.offset()), gs);
          gs = z;
        }
      }
      return {gx, gs};
    });
  }
  return out;
}

}  // namespace snug

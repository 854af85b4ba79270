// SPDX-License-Identifier: MIT
// Reductions: forward and backward side by side. Empty dims = all dims.
// A reduction's gradient is the output gradient seen with the reduced dims
// back as size 1, broadcast over x's shape (a stride-0 view, no copy), and
// scaled or masked as the op needs.
#include <algorithm>
#include <cmath>

#include <snug/autograd/autocast.h>
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/raw_ops.h>

namespace snug {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

namespace {

// The wrapped dims a reduction over `dims` reduces (as raw::reduce sees
// them; call after it has validated dims).
std::vector<int64_t> reduced_dims(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> red;
  if (x.dim() == 0) return red;
  if (dims.empty()) {
    for (int64_t i = 0; i < x.dim(); ++i) red.push_back(i);
  } else {
    for (int64_t d : dims) red.push_back(wrap_dim(d, x.dim(), "reduce"));
  }
  return red;
}

int64_t reduced_count(const Shape& in, const std::vector<int64_t>& red) {
  int64_t n = 1;
  for (int64_t d : red) n *= in[d];
  return n;
}

// t (the output of a reduction of a tensor of shape `in` over `red`) seen
// with the reduced dims as size 1, so that it broadcasts against x.
Tensor as_keepdim(const Tensor& t, const Shape& in, const std::vector<int64_t>& red, bool keepdim) {
  if (keepdim) return t;
  Shape s = in;
  Strides st(in.size(), 0);
  size_t j = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::find(red.begin(), red.end(), static_cast<int64_t>(i)) != red.end()) {
      s[i] = 1;
    } else {
      st[i] = t.strides()[j++];
    }
  }
  return raw::as_strided(t, s, st, t.offset());
}

// Zeros of `shape` for the out-of-place raw scatters: a broadcast 0-d zero,
// so the raw op's own copy of its base is the only full-size allocation.
Tensor zeros_base(const Shape& shape, const Tensor& like) { return raw::expand(zeros({}, like.options()), shape); }

// amax / amin / max() / min(): the gradient is shared equally by all the
// elements equal to the extreme value (as torch.amax does).
Tensor extreme(const char* name, ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor out = raw::reduce(op, x, dims, keepdim);
  if (any_requires_grad({x})) {
    Shape in = x.shape();
    std::vector<int64_t> red = reduced_dims(x, dims);
    record(name, {x}, {out}, {x, out}, [in, red, keepdim](FunctionNode& self, const G& g) -> G {
      Tensor xv = self.saved_at(0);
      Tensor yk = as_keepdim(self.saved_at(1), in, red, keepdim);
      Tensor mask = raw::to_dtype(raw::compare(CompareOp::eq, xv, yk), xv.dtype());
      Tensor count = raw::reduce(ReduceOp::sum, mask, red, true);
      Tensor share = raw::binary(BinaryOp::div, as_keepdim(g[0], in, red, keepdim), count);
      return {raw::binary(BinaryOp::mul, mask, share)};
    });
  }
  return out;
}

// max(x, dim) / min(x, dim): the gradient goes to the index each value came from.
ValuesIndices extreme_dim(const char* name, bool is_max, const Tensor& x, int64_t dim, bool keepdim) {
  Tensor values = raw::reduce(is_max ? ReduceOp::max : ReduceOp::min, x, {dim}, keepdim);
  Tensor indices = raw::arg_reduce(is_max, x, dim, keepdim);
  if (any_requires_grad({x})) {
    Shape in = x.shape();
    int64_t d = wrap_dim(dim, x.dim(), name);
    record(name, {x}, {values}, {indices}, [in, d, keepdim](FunctionNode& self, const G& g) -> G {
      if (in.empty()) return {g[0]};  // 0-d x: the value is x itself
      Tensor idx = self.saved_at(0), gv = g[0];
      if (!keepdim) {
        idx = raw::unsqueeze(idx, d);
        gv = raw::unsqueeze(gv, d);
      }
      return {raw::scatter_add(zeros_base(in, gv), d, idx, gv)};
    });
  }
  return {values, indices};
}

}  // namespace

Tensor sum(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autocast::widen(x_in);  // autocast: f32
  Tensor out = raw::reduce(ReduceOp::sum, x, dims, keepdim);
  if (any_requires_grad({x})) {
    Shape in = x.shape();
    std::vector<int64_t> red = reduced_dims(x, dims);
    // d sum / d x_i = 1: every element gets its row's gradient.
    record("sum", {x}, {out}, {}, [in, red, keepdim](FunctionNode&, const G& g) -> G {
      return {raw::expand(as_keepdim(g[0], in, red, keepdim), in)};
    });
  }
  return out;
}

Tensor mean(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autocast::widen(x_in);  // autocast: f32
  Tensor out = raw::reduce(ReduceOp::mean, x, dims, keepdim);
  if (any_requires_grad({x})) {
    Shape in = x.shape();
    std::vector<int64_t> red = reduced_dims(x, dims);
    const double inv_n = 1.0 / static_cast<double>(reduced_count(in, red));
    // d mean / d x_i = 1/n
    record("mean", {x}, {out}, {}, [in, red, keepdim, inv_n](FunctionNode&, const G& g) -> G {
      Tensor gs = raw::binary_scalar(BinaryOp::mul, g[0], inv_n);
      return {raw::expand(as_keepdim(gs, in, red, keepdim), in)};
    });
  }
  return out;
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme("amax", ReduceOp::max, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme("amin", ReduceOp::min, x, dims, keepdim);
}
Tensor max(const Tensor& x) { return extreme("max", ReduceOp::max, x, {}, false); }
Tensor min(const Tensor& x) { return extreme("min", ReduceOp::min, x, {}, false); }

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim("max", true, x, dim, keepdim); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim("min", false, x, dim, keepdim); }

// Indices are not differentiable: no node.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return raw::arg_reduce(true, x, dim, keepdim); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return raw::arg_reduce(false, x, dim, keepdim); }

// var = sum((x - mean)^2) / max(n - correction, 0)
// d var / d x_i = 2 (x_i - mean) / (n - correction)   (the mean's own
// derivative drops out because sum(x - mean) = 0)
Tensor var(const Tensor& x_in, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  const Tensor x = autocast::widen(x_in);  // autocast: f32
  SNUG_CHECK(x.is_floating_point(), DTypeError, "var: expected a floating dtype (f32, f16, bf16, f64), got ",
             dtype_name(x.dtype()), "; convert with .to(kFloat32)");
  Tensor m = raw::reduce(ReduceOp::mean, x, dims, true);
  std::vector<int64_t> red = reduced_dims(x, dims);
  const double denom = static_cast<double>(std::max<int64_t>(reduced_count(x.shape(), red) - correction, 0));
  Tensor dev = raw::binary(BinaryOp::sub, x, m);
  Tensor ss = raw::reduce(ReduceOp::sum, raw::unary(UnaryOp::square, dev), dims, keepdim);
  Tensor out = raw::binary_scalar(BinaryOp::div, ss, denom);
  if (any_requires_grad({x})) {
    Shape in = x.shape();
    // Saves x (an alias, no memory) and recomputes x - mean in backward.
    record("var", {x}, {out}, {x}, [in, red, keepdim, denom](FunctionNode& self, const G& g) -> G {
      Tensor xv = self.saved_at(0);
      Tensor d = raw::binary(BinaryOp::sub, xv, raw::reduce(ReduceOp::mean, xv, red, true));
      Tensor gs = raw::binary_scalar(BinaryOp::mul, as_keepdim(g[0], in, red, keepdim), 2.0 / denom);
      return {raw::binary(BinaryOp::mul, d, gs)};
    });
  }
  return out;
}

// logsumexp = m + log(sum(exp(x - m))), m = max(x) (0 where m is +-inf, so a
// row of -inf gives -inf rather than NaN).
// d / d x_i = exp(x_i - logsumexp) = softmax(x)_i
Tensor logsumexp(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autocast::widen(x_in);  // autocast: f32
  SNUG_CHECK(x.is_floating_point(), DTypeError, "logsumexp: expected a floating dtype (f32, f16, bf16, f64), got ",
             dtype_name(x.dtype()), "; convert with .to(kFloat32)");
  Tensor m = raw::reduce(ReduceOp::max, x, dims, true);
  std::vector<int64_t> red = reduced_dims(x, dims);
  m = raw::masked_fill(m, raw::compare_scalar(CompareOp::eq, raw::unary(UnaryOp::abs, m), INFINITY), 0.0);
  Tensor s = raw::reduce(ReduceOp::sum, raw::unary(UnaryOp::exp, raw::binary(BinaryOp::sub, x, m)), red, true);
  Tensor out = raw::binary(BinaryOp::add, raw::unary(UnaryOp::log, s), m);  // keepdim shape, contiguous
  if (!keepdim) {
    Shape drop;
    for (int64_t i = 0; i < x.dim(); ++i)
      if (std::find(red.begin(), red.end(), i) == red.end()) drop.push_back(x.shape()[i]);
    out = raw::view(out, drop);
  }
  if (any_requires_grad({x})) {
    Shape in = x.shape();
    record("logsumexp", {x}, {out}, {x, out}, [in, red, keepdim](FunctionNode& self, const G& g) -> G {
      Tensor p = raw::unary(
          UnaryOp::exp, raw::binary(BinaryOp::sub, self.saved_at(0), as_keepdim(self.saved_at(1), in, red, keepdim)));
      return {raw::binary(BinaryOp::mul, p, as_keepdim(g[0], in, red, keepdim))};
    });
  }
  return out;
}

// ---- Tensor methods ---------------------------------------------------------------
Tensor Tensor::sum() const { return snug::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return snug::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return snug::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return snug::mean(*this, dims, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return snug::argmax(*this, dim, keepdim); }

}  // namespace snug

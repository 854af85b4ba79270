// SPDX-License-Identifier: MIT
// Raw ops, part 1: elementwise, copy/convert, views and matmul. Checks and
// output allocation happen here, once for every backend.
#include <snug/core/raw_ops.h>

#include <algorithm>
#include <numeric>

#include <snug/core/profiler.h>
#include <snug/memory/pinned.h>
#include <snug/memory/stream.h>

namespace snug::raw {

namespace {
void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  SNUG_CHECK(a.device() == b.device(), DeviceError, op, ": tensors are on different devices (", a.device().str(),
             " and ", b.device().str(), "); move one with .to(device)");
}

bool is_float_only(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
    case UnaryOp::abs:
    case UnaryOp::relu:
    case UnaryOp::sign:
    case UnaryOp::square:
    case UnaryOp::clamp:
    case UnaryOp::affine:
      return false;
    default:
      return true;
  }
}
}  // namespace

Tensor unary(UnaryOp op, const Tensor& x, double a, double b) {
  profiler::RecordOp rec(unary_op_name(op), x.device());
  SNUG_CHECK(x.dtype() != DType::b8, DTypeError, unary_op_name(op), ": not defined for bool tensors");
  // exp/log/sqrt/... of an integer tensor give f32, as in PyTorch.
  Tensor in = (is_float_only(op) && !x.is_floating_point()) ? to_dtype(x, DType::f32) : x;
  if (op == UnaryOp::affine && !in.is_floating_point() &&
      (a != static_cast<int64_t>(a) || b != static_cast<int64_t>(b)))
    in = to_dtype(in, DType::f32);
  Tensor out = empty(in.shape(), in.options());
  backend_for(in.device()).unary(op, a, b, in, out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  profiler::RecordOp rec(binary_op_name(op), a.device());
  check_same_device(a, b, binary_op_name(op));
  Shape shape = broadcast_shapes(a.shape(), b.shape(), binary_op_name(op));
  DType dt = promote_types(a.dtype(), b.dtype());
  if (op == BinaryOp::div && !is_floating(dt)) dt = DType::f32;  // true division, as in PyTorch
  SNUG_CHECK(dt != DType::b8, DTypeError, binary_op_name(op), ": not defined for bool tensors");
  Tensor out = empty(shape, TensorOptions(dt, a.device()));
  backend_for(a.device()).binary(op, to_dtype(a, dt), to_dtype(b, dt), out);
  return out;
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s) {
  profiler::RecordOp rec(binary_op_name(op), a.device());
  DType dt = a.dtype();
  if (!is_floating(dt) && (s != static_cast<double>(static_cast<int64_t>(s)) || op == BinaryOp::div)) dt = DType::f32;
  if (dt == DType::b8) dt = DType::i64;
  return binary(op, a, full({}, s, TensorOptions(dt, a.device())));
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  profiler::RecordOp rec(compare_op_name(op), a.device());
  check_same_device(a, b, compare_op_name(op));
  Shape shape = broadcast_shapes(a.shape(), b.shape(), compare_op_name(op));
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor out = empty(shape, TensorOptions(DType::b8, a.device()));
  backend_for(a.device()).compare(op, to_dtype(a, dt), to_dtype(b, dt), out);
  return out;
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double s) {
  profiler::RecordOp rec(compare_op_name(op), a.device());
  DType dt = is_floating(a.dtype()) ? a.dtype() : DType::f64;
  return compare(op, a, full({}, s, TensorOptions(dt, a.device())));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  profiler::RecordOp rec("where", a.device());
  check_same_device(cond, a, "where");
  check_same_device(a, b, "where");
  SNUG_CHECK(cond.dtype() == DType::b8, DTypeError, "where: condition must be a bool tensor, got ",
             dtype_name(cond.dtype()));
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor out = empty(shape, TensorOptions(dt, a.device()));
  backend_for(a.device()).where(cond, to_dtype(a, dt), to_dtype(b, dt), out);
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  profiler::RecordOp rec("masked_fill", x.device());
  SNUG_CHECK(mask.dtype() == DType::b8, DTypeError, "masked_fill: mask must be a bool tensor, got ",
             dtype_name(mask.dtype()));
  Shape bs = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  SNUG_CHECK(bs == x.shape(), ShapeError, "masked_fill: mask of shape ", shape_str(mask.shape()),
             " does not broadcast to the input's shape ", shape_str(x.shape()));
  return where(mask, full({}, value, TensorOptions(x.dtype(), x.device())), x);
}

// ---- matmul -----------------------------------------------------------------------

Tensor matmul(const Tensor& a, const Tensor& b) {
  profiler::RecordOp rec("matmul", a.device());
  check_same_device(a, b, "matmul");
  SNUG_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "matmul: both arguments need at least 1 dim, got shapes ",
             shape_str(a.shape()), " and ", shape_str(b.shape()));
  SNUG_CHECK(a.dtype() == b.dtype(), DTypeError, "matmul: dtypes differ (", dtype_name(a.dtype()), " and ",
             dtype_name(b.dtype()), "); convert one with .to(dtype)");
  SNUG_CHECK(is_floating(a.dtype()), DTypeError, "matmul: expected a floating dtype (f32, f64, f16, bf16), got ",
             dtype_name(a.dtype()));
  // 1-D operands become matrices (a: row vector, b: column vector), then the
  // added dim is dropped from the result, as in torch.matmul.
  Tensor A = a.dim() == 1 ? unsqueeze(a, 0) : a;
  Tensor B = b.dim() == 1 ? unsqueeze(b, 1) : b;
  int64_t M = A.size(-2), K = A.size(-1), K2 = B.size(-2), N = B.size(-1);
  SNUG_CHECK(K == K2, ShapeError, "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
             " cannot be multiplied (", K, " vs ", K2, " in the contracted dim)");
  Shape ba(A.shape().begin(), A.shape().end() - 2), bb(B.shape().begin(), B.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  int64_t nb = numel_of(batch);
  // Bring both to (nb, R, C) without copying when the batch dims allow a view.
  auto to3 = [&](const Tensor& t, int64_t R, int64_t C) {
    Shape full_shape = batch;
    full_shape.push_back(R);
    full_shape.push_back(C);
    Tensor e = expand(t, full_shape);
    Shape s3{nb, R, C};
    return can_view(e, s3) ? view(e, s3) : view(contiguous(e), s3);
  };
  Tensor a3 = to3(A, M, K), b3 = to3(B, K, N);
  Tensor out = empty({nb, M, N}, a.options());
  rec.set_flops(2.0 * double(nb) * double(M) * double(N) * double(K));
  backend_for(a.device()).matmul(a3, b3, out);
  Shape os = batch;
  if (a.dim() > 1) os.push_back(M);
  if (b.dim() > 1) os.push_back(N);
  return view(out, os);
}

// ---- views ------------------------------------------------------------------------

Tensor as_strided(const Tensor& x, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = x.dtype();
  return Tensor(std::move(impl));
}

Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      SNUG_CHECK(infer < 0, ShapeError, op, ": only one dim can be -1, got ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      SNUG_CHECK(out[i] >= 0, ShapeError, op, ": invalid size ", out[i], " in shape ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    SNUG_CHECK(known != 0 && numel % known == 0, ShapeError, op, ": shape ", shape_str(shape),
               " is invalid for input of size ", numel);
    out[infer] = numel / known;
  }
  SNUG_CHECK(numel_of(out) == numel, ShapeError, op, ": shape ", shape_str(shape), " is invalid for input of size ",
             numel);
  return out;
}

namespace {
// Strides for viewing x as `shape` without a copy, or false when impossible:
// each run of old dims that merge into new dims must be contiguous itself.
bool view_strides(const Tensor& x, const Shape& shape, Strides& out) {
  const Shape& os = x.shape();
  const Strides& ost = x.strides();
  out.assign(shape.size(), 0);
  if (x.numel() == 0) {
    out = contiguous_strides(shape);
    return true;
  }
  int64_t vi = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_numel = 1, view_numel = 1;
  int64_t chunk_base_stride = ost.empty() ? 1 : ost.back();
  for (int64_t ti = static_cast<int64_t>(os.size()) - 1; ti >= 0; --ti) {
    chunk_numel *= os[ti];
    // A chunk ends where the next-outer old dim is not contiguous with this one.
    bool chunk_end = ti == 0 || (os[ti - 1] != 1 && ost[ti - 1] != chunk_numel * chunk_base_stride);
    if (chunk_end) {
      while (vi >= 0 && (view_numel < chunk_numel || shape[vi] == 1)) {
        out[vi] = view_numel * chunk_base_stride;
        view_numel *= shape[vi];
        --vi;
      }
      if (view_numel != chunk_numel) return false;
      if (ti > 0) {
        chunk_base_stride = ost[ti - 1];
        chunk_numel = 1;
        view_numel = 1;
      }
    }
  }
  while (vi >= 0) {  // leading size-1 dims
    out[vi] = 1;
    --vi;
  }
  return true;
}
}  // namespace

bool can_view(const Tensor& x, const Shape& shape) {
  Strides st;
  return numel_of(shape) == x.numel() && view_strides(x, shape, st);
}

Tensor view(const Tensor& x, Shape shape) {
  shape = infer_shape(shape, x.numel(), "view");
  Strides st;
  SNUG_CHECK(view_strides(x, shape, st), ShapeError, "view: cannot view a tensor of shape ", shape_str(x.shape()),
             " with strides ", shape_str(x.strides()), " as ", shape_str(shape),
             " without copying; use reshape (or .contiguous() first)");
  return as_strided(x, shape, st, x.offset());
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t nd = x.dim();
  SNUG_CHECK(static_cast<int64_t>(dims.size()) == nd, ShapeError, "permute: expected ", nd, " dims for shape ",
             shape_str(x.shape()), ", got ", dims.size());
  std::vector<bool> seen(nd, false);
  Shape s(nd);
  Strides st(nd);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap_dim(dims[i], nd, "permute");
    SNUG_CHECK(!seen[d], ShapeError, "permute: dim ", d, " appears twice in ", shape_str(dims));
    seen[d] = true;
    s[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  return as_strided(x, s, st, x.offset());
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  int64_t nd = x.dim();
  std::vector<int64_t> p(nd);
  std::iota(p.begin(), p.end(), 0);
  if (nd == 0) return x;
  std::swap(p[wrap_dim(d0, nd, "transpose")], p[wrap_dim(d1, nd, "transpose")]);
  return permute(x, p);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = wrap_dim(dim, x.dim(), "slice");
  SNUG_CHECK(step > 0, ValueError, "slice: step must be positive, got ", step);
  int64_t n = x.shape()[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);  // Python slice semantics
  end = std::clamp<int64_t>(end, start, n);
  Shape s = x.shape();
  Strides st = x.strides();
  s[dim] = (end - start + step - 1) / step;
  st[dim] *= step;
  return as_strided(x, s, st, x.offset() + start * x.strides()[dim]);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  dim = wrap_dim(dim, x.dim(), "select");
  int64_t n = x.shape()[dim];
  SNUG_CHECK(index >= -n && index < n, IndexError, "select: index ", index, " is out of range for dim ", dim,
             " of size ", n);
  if (index < 0) index += n;
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t off = x.offset() + index * st[dim];
  s.erase(s.begin() + dim);
  st.erase(st.begin() + dim);
  return as_strided(x, s, st, off);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  int64_t nd = static_cast<int64_t>(shape.size()), xd = x.dim();
  SNUG_CHECK(nd >= xd, ShapeError, "expand: cannot expand shape ", shape_str(x.shape()), " to fewer dims ",
             shape_str(shape));
  Shape s(nd);
  Strides st(nd);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t xi = i - (nd - xd);
    int64_t want = shape[i];
    if (xi < 0) {
      SNUG_CHECK(want >= 0, ShapeError, "expand: -1 is not allowed for a new leading dim in ", shape_str(shape));
      s[i] = want;
      st[i] = 0;
      continue;
    }
    int64_t have = x.shape()[xi];
    if (want == -1) want = have;
    SNUG_CHECK(have == want || have == 1, ShapeError, "expand: shape ", shape_str(x.shape()), " cannot expand to ",
               shape_str(shape), " (dim ", i, ": ", have, " vs ", want, "; only size-1 dims expand)");
    s[i] = want;
    st[i] = have == want ? x.strides()[xi] : 0;
  }
  return as_strided(x, s, st, x.offset());
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  Shape s;
  Strides st;
  int64_t only = dim ? wrap_dim(*dim, x.dim(), "squeeze") : -1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    bool drop = x.shape()[i] == 1 && (only < 0 || only == i);
    if (!drop) {
      s.push_back(x.shape()[i]);
      st.push_back(x.strides()[i]);
    }
  }
  return as_strided(x, s, st, x.offset());
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t stride = dim < x.dim() ? st[dim] * s[dim] : 1;
  s.insert(s.begin() + dim, 1);
  st.insert(st.begin() + dim, stride);
  return as_strided(x, s, st, x.offset());
}

// ---- copies and conversions --------------------------------------------------

Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }

Tensor clone(const Tensor& x) {
  profiler::RecordOp rec("copy", x.device());
  Tensor out = empty(x.shape(), x.options());
  backend_for(x.device()).copy(x, out);
  return out;
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;  // no conversion: nothing for the profile to count
  profiler::RecordOp rec("to_dtype", x.device());
  Tensor out = empty(x.shape(), TensorOptions(dtype, x.device()));
  backend_for(x.device()).copy(x, out);
  return out;
}

Tensor to_device(const Tensor& x, Device device) {
  if (x.device() == device) return x;  // no copy: nothing for the profile to count
  profiler::RecordOp rec("to_device", x.device());
  Tensor src = contiguous(x);
  Tensor out = empty(x.shape(), TensorOptions(x.dtype(), device));
  // The non-CPU side's backend knows how to move bytes to and from the host.
  Device other = device.is_cpu() ? x.device() : device;
  backend_for(other).copy_across(src, out);
  return out;
}

Tensor to_device_async(const Tensor& x, Device device) {
  if (x.device() == device || device.is_cpu()) return to_device(x, device);
  profiler::RecordOp rec("to_device_async", device);
  Tensor src = contiguous(x);
  Tensor out = empty(x.shape(), TensorOptions(x.dtype(), device));  // from the current stream's pool
  backend_for(device).copy_across_async(src, out);
  // A pinned source: its block waits for the copy before it is reused (NOTE [ Stream-aware reuse ]).
  if (void* base = src.storage()->data(); src.device().is_cpu() && memory::is_pinned(base))
    memory::pinned_record_stream(base, memory::current_stream(device));
  return out;
}

void copy_(const Tensor& dst, const Tensor& src) {
  profiler::RecordOp rec("copy_", dst.device());
  Shape bs = broadcast_shapes(dst.shape(), src.shape(), "copy_");
  SNUG_CHECK(bs == dst.shape(), ShapeError, "copy_: source of shape ", shape_str(src.shape()),
             " does not broadcast to the destination's shape ", shape_str(dst.shape()));
  Tensor s = src;
  if (s.device() != dst.device()) s = to_device(contiguous(s), dst.device());
  backend_for(dst.device()).copy(s, dst);
}

void fill_(const Tensor& dst, double value) {
  profiler::RecordOp rec("fill_", dst.device());
  backend_for(dst.device()).fill(dst, value);
}

}  // namespace snug::raw

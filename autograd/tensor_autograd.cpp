// SPDX-License-Identifier: MIT
// Tensor methods that touch autograd: grad access, backward, hooks, the
// differentiable views and conversions, and in-place ops.
#include <snug/autograd/engine.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>

namespace snug {

using autograd::any_requires_grad;
using autograd::meta;
using autograd::record;

// ---- autograd state ------------------------------------------------------------

Tensor& Tensor::requires_grad_(bool on) {
  SNUG_CHECK(!on || is_floating_point(), AutogradError,
             "requires_grad_: only floating tensors can require "
             "gradients, got dtype ",
             dtype_name(dtype()));
  SNUG_CHECK(is_leaf() || on, AutogradError,
             "requires_grad_(false): can only be changed on leaf tensors; "
             "use detach() on a non-leaf");
  impl()->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return impl()->autograd ? impl()->autograd->grad : Tensor(); }
void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    SNUG_CHECK(g.shape() == shape(), ShapeError, "set_grad: gradient of shape ", shape_str(g.shape()),
               " does not match tensor shape ", shape_str(shape()));
  meta(*this).grad = g;
}
bool Tensor::is_leaf() const { return !impl()->autograd || !impl()->autograd->grad_fn; }
std::shared_ptr<Node> Tensor::grad_fn() const { return impl()->autograd ? impl()->autograd->grad_fn : nullptr; }

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

Tensor Tensor::detach() const { return raw::as_strided(*this, shape(), strides(), offset()); }

void Tensor::retain_grad() const {
  SNUG_CHECK(requires_grad(), AutogradError, "retain_grad: tensor does not require grad");
  AutogradMeta& m = meta(*this);
  if (!m.grad_fn || m.retains_grad) return;  // leaves keep .grad anyway
  m.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  m.grad_fn->pre_hooks[m.output_nr].push_back([weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      Tensor t(impl);
      AutogradMeta& mm = meta(t);
      mm.grad = mm.grad.defined() ? raw::binary(BinaryOp::add, mm.grad, g) : raw::clone(g);
    }
    return Tensor();
  });
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  SNUG_CHECK(requires_grad(), AutogradError,
             "register_hook: cannot register a hook on a tensor that does not "
             "require grad");
  Edge e = autograd::edge_of(*this);
  e.fn->pre_hooks[e.output_nr].push_back(std::move(hook));
}

void Tensor::set_name(const std::string& n) const { meta(*this).name = n; }
std::string Tensor::name() const { return impl()->autograd ? impl()->autograd->name : ""; }

// ---- differentiable views -----------------------------------------------------

namespace {
Tensor mark_view(Tensor v) {
  v.impl()->is_view = true;
  return v;
}
// Records a view op whose backward maps the output gradient back to the input.
Tensor record_view(const char* name, const Tensor& x, Tensor out, std::function<Tensor(const Tensor&)> back) {
  out = mark_view(out);
  if (any_requires_grad({x}))
    record(name, {x}, {out}, {},
           [back](FunctionNode&, const std::vector<Tensor>& g) -> std::vector<Tensor> { return {back(g[0])}; });
  return out;
}
// Gradient of a strided piece of x: zeros of x's shape with g written into the piece.
Tensor scatter_into_zeros(const Tensor& g, const Shape& shape, const std::function<Tensor(const Tensor&)>& piece) {
  Tensor z = zeros(shape, g.options());
  raw::copy_(piece(z), g);
  return z;
}
}  // namespace

Tensor Tensor::view(const Shape& s) const {
  Shape in = shape();
  return record_view("view", *this, raw::view(*this, s),
                     [in](const Tensor& g) { return raw::view(raw::contiguous(g), in); });
}

Tensor Tensor::reshape(const Shape& s) const {
  Shape target = raw::infer_shape(s, numel(), "reshape");
  if (raw::can_view(*this, target)) return view(target);
  Shape in = shape();
  Tensor out = raw::view(raw::clone(*this), target);
  if (any_requires_grad({*this}))
    record("reshape", {*this}, {out}, {}, [in](FunctionNode&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      return {raw::view(raw::contiguous(g[0]), in)};
    });
  return out;
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  SNUG_CHECK(start <= end, ShapeError, "flatten: start dim ", start, " is after end dim ", end);
  Shape s(shape().begin(), shape().begin() + start);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= shape()[i];
  s.push_back(m);
  s.insert(s.end(), shape().begin() + end + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  return record_view("transpose", *this, raw::transpose(*this, d0, d1),
                     [d0, d1](const Tensor& g) { return raw::transpose(g, d0, d1); });
}

Tensor Tensor::t() const {
  SNUG_CHECK(dim() <= 2, ShapeError, "t: expects a tensor with at most 2 dims, got shape ", shape_str(shape()),
             "; use transpose(d0, d1) for more");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  Tensor out = raw::permute(*this, dims);
  std::vector<int64_t> inv(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inv[wrap_dim(dims[i], dim(), "permute")] = static_cast<int64_t>(i);
  return record_view("permute", *this, out, [inv](const Tensor& g) { return raw::permute(g, inv); });
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  Shape in = shape();
  return record_view("slice", *this, raw::slice(*this, d, start, end, step), [=](const Tensor& g) {
    return scatter_into_zeros(g, in, [&](const Tensor& z) { return raw::slice(z, d, start, end, step); });
  });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  int64_t dd = wrap_dim(d, dim(), "narrow");
  int64_t n = shape()[dd];
  if (start < 0) start += n;
  SNUG_CHECK(start >= 0 && length >= 0 && start + length <= n, IndexError, "narrow: start ", start, " + length ",
             length, " is out of range for dim ", dd, " of size ", n);
  return slice(dd, start, start + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  Shape in = shape();
  return record_view("select", *this, raw::select(*this, d, index), [=](const Tensor& g) {
    return scatter_into_zeros(g, in, [&](const Tensor& z) { return raw::select(z, d, index); });
  });
}

Tensor Tensor::expand(const Shape& s) const {
  Shape in = shape();
  return record_view("expand", *this, raw::expand(*this, s), [in](const Tensor& g) { return raw::sum_to(g, in); });
}

Tensor Tensor::squeeze() const {
  Shape in = shape();
  return record_view("squeeze", *this, raw::squeeze(*this, std::nullopt),
                     [in](const Tensor& g) { return raw::view(raw::contiguous(g), in); });
}
Tensor Tensor::squeeze(int64_t d) const {
  Shape in = shape();
  return record_view("squeeze", *this, raw::squeeze(*this, d),
                     [in](const Tensor& g) { return raw::view(raw::contiguous(g), in); });
}
Tensor Tensor::unsqueeze(int64_t d) const {
  Shape in = shape();
  return record_view("unsqueeze", *this, raw::unsqueeze(*this, d),
                     [in](const Tensor& g) { return raw::view(raw::contiguous(g), in); });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = raw::clone(*this);
  if (any_requires_grad({*this}))
    record("clone", {*this}, {out}, {},
           [](FunctionNode&, const std::vector<Tensor>& g) -> std::vector<Tensor> { return {g[0]}; });
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = raw::to_dtype(*this, dt);
  DType in = dtype();
  if (is_floating(dt) && any_requires_grad({*this}))
    record("to_dtype", {*this}, {out}, {}, [in](FunctionNode&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      return {raw::to_dtype(g[0], in)};
    });
  return out;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Tensor out = raw::to_device(*this, d);
  Device in = device();
  if (any_requires_grad({*this}))
    record("to_device", {*this}, {out}, {}, [in](FunctionNode&, const std::vector<Tensor>& g) -> std::vector<Tensor> {
      return {raw::to_device(g[0], in)};
    });
  return out;
}

// ---- in-place ops -------------------------------------------------------------
//
// Without autograd involvement an in-place op writes straight into this
// tensor's storage. When autograd is involved, the op is computed out of
// place with history, its result is written into this storage, and this
// tensor takes over the result's history (its grad_fn), as PyTorch does.
// Leaves that require grad, and views of tensors that require grad, refuse.

namespace {
// differentiable(src) computes the op out of place from src, a differentiable
// copy of self (see NOTE [ In-place with autograd computes from a copy ]).
Tensor& apply_inplace(Tensor& self, const char* op, const std::vector<Tensor>& others,
                      const std::function<Tensor(const Tensor& src)>& differentiable,
                      const std::function<void()>& raw_write) {
  std::vector<Tensor> all = others;
  all.push_back(self);
  if (!any_requires_grad(all)) {
    raw_write();
    self.bump_version();
    return self;
  }
  SNUG_CHECK(!(self.requires_grad() && self.is_leaf()), AutogradError, op,
             ": a leaf tensor that requires grad is being used in an in-place operation; "
             "wrap it in NoGradGuard (e.g. for an optimizer update) or use the out-of-place op");
  SNUG_CHECK(!self.impl()->is_view, AutogradError, op,
             ": in-place operation with autograd on a view is not supported; use the out-of-place op "
             "or .clone() the view first");
  // NOTE [ In-place with autograd computes from a copy ]
  // The out-of-place op may save its input for backward (clamp saves x; mul
  // saves self for the other operand's gradient). Writing the result into
  // self's storage below bumps the version of that very storage, so backward
  // would refuse the saved tensor. Computing from a differentiable clone keeps
  // what the op saved intact; the clone passes its gradient on to self's old
  // history unchanged.
  Tensor r = differentiable(self.clone());
  raw::copy_(self, r.detach());
  self.bump_version();
  TensorImpl* impl = self.impl();
  impl->requires_grad = true;
  AutogradMeta& m = meta(self);
  AutogradMeta& rm = meta(r);
  m.grad_fn = rm.grad_fn;
  m.output_nr = rm.output_nr;
  return self;
}
}  // namespace

namespace {
// Writes op(self, other) straight into self's storage when self needs no
// conversion or broadcasting (the optimizer's hot path); else via a temporary.
// Elementwise kernels read each element before writing it, so out == a is safe.
const char* inplace_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add_";
    case BinaryOp::sub:
      return "sub_";
    case BinaryOp::mul:
      return "mul_";
    case BinaryOp::div:
      return "div_";
    default:
      return "binary_";
  }
}

void binary_into(BinaryOp op, const Tensor& self, const Tensor& other) {
  profiler::RecordOp rec(inplace_name(op), self.device());
  DType dt = promote_types(self.dtype(), other.dtype());
  if (op == BinaryOp::div && !is_floating(dt)) dt = DType::f32;
  // Reading `other` while writing self is only safe when other does not share
  // self's bytes, or is self exactly (each element is read before it is
  // written). A shifted or transposed alias (x.add_(x.t())) would read values
  // the loop already overwrote, so it goes through a temporary.
  bool alias_safe =
      other.storage() != self.storage() || (other.offset() == self.offset() && other.shape() == self.shape() &&
                                            other.strides() == self.strides() && other.dtype() == self.dtype());
  if (alias_safe && dt == self.dtype() && self.device() == other.device() &&
      broadcast_shapes(self.shape(), other.shape(), binary_op_name(op)) == self.shape()) {
    backend_for(self.device()).binary(op, self, raw::to_dtype(other, dt), self);
  } else {
    raw::copy_(self, raw::binary(op, self, other));
  }
}
// self = a * self + b for floating self, in place.
void affine_into(const Tensor& self, double a, double b) {
  profiler::RecordOp rec("affine_", self.device());
  if (self.is_floating_point()) {
    backend_for(self.device()).unary(UnaryOp::affine, a, b, self, self);
  } else {
    raw::copy_(self, raw::unary(UnaryOp::affine, self, a, b));
  }
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  Tensor& self = *this;
  // With autograd: where(true, value, old) gives exact values (old * 0 would
  // be NaN where old is inf) and a zero gradient to the old value.
  auto differentiable = [&](const Tensor& old) {
    return snug::where(scalar_tensor(1, TensorOptions(DType::b8, old.device())), snug::full({}, value, old.options()),
                       old);
  };
  return apply_inplace(self, "fill_", {}, differentiable, [&] { raw::fill_(self, value); });
}

Tensor& Tensor::copy_(const Tensor& src) {
  Tensor& self = *this;
  // With autograd: where(true, src, old) gives src's values exactly, its
  // gradient to src and none to the old value (see fill_).
  auto differentiable = [&](const Tensor& old) {
    return snug::where(scalar_tensor(1, TensorOptions(DType::b8, old.device())), src.to(old.dtype()).to(old.device()),
                       old);
  };
  return apply_inplace(self, "copy_", {src}, differentiable, [&] { raw::copy_(self, src); });
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  Tensor& self = *this;
  return apply_inplace(
      self, "add_", {other}, [&](const Tensor& s) { return snug::add(s, other, alpha); },
      [&] {
        Tensor o = alpha == 1.0 ? other : raw::binary_scalar(BinaryOp::mul, other, alpha);
        binary_into(BinaryOp::add, self, o);
      });
}
Tensor& Tensor::add_(double value) {
  Tensor& self = *this;
  return apply_inplace(
      self, "add_", {}, [&](const Tensor& s) { return s + value; }, [&] { affine_into(self, 1.0, value); });
}
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  // Not add_(other, -alpha): errors name sub_, and the tape records sub.
  Tensor& self = *this;
  return apply_inplace(
      self, "sub_", {other}, [&](const Tensor& s) { return snug::sub(s, other, alpha); },
      [&] {
        Tensor o = alpha == 1.0 ? other : raw::binary_scalar(BinaryOp::mul, other, alpha);
        binary_into(BinaryOp::sub, self, o);
      });
}
Tensor& Tensor::mul_(const Tensor& other) {
  Tensor& self = *this;
  return apply_inplace(
      self, "mul_", {other}, [&](const Tensor& s) { return s * other; },
      [&] { binary_into(BinaryOp::mul, self, other); });
}
Tensor& Tensor::mul_(double value) {
  Tensor& self = *this;
  return apply_inplace(
      self, "mul_", {}, [&](const Tensor& s) { return s * value; }, [&] { affine_into(self, value, 0.0); });
}
Tensor& Tensor::div_(const Tensor& other) {
  Tensor& self = *this;
  return apply_inplace(
      self, "div_", {other}, [&](const Tensor& s) { return s / other; },
      [&] { binary_into(BinaryOp::div, self, other); });
}
Tensor& Tensor::div_(double value) {
  Tensor& self = *this;
  return apply_inplace(
      self, "div_", {}, [&](const Tensor& s) { return s / value; },
      [&] { raw::copy_(self, raw::binary_scalar(BinaryOp::div, self, value)); });
}
Tensor& Tensor::clamp_(double lo, double hi) {
  Tensor& self = *this;
  return apply_inplace(
      self, "clamp_", {}, [&](const Tensor& s) { return snug::clamp(s, lo, hi); },
      [&] { raw::copy_(self, raw::unary(UnaryOp::clamp, self, lo, hi)); });
}
Tensor& Tensor::relu_() {
  Tensor& self = *this;
  return apply_inplace(
      self, "relu_", {}, [&](const Tensor& s) { return snug::relu(s); },
      [&] { raw::copy_(self, raw::unary(UnaryOp::relu, self)); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  Tensor& self = *this;
  return apply_inplace(
      self, "masked_fill_", {}, [&](const Tensor& s) { return snug::masked_fill(s, mask, value); },
      [&] { raw::copy_(self, raw::masked_fill(self, mask, value)); });
}

// ---- method forms of common ops -----------------------------------------------
Tensor Tensor::matmul(const Tensor& o) const { return snug::matmul(*this, o); }
Tensor Tensor::pow(double e) const { return snug::pow(*this, e); }
Tensor Tensor::exp() const { return snug::exp(*this); }
Tensor Tensor::log() const { return snug::log(*this); }
Tensor Tensor::sqrt() const { return snug::sqrt(*this); }
Tensor Tensor::abs() const { return snug::abs(*this); }
Tensor Tensor::neg() const { return snug::neg(*this); }
Tensor Tensor::relu() const { return snug::relu(*this); }
Tensor Tensor::tanh() const { return snug::tanh(*this); }
Tensor Tensor::sigmoid() const { return snug::sigmoid(*this); }

}  // namespace snug

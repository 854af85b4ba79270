// SPDX-License-Identifier: MIT
// Elementwise ops: forward and backward side by side. Backward closures use
// raw ops (no double backward) and sum broadcast gradients back down with
// raw::sum_to. Shapes: all ops broadcast NumPy-style; grads match inputs.
#include <snug/autograd/autocast.h>
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/raw_ops.h>

namespace snug {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

namespace {
// d(out)/d(x) = g * f'(x), with f' given as a BinaryOp *_backward over (g, saved).
Tensor unary_with_backward(const char* name, UnaryOp op, BinaryOp back_op, bool save_output, const Tensor& x,
                           double a = 0, double b = 0) {
  Tensor out = raw::unary(op, x, a, b);
  if (any_requires_grad({x}))
    record(name, {x}, {out}, {save_output ? out : x},
           [back_op](FunctionNode& self, const G& g) -> G { return {raw::binary(back_op, g[0], self.saved_at(0))}; });
  return out;
}
}  // namespace

// ---- arithmetic -------------------------------------------------------------------

namespace {
// a + alpha b (op add) or a - alpha b (op sub). sub is its own op rather than
// add(a, b, -alpha) so errors and the tape name the op the caller used, and so
// bool - bool is refused (b * -1 would quietly turn a bool into an i64).
Tensor add_or_sub(BinaryOp op, const Tensor& a, const Tensor& b, double alpha) {
  const char* name = binary_op_name(op);
  SNUG_CHECK(!(a.dtype() == DType::b8 && b.dtype() == DType::b8), DTypeError, name,
             ": not defined for bool tensors; convert with .to(kFloat32) or .to(kInt64)");
  Tensor bb = alpha == 1.0 ? b : raw::binary_scalar(BinaryOp::mul, b, alpha);
  Tensor out = raw::binary(op, a, bb);
  if (any_requires_grad({a, b})) {
    Shape sa = a.shape(), sb = b.shape();
    const double gscale = op == BinaryOp::sub ? -alpha : alpha;  // d(out)/db
    record(name, {a, b}, {out}, {}, [sa, sb, gscale](FunctionNode& self, const G& g) -> G {
      Tensor gb;
      if (self.needs_grad(1))
        gb = raw::sum_to(gscale == 1.0 ? g[0] : raw::binary_scalar(BinaryOp::mul, g[0], gscale), sb);
      return {self.needs_grad(0) ? raw::sum_to(g[0], sa) : Tensor(), gb};
    });
  }
  return out;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) { return add_or_sub(BinaryOp::add, a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return add_or_sub(BinaryOp::sub, a, b, alpha); }

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = raw::binary(BinaryOp::mul, a, b);
  if (any_requires_grad({a, b})) {
    Shape sa = a.shape(), sb = b.shape();
    // Save only what each gradient needs: d/da needs b, d/db needs a.
    record("mul", {a, b}, {out}, {b.requires_grad() ? a : Tensor(), a.requires_grad() ? b : Tensor()},
           [sa, sb](FunctionNode& self, const G& g) -> G {
             Tensor ga, gb;
             if (self.needs_grad(0)) ga = raw::sum_to(raw::binary(BinaryOp::mul, g[0], self.saved_at(1)), sa);
             if (self.needs_grad(1)) gb = raw::sum_to(raw::binary(BinaryOp::mul, g[0], self.saved_at(0)), sb);
             return {ga, gb};
           });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = raw::binary(BinaryOp::div, a, b);
  if (any_requires_grad({a, b})) {
    Shape sa = a.shape(), sb = b.shape();
    // d/da = g / b;  d/db = -g * a / b^2 = -g * out / b
    record("div", {a, b}, {out}, {b, b.requires_grad() ? out : Tensor()},
           [sa, sb](FunctionNode& self, const G& g) -> G {
             Tensor bv = self.saved_at(0), ga, gb;
             if (self.needs_grad(0)) ga = raw::sum_to(raw::binary(BinaryOp::div, g[0], bv), sa);
             if (self.needs_grad(1)) {
               Tensor t = raw::binary(BinaryOp::div, raw::binary(BinaryOp::mul, g[0], self.saved_at(1)), bv);
               gb = raw::sum_to(raw::unary(UnaryOp::neg, t), sb);
             }
             return {ga, gb};
           });
  }
  return out;
}

Tensor pow(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast::widen(a_in), b = autocast::widen(b_in);  // autocast: f32
  Tensor out = raw::binary(BinaryOp::pow, a, b);
  if (any_requires_grad({a, b})) {
    Shape sa = a.shape(), sb = b.shape();
    // d/da = g * b * a^(b-1);  d/db = g * out * log(a)
    record("pow", {a, b}, {out}, {a, b, out}, [sa, sb](FunctionNode& self, const G& g) -> G {
      Tensor av = self.saved_at(0), bv = self.saved_at(1), ga, gb;
      if (self.needs_grad(0)) {
        Tensor d =
            raw::binary(BinaryOp::mul, bv, raw::binary(BinaryOp::pow, av, raw::binary_scalar(BinaryOp::sub, bv, 1.0)));
        ga = raw::sum_to(raw::binary(BinaryOp::mul, g[0], d), sa);
      }
      if (self.needs_grad(1)) {
        Tensor d = raw::binary(BinaryOp::mul, self.saved_at(2), raw::unary(UnaryOp::log, av));
        gb = raw::sum_to(raw::binary(BinaryOp::mul, g[0], d), sb);
      }
      return {ga, gb};
    });
  }
  return out;
}

Tensor pow(const Tensor& a_in, double e) {
  const Tensor a = autocast::widen(a_in);  // autocast: f32
  Tensor out = raw::unary(UnaryOp::pow_scalar, a, e);
  if (any_requires_grad({a}))
    record("pow", {a}, {out}, {a}, [e](FunctionNode& self, const G& g) -> G {
      // d/da = e * a^(e-1)
      Tensor d = raw::unary(UnaryOp::affine, raw::unary(UnaryOp::pow_scalar, self.saved_at(0), e - 1), e, 0);
      return {raw::binary(BinaryOp::mul, g[0], d)};
    });
  return out;
}

namespace {
// maximum/minimum: the gradient goes to the chosen input; ties split evenly.
Tensor max_min(const char* name, BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = raw::binary(op, a, b);
  if (any_requires_grad({a, b})) {
    Shape sa = a.shape(), sb = b.shape();
    record(name, {a, b}, {out}, {a, b}, [sa, sb, op](FunctionNode& self, const G& g) -> G {
      Tensor av = self.saved_at(0), bv = self.saved_at(1);
      CompareOp win = op == BinaryOp::maximum ? CompareOp::gt : CompareOp::lt;
      Tensor fa = raw::to_dtype(raw::compare(win, av, bv), g[0].dtype());
      Tensor tie = raw::to_dtype(raw::compare(CompareOp::eq, av, bv), g[0].dtype());
      Tensor wa = raw::binary(BinaryOp::add, fa, raw::binary_scalar(BinaryOp::mul, tie, 0.5));
      Tensor ga = raw::binary(BinaryOp::mul, g[0], wa);
      Tensor gb = raw::binary(BinaryOp::sub, g[0], ga);
      return {raw::sum_to(ga, sa), raw::sum_to(gb, sb)};
    });
  }
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return max_min("maximum", BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return max_min("minimum", BinaryOp::minimum, a, b); }

// ---- unary math ----------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  Tensor out = raw::unary(UnaryOp::neg, x);
  if (any_requires_grad({x}))
    record("neg", {x}, {out}, {}, [](FunctionNode&, const G& g) -> G { return {raw::unary(UnaryOp::neg, g[0])}; });
  return out;
}

Tensor exp(const Tensor& x_in) {
  const Tensor x = autocast::widen(x_in);  // autocast: f32
  Tensor out = raw::unary(UnaryOp::exp, x);
  if (any_requires_grad({x}))  // d = exp(x) = out
    record("exp", {x}, {out}, {out},
           [](FunctionNode& self, const G& g) -> G { return {raw::binary(BinaryOp::mul, g[0], self.saved_at(0))}; });
  return out;
}

Tensor log(const Tensor& x_in) {
  const Tensor x = autocast::widen(x_in);  // autocast: f32
  Tensor out = raw::unary(UnaryOp::log, x);
  if (any_requires_grad({x}))  // d = 1/x
    record("log", {x}, {out}, {x},
           [](FunctionNode& self, const G& g) -> G { return {raw::binary(BinaryOp::div, g[0], self.saved_at(0))}; });
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = raw::unary(UnaryOp::sqrt, x);
  if (any_requires_grad({x}))  // d = 1 / (2 sqrt x)
    record("sqrt", {x}, {out}, {out}, [](FunctionNode& self, const G& g) -> G {
      return {raw::binary(BinaryOp::div, g[0], raw::unary(UnaryOp::affine, self.saved_at(0), 2.0, 0.0))};
    });
  return out;
}

Tensor rsqrt(const Tensor& x) {
  Tensor out = raw::unary(UnaryOp::rsqrt, x);
  if (any_requires_grad({x}))  // d = -0.5 x^(-3/2) = -0.5 out^3
    record("rsqrt", {x}, {out}, {out}, [](FunctionNode& self, const G& g) -> G {
      Tensor d = raw::unary(UnaryOp::affine, raw::unary(UnaryOp::pow_scalar, self.saved_at(0), 3.0), -0.5, 0.0);
      return {raw::binary(BinaryOp::mul, g[0], d)};
    });
  return out;
}

Tensor abs(const Tensor& x) {
  Tensor out = raw::unary(UnaryOp::abs, x);
  if (any_requires_grad({x}))  // d = sign(x) (0 at 0, as in PyTorch)
    record("abs", {x}, {out}, {x}, [](FunctionNode& self, const G& g) -> G {
      return {raw::binary(BinaryOp::mul, g[0], raw::unary(UnaryOp::sign, self.saved_at(0)))};
    });
  return out;
}

Tensor square(const Tensor& x) { return pow(x, 2.0); }

Tensor tanh(const Tensor& x) { return unary_with_backward("tanh", UnaryOp::tanh, BinaryOp::tanh_backward, true, x); }
Tensor sigmoid(const Tensor& x) {
  return unary_with_backward("sigmoid", UnaryOp::sigmoid, BinaryOp::sigmoid_backward, true, x);
}
Tensor relu(const Tensor& x) {
  // Saves the output: relu'(x) = [out > 0], and out is needed by the next layer anyway.
  return unary_with_backward("relu", UnaryOp::relu, BinaryOp::relu_backward, true, x);
}
Tensor gelu(const Tensor& x, GeluApprox approx) {
  if (approx == GeluApprox::tanh)
    return unary_with_backward("gelu_tanh", UnaryOp::gelu_tanh, BinaryOp::gelu_tanh_backward, false, x);
  return unary_with_backward("gelu", UnaryOp::gelu, BinaryOp::gelu_backward, false, x);
}
Tensor silu(const Tensor& x) { return unary_with_backward("silu", UnaryOp::silu, BinaryOp::silu_backward, false, x); }

Tensor clamp(const Tensor& x, double lo, double hi) {
  SNUG_CHECK(!(lo > hi), ValueError, "clamp: lo (", lo, ") must not exceed hi (", hi, ")");
  Tensor out = raw::unary(UnaryOp::clamp, x, lo, hi);
  if (any_requires_grad({x}))  // gradient passes where lo <= x <= hi
    record("clamp", {x}, {out}, {x}, [lo, hi](FunctionNode& self, const G& g) -> G {
      Tensor xv = self.saved_at(0);
      Tensor inside =
          raw::binary(BinaryOp::mul, raw::to_dtype(raw::compare_scalar(CompareOp::ge, xv, lo), g[0].dtype()),
                      raw::to_dtype(raw::compare_scalar(CompareOp::le, xv, hi), g[0].dtype()));
      return {raw::binary(BinaryOp::mul, g[0], inside)};
    });
  return out;
}

// ---- selection ----------------------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = raw::where(cond, a, b);
  if (any_requires_grad({a, b})) {
    Shape sa = a.shape(), sb = b.shape();
    record("where", {a, b}, {out}, {cond}, [sa, sb](FunctionNode& self, const G& g) -> G {
      Tensor c = self.saved_at(0);
      Tensor zero = zeros({}, g[0].options());
      Tensor ga, gb;
      if (self.needs_grad(0)) ga = raw::sum_to(raw::where(c, g[0], zero), sa);
      if (self.needs_grad(1)) gb = raw::sum_to(raw::where(c, zero, g[0]), sb);
      return {ga, gb};
    });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  Tensor out = raw::masked_fill(x, mask, value);
  if (any_requires_grad({x}))
    record("masked_fill", {x}, {out}, {mask}, [](FunctionNode& self, const G& g) -> G {
      return {raw::where(self.saved_at(0), zeros({}, g[0].options()), g[0])};
    });
  return out;
}

// ---- comparisons (not differentiable) -------------------------------------------------
Tensor eq(const Tensor& a, const Tensor& b) { return raw::compare(CompareOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return raw::compare(CompareOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return raw::compare(CompareOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return raw::compare(CompareOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return raw::compare(CompareOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return raw::compare(CompareOp::ge, a, b); }

// ---- operators -------------------------------------------------------------------------
namespace {
Tensor scalar_like(const Tensor& a, double s) {
  DType dt = a.dtype();
  if (!is_floating(dt) && s != static_cast<double>(static_cast<int64_t>(s))) dt = DType::f32;
  return full({}, s, TensorOptions(dt, a.device()));
}
}  // namespace
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }

// Scalar forms use the affine unary op: no broadcast tensor, one pass.
Tensor operator+(const Tensor& a, double s) {
  if (!a.is_floating_point()) return add(a, scalar_like(a, s));
  Tensor out = raw::unary(UnaryOp::affine, a, 1.0, s);
  if (any_requires_grad({a})) record("add", {a}, {out}, {}, [](FunctionNode&, const G& g) -> G { return {g[0]}; });
  return out;
}
Tensor operator-(const Tensor& a, double s) { return a + (-s); }
Tensor operator*(const Tensor& a, double s) {
  if (!a.is_floating_point()) return mul(a, scalar_like(a, s));
  Tensor out = raw::unary(UnaryOp::affine, a, s, 0.0);
  if (any_requires_grad({a}))
    record("mul", {a}, {out}, {},
           [s](FunctionNode&, const G& g) -> G { return {raw::unary(UnaryOp::affine, g[0], s, 0.0)}; });
  return out;
}
Tensor operator/(const Tensor& a, double s) {
  if (!a.is_floating_point()) return div(a, scalar_like(a, s));
  return a * (1.0 / s);
}
Tensor operator+(double s, const Tensor& a) { return a + s; }
Tensor operator-(double s, const Tensor& a) { return neg(a) + s; }
Tensor operator*(double s, const Tensor& a) { return a * s; }
Tensor operator/(double s, const Tensor& a) { return div(scalar_like(a, s), a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, double s) { return raw::compare_scalar(CompareOp::lt, a, s); }
Tensor operator>(const Tensor& a, double s) { return raw::compare_scalar(CompareOp::gt, a, s); }

}  // namespace snug

// SPDX-License-Identifier: MIT
// nn::functional: linear (and nn/fused.h's linear_relu, linear_gelu, relu_mlp,
// gelu_mlp), layer_norm, embedding, losses, attention.
#include <snug/nn/functional.h>
#include <snug/nn/fused.h>

#include <cmath>
#include <limits>

#include <snug/autograd/autocast.h>
#include <snug/autograd/checkpoint.h>
#include <snug/autograd/engine.h>
#include <snug/autograd/node.h>
#include <snug/core/backend.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>

namespace snug::nn::functional {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

// ---- linear ------------------------------------------------------------------------
// x (..., in), weight (out, in), bias (out) -> (..., out)
// backward: gx = g @ W, gW = g^T @ x, gb = sum over rows of g
// The arithmetic is the backend's (core/backend.h: linear_act, linear_backward,
// linear_backward_act; on the CPU the one-pass GEMMs of core/cpu/linear.cpp).
namespace {

using Act = Backend::Activation;

// A Linear call after autocast: its checks, and x flattened to (N, in).
struct LinearArgs {
  Tensor x, weight, bias, x2;  // x2: x as (N, in)
  int64_t in, outf;
  Shape out_shape;
};

LinearArgs linear_args(const char* op, const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  // Autocast: low precision, weight casts cached (autograd/autocast.h).
  LinearArgs a;
  a.x = autocast::lower(x_in), a.weight = autocast::lower(weight_in), a.bias = autocast::lower(bias_in);
  const Tensor &x = a.x, &weight = a.weight, &bias = a.bias;
  SNUG_CHECK(weight.dim() == 2, ShapeError, op, ": weight must be (out, in), got ", shape_str(weight.shape()));
  SNUG_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), ShapeError, op, ": input of shape ", shape_str(x.shape()),
             " does not match weight ", shape_str(weight.shape()), " (expected last dim ", weight.size(1), ")");
  if (bias.defined())
    SNUG_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), ShapeError, op, ": bias of shape ",
               shape_str(bias.shape()), " does not match weight ", shape_str(weight.shape()));
  SNUG_CHECK(x.is_floating_point(), DTypeError, op, ": expected a floating input (f32, f64, f16, bf16), got ",
             dtype_name(x.dtype()));
  SNUG_CHECK(weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()), DTypeError, op, ": input (",
             dtype_name(x.dtype()), "), weight (", dtype_name(weight.dtype()), ") and bias (",
             bias.defined() ? dtype_name(bias.dtype()) : "none", ") must have the same dtype; convert with .to(dtype)");
  SNUG_CHECK(weight.device() == x.device() && (!bias.defined() || bias.device() == x.device()), DeviceError, op,
             ": input is on ", x.device().str(), " but weight is on ", weight.device().str(),
             bias.defined() ? str(" and bias on ", bias.device().str()) : std::string());
  a.in = weight.size(1), a.outf = weight.size(0);
  a.out_shape = x.shape();
  a.out_shape.back() = a.outf;
  a.x2 = raw::can_view(x, {x.numel() / std::max<int64_t>(a.in, 1), a.in}) ? raw::view(x, {-1, a.in})
                                                                          : raw::view(raw::contiguous(x), {-1, a.in});
  return a;
}

// r (N, out) = act(x2 W^T + b), pre receiving x2 W^T + b when it is defined.
Tensor linear_forward(const LinearArgs& a, Act act, const Tensor& pre) {
  const int64_t rows = a.x2.size(0);
  profiler::RecordOp rec("matmul", a.x2.device(), 2.0 * double(rows) * double(a.in) * double(a.outf));
  Tensor r = empty({rows, a.outf}, a.x2.options());  // inside the record: the profile counts its bytes
  backend_for(a.x2.device()).linear_act(a.x2, a.weight, a.bias, act, r, pre);
  return r;
}

// Which of a Linear layer's gradients (x, weight, bias) are wanted.
struct LinearNeeds {
  bool x, w, b;
};
LinearNeeds needs_of(const FunctionNode& self, size_t first) {
  return {self.needs_grad(first), self.needs_grad(first + 1), self.needs_grad(first + 2)};
}

// The backward of y = x W^T + b from g2 = dL/dy as (N, out); x2s is x as
// (N, in) (undefined when W needs no gradient), w the weight. Returns
// {gx (xs), gW, gb}, each undefined unless wanted.
G linear_backward(LinearNeeds need, const Tensor& g2, const Tensor& x2s, const Tensor& w, const Shape& xs, int64_t in,
                  int64_t outf) {
  if (!need.x && !need.w && !need.b) return {Tensor(), Tensor(), Tensor()};
  const int64_t rows = g2.size(0);
  const double gemms = (need.x ? 1 : 0) + (need.w ? 1 : 0);
  profiler::RecordOp rec("matmul", g2.device(), gemms * 2.0 * double(rows) * double(in) * double(outf));
  Tensor gx = need.x ? empty({rows, in}, g2.options()) : Tensor();  // (N, in)
  Tensor gw = need.w ? empty({outf, in}, g2.options()) : Tensor();  // (out, in)
  Tensor gb = need.b ? empty({outf}, g2.options()) : Tensor();      // (out)
  backend_for(g2.device()).linear_backward(g2, need.w ? x2s : Tensor(), need.x ? w : Tensor(), gx, gw, gb);
  return {need.x ? raw::view(gx, xs) : Tensor(), gw, gb};
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const LinearArgs a = linear_args("linear", x_in, weight_in, bias_in);
  const Tensor &x = a.x, &weight = a.weight, &bias = a.bias, &x2 = a.x2;
  Tensor y = autograd::keep_or_compute(
      "linear", [&] { return std::vector<Tensor>{raw::view(linear_forward(a, Act::none, Tensor()), a.out_shape)}; })[0];
  if (any_requires_grad({x, weight, bias})) {
    const Shape xs = x.shape();
    const int64_t in = a.in, outf = a.outf;
    record("linear", {x, weight, bias}, {y}, {weight.requires_grad() ? x2 : Tensor(), weight},
           [xs, in, outf](FunctionNode& self, const G& g) -> G {
             Tensor g2 = raw::view(raw::contiguous(g[0]), {-1, outf});  // (N, out)
             return linear_backward(needs_of(self, 0), g2, self.saved_at(0), self.saved_at(1), xs, in, outf);
           });
  }
  return y;
}

namespace {
// The derivative of an activation as an elementwise op: (g, s) -> g * act'(s),
// s being the output for ReLU and the pre-activation for GELU.
BinaryOp act_backward_op(Act act) {
  return act == Act::relu   ? BinaryOp::relu_backward
         : act == Act::gelu ? BinaryOp::gelu_backward
                            : BinaryOp::gelu_tanh_backward;
}

// g * act'(s) as (N, out), for the backward of linear_relu / linear_gelu. When
// the incoming gradient is seen by nothing but the engine's input vector
// (autograd::gradient_unshared with one handle), the result overwrites it: no
// new (N, out) buffer, and the incoming gradient no longer stays alive beside
// its successor through the GEMMs of linear's backward (with a separate
// activation node, the engine freed it in between).
Tensor act_backward(BinaryOp back, const Tensor& g, const Tensor& s, int64_t outf) {
  const bool alone = autograd::gradient_unshared(g, 1) && g.dtype() == s.dtype() && g.device() == s.device() &&
                     g.numel() == s.numel() && s.is_contiguous();
  if (!alone) return raw::binary(back, raw::view(raw::contiguous(g), {-1, outf}), raw::view(s, {-1, outf}));
  Tensor g2 = raw::view(g, {-1, outf});
  profiler::RecordOp rec(binary_op_name(back), g2.device());
  backend_for(g2.device()).binary(back, g2, raw::view(s, {-1, outf}), g2);  // elementwise: in place is safe
  return g2;
}

// linear_relu and linear_gelu: act(linear(x, weight, bias)) as one op, the
// activation applied by the backend's linear_act (on the CPU in f32, in the
// GEMM's store: NOTE [ The activation in the GEMM's store ] in
// core/cpu/gemm_avx512.cpp). Backward: g * act'(.) in one elementwise pass
// (ReLU from the output, GELU from the saved pre-activation), then linear's
// backward.
Tensor linear_act(const char* op, const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Act act) {
  const LinearArgs a = linear_args(op, x_in, weight_in, bias_in);
  const bool relu = act == Act::relu;
  const Tensor &x = a.x, &weight = a.weight, &bias = a.bias, &x2 = a.x2;
  const bool grad = any_requires_grad({x, weight, bias});
  // "linear" for selective checkpointing: a policy that keeps Linear outputs
  // keeps this op's output (and GELU's pre-activation) too.
  std::vector<Tensor> outs = autograd::keep_or_compute("linear", [&] {
    Tensor z = grad && !relu ? empty({x2.size(0), a.outf}, x2.options()) : Tensor();  // (N, out)
    Tensor h = linear_forward(a, act, z);
    std::vector<Tensor> r{raw::view(h, a.out_shape)};
    if (z.defined()) r.push_back(z);
    return r;
  });
  const Tensor& y = outs[0];
  if (grad) {
    const Shape xs = x.shape();
    const int64_t in = a.in, outf = a.outf;
    const BinaryOp back = act_backward_op(act);
    // ReLU's derivative comes from its output (y > 0 exactly where z > 0), GELU's from z.
    record(op, {x, weight, bias}, {y}, {weight.requires_grad() ? x2 : Tensor(), weight, relu ? y : outs.at(1)},
           [xs, in, outf, back](FunctionNode& self, const G& g) -> G {
             Tensor g2 = act_backward(back, g[0], self.saved_at(2), outf);  // (N, out)
             // Done with the activation: free it before the GEMMs, as the engine
             // would between a separate activation node and linear's.
             if (autograd::saved_tensors_die_after_node()) self.saved[2].release();
             return linear_backward(needs_of(self, 0), g2, self.saved_at(0), self.saved_at(1), xs, in, outf);
           });
  }
  return y;
}

Act gelu_act(GeluApprox approximate) { return approximate == GeluApprox::tanh ? Act::gelu_tanh : Act::gelu; }
}  // namespace

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_act("linear_relu", x, weight, bias, Act::relu);
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApprox approximate) {
  return linear_act("linear_gelu", x, weight, bias, gelu_act(approximate));
}

namespace {
// relu_mlp and gelu_mlp: linear(act(linear(x, w1, b1)), w2, b2) as one op.
// Forward: the two linear_act calls (the first with the activation, keeping
// the pre-activation z when GELU's gradient is wanted). Backward: the second
// layer's weight and bias gradients, then dz = (g W2) * act'(z) in one
// backend call (linear_backward_act: on the CPU one GEMM, with the derivative
// in its store) instead of dh = g W2 and an elementwise pass over it, then
// the first layer's backward. ReLU's derivative comes from h, which the
// second layer's weight gradient keeps anyway (h > 0 exactly where z > 0).
Tensor mlp(const char* op, const Tensor& x_in, const Tensor& w1_in, const Tensor& b1_in, const Tensor& w2_in,
           const Tensor& b2_in, Act act) {
  const LinearArgs a1 = linear_args(op, x_in, w1_in, b1_in);
  const Tensor w2 = autocast::lower(w2_in), b2 = autocast::lower(b2_in);
  SNUG_CHECK(w2.dim() == 2 && w2.size(1) == a1.outf, ShapeError, op, ": second weight of shape ", shape_str(w2.shape()),
             " does not take the first layer's ", a1.outf, " outputs (expected (out, ", a1.outf, "))");
  if (b2.defined())
    SNUG_CHECK(b2.dim() == 1 && b2.size(0) == w2.size(0), ShapeError, op, ": bias of shape ", shape_str(b2.shape()),
               " does not match the second weight ", shape_str(w2.shape()));
  const Tensor &x = a1.x, &w1 = a1.weight, &b1 = a1.bias, &x2 = a1.x2;
  const bool relu = act == Act::relu;
  const bool first_grad = any_requires_grad({x, w1, b1}), grad = first_grad || any_requires_grad({w2, b2});
  const int64_t rows = x2.size(0), hid = a1.outf, outf = w2.size(0);
  // "linear" for selective checkpointing, as for linear_act.
  std::vector<Tensor> outs = autograd::keep_or_compute("linear", [&] {
    Tensor z = first_grad && !relu ? empty({rows, hid}, x2.options()) : Tensor();  // (N, hidden), for act'(z)
    Tensor h = linear_forward(a1, act, z);                                         // (N, hidden)
    const LinearArgs a2 = linear_args(op, h, w2, b2);
    std::vector<Tensor> r{linear_forward(a2, Act::none, Tensor()), h};  // (N, out), (N, hidden)
    if (z.defined()) r.push_back(z);
    return r;
  });
  Shape ys = x.shape();
  ys.back() = outf;
  Tensor y = raw::view(outs[0], ys);
  if (grad) {
    const Shape xs = x.shape();
    const int64_t in = a1.in;
    // saved: x (N, in), W1, what act' reads (h for ReLU, z for GELU), h, W2
    record(op, {x, w1, b1, w2, b2}, {y},
           {w1.requires_grad() ? x2 : Tensor(), w1, first_grad ? (relu ? outs[1] : outs.at(2)) : Tensor(),
            w2.requires_grad() ? outs[1] : Tensor(), w2},
           [xs, in, hid, outf, act](FunctionNode& self, const G& g) -> G {
             const bool die = autograd::saved_tensors_die_after_node();
             Tensor g2 = raw::view(raw::contiguous(g[0]), {-1, outf});  // (N, out)
             const int64_t n = g2.size(0);
             // Second layer: its weight and bias gradients (its input's comes below, with act').
             const G l2 = linear_backward({false, self.needs_grad(3), self.needs_grad(4)}, g2, self.saved_at(3),
                                          self.saved_at(4), xs, hid, outf);
             if (die) self.saved[3].release();  // h (still held for ReLU's act' below)
             G l1(3);
             const LinearNeeds n1 = needs_of(self, 0);
             if (n1.x || n1.w || n1.b) {
               // z (h for ReLU) stays alive through the first layer's backward, as it always
               // has: the checkpoint planner's layer model (nn/planner.cpp) is an upper bound
               // with that lifetime, and a 16-block GPT's step ran 64 KiB over its plan when
               // the MLP freed it before the GEMMs (tests/test_planner.cpp).
               const Tensor z = self.saved_at(2);
               Tensor dz;  // (N, hidden) = (g2 (N, out) W2 (out, hidden)) * act'(z)
               {
                 profiler::RecordOp rec("matmul", g2.device(), 2.0 * double(n) * double(hid) * double(outf));
                 dz = empty({n, hid}, g2.options());  // inside the record: the profile counts its bytes
                 backend_for(g2.device()).linear_backward_act(g2, self.saved_at(4), act, z, dz);
               }
               if (die) self.saved[2].release();
               l1 = linear_backward(n1, dz, self.saved_at(0), self.saved_at(1), xs, in, hid);
             }
             return {l1[0], l1[1], l1[2], l2[1], l2[2]};
           });
  }
  return y;
}
}  // namespace

Tensor relu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  return mlp("relu_mlp", x, w1, b1, w2, b2, Act::relu);
}

Tensor gelu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                GeluApprox approximate) {
  return mlp("gelu_mlp", x, w1, b1, w2, b2, gelu_act(approximate));
}

// ---- layer_norm ------------------------------------------------------------------
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  SNUG_CHECK(x.dim() >= 1, ShapeError, "layer_norm: input needs at least 1 dim");
  const int64_t C = x.size(-1);
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      SNUG_CHECK(p->dim() == 1 && p->size(0) == C, ShapeError, "layer_norm: weight/bias of shape ",
                 shape_str(p->shape()), " do not match the last dim of input ", shape_str(x.shape()));
  SNUG_CHECK(x.is_floating_point(), DTypeError, "layer_norm: expected a floating input, got ", dtype_name(x.dtype()));
  profiler::RecordOp rec("layer_norm", x.device());
  Tensor xc = raw::contiguous(x);
  Tensor w = weight.defined() ? raw::contiguous(raw::to_dtype(weight, x.dtype())) : Tensor();
  Tensor b = bias.defined() ? raw::contiguous(raw::to_dtype(bias, x.dtype())) : Tensor();
  const int64_t R = C ? x.numel() / C : 0;
  // mean and rstd (R) come with y: backward needs them, so a kept layer_norm keeps all three.
  auto outs = autograd::keep_or_compute("layer_norm", [&] {
    Tensor y = empty(x.shape(), x.options());
    Tensor mean = empty({R}, TensorOptions(DType::f32, x.device()));
    Tensor rstd = empty({R}, TensorOptions(DType::f32, x.device()));
    backend_for(x.device()).layer_norm(xc, w, b, eps, y, mean, rstd);
    return std::vector<Tensor>{y, mean, rstd};
  });
  Tensor y = outs[0], mean = outs[1], rstd = outs[2];
  if (any_requires_grad({x, weight, bias})) {
    record("layer_norm", {x, weight, bias}, {y}, {xc, w, mean, rstd}, [C](FunctionNode& self, const G& g) -> G {
      Tensor xs = self.saved_at(0), ws = self.saved_at(1);
      profiler::RecordOp rec("layer_norm_backward", xs.device());
      Tensor go = raw::contiguous(raw::to_dtype(g[0], xs.dtype()));
      Tensor gx = self.needs_grad(0) ? empty(xs.shape(), xs.options()) : Tensor();
      Tensor gw = self.needs_grad(1) ? empty({C}, xs.options()) : Tensor();
      Tensor gb = self.needs_grad(2) ? empty({C}, xs.options()) : Tensor();
      backend_for(xs.device()).layer_norm_backward(go, xs, ws, self.saved_at(2), self.saved_at(3), gx, gw, gb);
      return {gx, gw, gb};
    });
  }
  return y;
}

// ---- residual add + layer norm ----------------------------------------------------
// h = x + r, y = layer_norm(h); backward: dh = g_h + layer_norm's dx from g_y, which is both x's
// and r's gradient (in their dtype, which is h's).
std::array<Tensor, 2> add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias,
                                     double eps) {
  // Broadcasting, mixed dtypes or devices, a non-floating input: the two ops, whose checks and
  // promotion apply.
  if (x.shape() != r.shape() || x.dtype() != r.dtype() || x.device() != r.device() || !x.is_floating_point() ||
      x.dim() < 1) {
    Tensor h = x + r;
    return {h, layer_norm(h, weight, bias, eps)};
  }
  const int64_t C = x.size(-1);
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      SNUG_CHECK(p->dim() == 1 && p->size(0) == C, ShapeError, "add_layer_norm: weight/bias of shape ",
                 shape_str(p->shape()), " do not match the last dim of input ", shape_str(x.shape()));
  profiler::RecordOp rec("add_layer_norm", x.device());
  const Tensor xc = raw::contiguous(x), rc = raw::contiguous(r);
  const Tensor w = weight.defined() ? raw::contiguous(raw::to_dtype(weight, x.dtype())) : Tensor();
  const Tensor b = bias.defined() ? raw::contiguous(raw::to_dtype(bias, x.dtype())) : Tensor();
  const int64_t R = C ? x.numel() / C : 0;
  // "layer_norm" to a recomputation policy (autograd/checkpoint.h): one name for both norms.
  auto outs = autograd::keep_or_compute("layer_norm", [&] {
    Tensor h = empty(x.shape(), x.options()), y = empty(x.shape(), x.options());
    Tensor mean = empty({R}, TensorOptions(DType::f32, x.device()));
    Tensor rstd = empty({R}, TensorOptions(DType::f32, x.device()));
    backend_for(x.device()).add_layer_norm(xc, rc, w, b, eps, h, y, mean, rstd);
    return std::vector<Tensor>{h, y, mean, rstd};
  });
  Tensor h = outs[0], y = outs[1];
  if (any_requires_grad({x, r, weight, bias})) {
    record("add_layer_norm", {x, r, weight, bias}, {h, y}, {outs[0], w, outs[2], outs[3]},
           [C](FunctionNode& self, const G& g) -> G {
             const Tensor hs = self.saved_at(0), ws = self.saved_at(1);
             profiler::RecordOp rec("add_layer_norm_backward", hs.device());
             // The engine hands both outputs' gradients, zeros for an unused one.
             const Tensor gh = raw::contiguous(raw::to_dtype(g[0], hs.dtype()));
             const Tensor gy = raw::contiguous(raw::to_dtype(g[1], hs.dtype()));
             Tensor gsum = self.needs_grad(0) || self.needs_grad(1) ? empty(hs.shape(), hs.options()) : Tensor();
             Tensor gw = self.needs_grad(2) ? empty({C}, hs.options()) : Tensor();
             Tensor gb = self.needs_grad(3) ? empty({C}, hs.options()) : Tensor();
             backend_for(hs.device())
                 .add_layer_norm_backward(gy, gh, hs, ws, self.saved_at(2), self.saved_at(3), gsum, gw, gb);
             return {self.needs_grad(0) ? gsum : Tensor(), self.needs_grad(1) ? gsum : Tensor(), gw, gb};
           });
  }
  return {h, y};
}

// ---- embedding -------------------------------------------------------------------
// indices (...) i64, weight (num, dim) -> (..., dim); backward: index_add rows.
Tensor embedding(const Tensor& indices, const Tensor& weight) {
  SNUG_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be (num, dim), got ", shape_str(weight.shape()));
  SNUG_CHECK(indices.dtype() == DType::i64 || indices.dtype() == DType::i32, DTypeError,
             "embedding: indices must be i64 or i32, got ", dtype_name(indices.dtype()));
  Tensor flat = raw::view(raw::contiguous(raw::to_dtype(indices, DType::i64)), {-1});
  Tensor rows = raw::index_select(weight, 0, flat);  // (n, dim); checks the range
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.size(1));
  Tensor y = raw::view(rows, out_shape);
  if (any_requires_grad({weight})) {
    Shape ws = weight.shape();
    record("embedding", {weight}, {y}, {flat}, [ws](FunctionNode& self, const G& g) -> G {
      Tensor g2 = raw::view(raw::contiguous(g[0]), {-1, ws[1]});
      return {raw::index_add(zeros(ws, g2.options()), 0, self.saved_at(0), g2)};
    });
  }
  // Autocast: the rows are looked up in the weight's dtype (so backward sums
  // them there) and the output is lowered: it starts a residual stream that
  // the low-precision ops consume (docs/mixed_precision.md).
  return autocast::lower(y);
}

// ---- losses ------------------------------------------------------------------------
namespace {
Tensor reduce_loss(const Tensor& per_row, Reduction r, const Tensor& count_valid = Tensor()) {
  switch (r) {
    case Reduction::none:
      return per_row;
    case Reduction::sum:
      return sum(per_row);
    case Reduction::mean:
      return count_valid.defined() ? sum(per_row) / count_valid : mean(per_row);
  }
  return per_row;
}
}  // namespace

// logits (N, C), target (N) -> scalar (or (N) with Reduction::none)
// loss_i = (1 - eps) * (-logp[i, t_i]) + eps * mean_c(-logp[i, c]) for rows with t_i != ignore
// d loss_i / d logits_i = softmax_i - (1 - eps) * onehot(t_i) - eps / C
// The arithmetic is the backend's (cross_entropy, cross_entropy_backward: NOTE [ Fused
// cross-entropy ] in core/fused_defaults.cpp): under autocast it reads 16-bit logits as they are
// (f32 math inside, an f32 loss) and writes their gradient in their dtype, so no f32 copy of the
// logits, of their log-softmax or of their gradient is made; backward keeps the logits and one
// logsumexp per row.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double eps,
                     Reduction reduction) {
  SNUG_CHECK(logits.dim() == 2, ShapeError, "cross_entropy: logits must be (N, C), got ", shape_str(logits.shape()),
             "; flatten extra dims first, e.g. logits.view({-1, C})");
  SNUG_CHECK(logits.is_floating_point(), DTypeError,
             "cross_entropy: logits must be floating (f32, f64, f16, bf16), got ", dtype_name(logits.dtype()));
  SNUG_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), ShapeError, "cross_entropy: target of shape ",
             shape_str(target.shape()), " does not match logits ", shape_str(logits.shape()), " (expected (",
             logits.size(0), "))");
  SNUG_CHECK(target.dtype() == DType::i64, DTypeError, "cross_entropy: target must be i64 class indices, got ",
             dtype_name(target.dtype()));
  SNUG_CHECK(target.device() == logits.device(), DeviceError, "cross_entropy: logits are on ",
             logits.device().str(), " but target is on ", target.device().str());
  SNUG_CHECK(eps >= 0 && eps < 1, ValueError, "cross_entropy: label_smoothing must be in [0, 1), got ", eps);
  const int64_t N = logits.size(0), C = logits.size(1);
  SNUG_CHECK(C >= 1 || N == 0, ShapeError, "cross_entropy: logits ", shape_str(logits.shape()), " have no classes");
  Tensor valid = raw::compare_scalar(CompareOp::ne, target, static_cast<double>(ignore_index));  // (N) bool
  {
    // Range check on the valid targets only, with a message naming the value.
    Tensor tsafe = raw::where(valid, target, zeros({}, TensorOptions(DType::i64, target.device())));
    Tensor bad = raw::binary(
        BinaryOp::mul, raw::to_dtype(valid, DType::i64),
        raw::to_dtype(
            raw::binary(BinaryOp::maximum, raw::to_dtype(raw::compare_scalar(CompareOp::lt, tsafe, 0), DType::i64),
                        raw::to_dtype(raw::compare_scalar(CompareOp::ge, tsafe, double(C)), DType::i64)),
            DType::i64));
    if (raw::reduce(ReduceOp::sum, bad, {}, false).item() > 0) {
      Tensor idx = raw::arg_reduce(true, bad, 0, false);
      int64_t i = static_cast<int64_t>(idx.item());
      throw IndexError(str("cross_entropy: target[", i, "] = ", static_cast<int64_t>(raw::select(target, 0, i).item()),
                           " is out of range for ", C, " classes (expected 0..", C - 1, " or ignore_index ",
                           ignore_index, ")"));
    }
  }
  const Tensor x = raw::contiguous(logits), t = raw::contiguous(target);
  const TensorOptions acc(promote_types(x.dtype(), DType::f32), x.device());
  Tensor loss = empty({N}, acc), lse = empty({N}, acc);
  if (N > 0) {
    profiler::RecordOp rec("cross_entropy", x.device());
    backend_for(x.device()).cross_entropy(x, t, ignore_index, eps, loss, lse);
  }
  Tensor validf = raw::to_dtype(valid, acc.dtype);
  Tensor count = raw::reduce(ReduceOp::sum, validf, {}, false);
  Tensor out;
  switch (reduction) {
    case Reduction::none:
      out = loss;
      break;
    case Reduction::sum:
      out = raw::reduce(ReduceOp::sum, loss, {}, false);
      break;
    case Reduction::mean:
      out = raw::binary(BinaryOp::div, raw::reduce(ReduceOp::sum, loss, {}, false), count);
      break;
  }
  if (any_requires_grad({logits})) {
    record("cross_entropy", {logits}, {out}, {x, t, lse, count},
           [eps, N, ignore_index, reduction](FunctionNode& self, const G& g) -> G {
             const Tensor xs = self.saved_at(0), ts = self.saved_at(1), ls = self.saved_at(2);
             // Per-row weight w_i = upstream grad for row i (x 1/count for mean); the backend
             // gives ignored rows zeros whatever their weight.
             Tensor w = reduction == Reduction::none ? g[0] : raw::expand(raw::view(g[0], {1}), {N});
             if (reduction == Reduction::mean) w = raw::binary(BinaryOp::div, w, self.saved_at(3));
             w = raw::contiguous(w);  // (N)
             Tensor gl = empty(xs.shape(), xs.options());                           // (N, C), the logits' dtype
             if (N > 0) {
               profiler::RecordOp rec("cross_entropy_backward", xs.device());
               backend_for(xs.device()).cross_entropy_backward(xs, ts, ls, w, ignore_index, eps, gl);
             }
             return {gl};
           });
  }
  return out;
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target, int64_t ignore_index, Reduction reduction) {
  const Tensor log_probs = autocast::widen(log_probs_in);  // autocast: losses in f32
  SNUG_CHECK(log_probs.dim() == 2, ShapeError, "nll_loss: log_probs must be (N, C), got ",
             shape_str(log_probs.shape()));
  SNUG_CHECK(target.dim() == 1 && target.size(0) == log_probs.size(0), ShapeError, "nll_loss: target of shape ",
             shape_str(target.shape()), " does not match log_probs ", shape_str(log_probs.shape()));
  SNUG_CHECK(target.dtype() == DType::i64, DTypeError, "nll_loss: target must be i64, got ",
             dtype_name(target.dtype()));
  const int64_t N = log_probs.size(0);
  Tensor valid = raw::compare_scalar(CompareOp::ne, target, static_cast<double>(ignore_index));
  Tensor tsafe = raw::where(valid, target, zeros({}, TensorOptions(DType::i64, target.device())));
  Tensor picked = gather(log_probs, 1, raw::view(tsafe, {N, 1})).view({N});  // differentiable; checks range
  Tensor validf = raw::to_dtype(valid, log_probs.dtype());
  Tensor per_row = -(picked * validf);
  return reduce_loss(per_row, reduction, reduction == Reduction::mean ? sum(validf) : Tensor());
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const Tensor input = autocast::widen(input_in), target = autocast::widen(target_in);  // autocast: f32
  SNUG_CHECK(input.shape() == target.shape(), ShapeError, "mse_loss: input ", shape_str(input.shape()), " and target ",
             shape_str(target.shape()), " must have the same shape");
  Tensor d = input - target;
  return reduce_loss(d * d, reduction);
}

// loss = max(x, 0) - x t + log(1 + exp(-|x|));  d/dx = sigmoid(x) - t
Tensor binary_cross_entropy_with_logits(const Tensor& x_in, const Tensor& t_in, Reduction reduction) {
  const Tensor x = autocast::widen(x_in), t = autocast::widen(t_in);  // autocast: losses in f32
  SNUG_CHECK(x.shape() == t.shape(), ShapeError, "binary_cross_entropy_with_logits: logits ", shape_str(x.shape()),
             " and target ", shape_str(t.shape()), " must have the same shape");
  Tensor tt = raw::to_dtype(t, x.dtype());
  Tensor l = raw::binary(BinaryOp::sub, raw::unary(UnaryOp::relu, x), raw::binary(BinaryOp::mul, x, tt));
  Tensor soft =
      raw::unary(UnaryOp::log,
                 raw::unary(UnaryOp::affine,
                            raw::unary(UnaryOp::exp, raw::unary(UnaryOp::neg, raw::unary(UnaryOp::abs, x))), 1.0, 1.0));
  l = raw::binary(BinaryOp::add, l, soft);
  if (any_requires_grad({x, t})) {
    record("binary_cross_entropy_with_logits", {x, t}, {l}, {x, tt}, [](FunctionNode& self, const G& g) -> G {
      Tensor xs = self.saved_at(0), ts = self.saved_at(1);
      Tensor gx, gt;
      if (self.needs_grad(0))
        gx = raw::binary(BinaryOp::mul, g[0], raw::binary(BinaryOp::sub, raw::unary(UnaryOp::sigmoid, xs), ts));
      if (self.needs_grad(1)) gt = raw::binary(BinaryOp::mul, g[0], raw::unary(UnaryOp::neg, xs));
      return {gx, gt};
    });
  }
  return reduce_loss(l, reduction);
}

// ---- attention ---------------------------------------------------------------------
// backward of y = softmax(scale * x): gx = scale * y * (g - sum(g * y))
Tensor causal_softmax(const Tensor& x, double scale) {
  SNUG_CHECK(x.dim() >= 2, ShapeError, "causal_softmax: expected (..., Tq, Tk), got ", shape_str(x.shape()));
  SNUG_CHECK(x.is_floating_point(), DTypeError, "causal_softmax: expected a floating input, got ",
             dtype_name(x.dtype()));
  profiler::RecordOp rec("causal_softmax", x.device());
  Tensor xc = raw::contiguous(x);
  Tensor y = autograd::keep_or_compute("causal_softmax", [&] {
    Tensor r = empty(x.shape(), x.options());
    backend_for(x.device()).causal_softmax(xc, scale, r);
    return std::vector<Tensor>{r};
  })[0];
  if (any_requires_grad({x}))
    record("causal_softmax", {x}, {y}, {y}, [scale](FunctionNode& self, const G& g) -> G {
      Tensor gx = raw::softmax_backward(raw::contiguous(g[0]), self.saved_at(0), -1, false);
      return {scale == 1.0 ? gx : raw::unary(UnaryOp::affine, gx, scale, 0.0)};
    });
  return y;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& mask,
                                    double dropout_p, bool training, const Tensor& key_padding_mask) {
  SNUG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError,
             "scaled_dot_product_attention: q, k, v must have the same number of dims (B, H, T, D), got ",
             shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  SNUG_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2), ShapeError,
             "scaled_dot_product_attention: shapes q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
             shape_str(v.shape()), " do not agree (q/k head size, k/v length)");
  const int64_t Tq = q.size(-2), Tk = k.size(-2);
  if (mask.defined())
    SNUG_CHECK(mask.dtype() == DType::b8 || is_floating(mask.dtype()), DTypeError,
               "scaled_dot_product_attention: the mask must be bool (true = masked out) or floating (added to the "
               "scores), got ",
               dtype_name(mask.dtype()));
  Tensor kp;  // key padding as (B, 1, ..., 1, Tk)
  if (key_padding_mask.defined()) {
    SNUG_CHECK(key_padding_mask.dtype() == DType::b8 && key_padding_mask.dim() == 2 && q.dim() >= 3 &&
                   key_padding_mask.size(0) == q.size(0) && key_padding_mask.size(1) == Tk,
               ShapeError, "scaled_dot_product_attention: key_padding_mask must be (B, Tk) = (", q.size(0), ", ", Tk,
               ") bool, got ", dtype_name(key_padding_mask.dtype()), " ", shape_str(key_padding_mask.shape()));
    Shape ks(size_t(q.dim()), 1);
    ks[0] = q.size(0);
    ks.back() = Tk;
    kp = key_padding_mask.reshape(ks);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor scores = matmul(q, k.transpose(-2, -1));  // (B, H, Tq, Tk)
  Tensor p;
  if (causal && !mask.defined() && !kp.defined()) {
    p = causal_softmax(scores, scale);
  } else {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    Tensor s = scores * scale;
    if (mask.defined()) s = mask.dtype() == DType::b8 ? masked_fill(s, mask, -kInf) : s + mask.to(s.dtype());
    if (kp.defined()) s = masked_fill(s, kp, -kInf);
    if (causal) {
      // Fix: the index tensors are made on q's device (they were always on the
      // CPU, so causal + mask failed for tensors on any other device).
      const TensorOptions io(DType::i64, q.device());
      Tensor i = arange(Tq, io).view({Tq, 1}), j = arange(Tk, io).view({1, Tk});
      s = masked_fill(s, gt(j, i + double(Tk - Tq)), -kInf);
    }
    // A row that sees no key gives zeros (NOTE [ Attention masks ] in
    // core/backend.h): its scores become 0 before the softmax and its
    // probabilities 0 after, so neither value nor gradient is NaN.
    const Tensor none = raw::compare_scalar(CompareOp::eq, raw::reduce(ReduceOp::max, s, {-1}, true), -kInf);
    p = masked_fill(softmax(masked_fill(s, none, 0.0), -1), none, 0.0);
  }
  if (dropout_p > 0 && training) p = dropout(p, dropout_p, true);
  return matmul(p, v);  // (B, H, Tq, D)
}

// ---- self-attention from packed q|k|v ------------------------------------------------------
namespace {

// The user's masks as the backend's AttentionMask (NOTE [ Attention masks ]):
// key padding (B, T) bool contiguous, the mask expanded to (B, heads, T, T)
// (a view: nothing is copied unless its dtype must change).
AttentionMask backend_mask(const Tensor& qkv, int64_t heads, bool causal, const Tensor& attn_mask,
                           const Tensor& key_padding_mask) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  AttentionMask m;
  m.causal = causal;
  if (key_padding_mask.defined()) {
    SNUG_CHECK(key_padding_mask.dtype() == DType::b8 && key_padding_mask.shape() == (Shape{B, T}), ShapeError,
               "self_attention: key_padding_mask must be (B, T) = (", B, ", ", T, ") bool (true at padding), got ",
               dtype_name(key_padding_mask.dtype()), " ", shape_str(key_padding_mask.shape()));
    SNUG_CHECK(key_padding_mask.device() == qkv.device(), DeviceError, "self_attention: key_padding_mask is on ",
               key_padding_mask.device().str(), ", qkv on ", qkv.device().str());
    m.key_padding = raw::contiguous(key_padding_mask);
  }
  if (attn_mask.defined()) {
    SNUG_CHECK(attn_mask.dtype() == DType::b8 || is_floating(attn_mask.dtype()), DTypeError,
               "self_attention: attn_mask must be bool (true = masked out) or floating (added to the scores), got ",
               dtype_name(attn_mask.dtype()));
    SNUG_CHECK(attn_mask.device() == qkv.device(), DeviceError, "self_attention: attn_mask is on ",
               attn_mask.device().str(), ", qkv on ", qkv.device().str());
    const Shape full{B, heads, T, T};
    bool fits = attn_mask.dim() <= 4;
    for (int64_t d = 1; fits && d <= attn_mask.dim(); ++d) {
      const int64_t s = attn_mask.size(-d);
      fits = s == 1 || s == full[size_t(4 - d)];
    }
    SNUG_CHECK(fits, ShapeError, "self_attention: attn_mask ", shape_str(attn_mask.shape()),
               " does not broadcast to (B, heads, T, T) = ", shape_str(full));
    const DType want = attn_mask.dtype() == DType::b8 ? DType::b8 : qkv.dtype();
    m.mask = raw::expand(raw::to_dtype(attn_mask, want), full);
  }
  return m;
}

}  // namespace

// qkv (B, T, 3C) -> (B, T, C); backward: dqkv (B, T, 3C), written whole by the kernel.
Tensor self_attention(const Tensor& qkv, int64_t heads, bool causal, const Tensor& attn_mask,
                      const Tensor& key_padding_mask, double dropout_p, bool training, bool fused) {
  SNUG_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, ShapeError, "self_attention: expected qkv (B, T, 3C), got ",
             shape_str(qkv.shape()));
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  SNUG_CHECK(heads > 0 && C % heads == 0, ValueError, "self_attention: ", heads, " heads do not divide the width ", C);
  const int64_t D = C / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(D, 1)));
  SNUG_CHECK(qkv.is_floating_point(), DTypeError, "self_attention: expected a floating qkv, got ",
             dtype_name(qkv.dtype()));
  const AttentionMask am = backend_mask(qkv, heads, causal, attn_mask, key_padding_mask);
  // The fused kernels have no dropout: with it, the composed ops.
  if (!fused || (dropout_p > 0 && training)) {
    Tensor split = qkv.view({B, T, 3, heads, D}).permute({2, 0, 3, 1, 4});  // (3, B, H, T, D)
    Tensor y = scaled_dot_product_attention(split.select(0, 0), split.select(0, 1), split.select(0, 2), causal,
                                            am.mask, dropout_p, training, am.key_padding);  // (B, H, T, D)
    return y.transpose(1, 2).reshape({B, T, C});
  }
  // The backend's attention (NOTE [ Fused attention ] in core/cpu/attention.h;
  // 16-bit qkv: NOTE [ 16-bit attention ] in core/cpu/attention.cpp). What
  // backward keeps: qkv in its own dtype, y, the f32 (f64 for f64) row
  // logsumexps, and the masks (the caller's tensors, or views of them).
  const char* name = causal ? "causal_attention" : "attention";
  const double flops = Backend::attention_flops(B, T, heads, D, causal);
  profiler::RecordOp rec(name, qkv.device(), flops);
  const Tensor xc = raw::contiguous(qkv);  // (B, T, 3C)
  std::vector<Tensor> outs = autograd::keep_or_compute(name, [&] {
    Tensor y = empty({B, T, C}, xc.options());                                                          // (B, T, C)
    Tensor lse = empty({B, heads, T}, xc.options().with_dtype(promote_types(xc.dtype(), DType::f32)));  // (B, H, T)
    backend_for(xc.device()).attention(xc, heads, scale, am, y, lse);
    return std::vector<Tensor>{y, lse};
  });
  const Tensor& y = outs[0];
  if (any_requires_grad({qkv}))
    record(name, {qkv}, {y}, {xc, y, outs[1]},
           [heads, scale, flops, am](FunctionNode& self, const G& g) -> G {
             const Tensor x = self.saved_at(0);
             profiler::RecordOp rec(am.causal ? "causal_attention_backward" : "attention_backward", x.device(),
                                    2.5 * flops);
             Tensor gx = empty(x.shape(), x.options());  // (B, T, 3C)
             backend_for(x.device())
                 .attention_backward(x, self.saved_at(1), self.saved_at(2),
                                     raw::contiguous(raw::to_dtype(g[0], x.dtype())), heads, scale, am, gx);
             return {gx};
           });
  return y;
}

Tensor causal_self_attention(const Tensor& qkv, int64_t heads, double dropout_p, bool training, bool fused) {
  return self_attention(qkv, heads, true, Tensor(), Tensor(), dropout_p, training, fused);
}

}  // namespace snug::nn::functional

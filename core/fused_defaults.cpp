// SPDX-License-Identifier: MIT
// The default of every fused backend entry (core/backend.h), composed from the
// backend's own primitives: what a backend without a fused kernel runs, and
// what an override falls back to where its kernel does not apply.
//
// NOTE [ Fused ops are backend entries ]
// A fused op (a Linear with its bias and activation, the two-layer MLP's
// backward, causal attention, conv2d + ReLU) is a method of Backend like
// matmul is, not a branch in nn/. Its default here is the composition the
// fused kernel replaces, written with the same primitives and in the same
// order as the unfused ops, so it gives the unfused ops' values: nn/ records
// one autograd node for the fused op whichever runs, and never asks which
// device, dtype or layout it has. A backend overrides an entry with its fast
// kernel and decides there, and only there, whether that kernel applies
// (CpuBackend::linear_act: f32/f16/bf16, contiguous; CudaBackend's attention:
// f32/16-bit, head size <= 256), calling Backend::X otherwise. Which layers
// run as fused ops is decided by nn::fuse (nn/fuse.h), not by pattern matching
// in forward.
#include <snug/core/backend.h>

#include <cmath>
#include <limits>

#include <snug/core/cpu/attention.h>
#include <snug/core/raw_ops.h>

namespace snug {

namespace {

// t (R, C) as (1, R, C), the batch of one Backend::matmul takes, the way
// raw::matmul makes it (a view when the strides allow, as they do here).
Tensor batch1(const Tensor& t) {
  const Shape s3{1, t.size(0), t.size(1)};
  return raw::can_view(t, s3) ? raw::view(t, s3) : raw::view(raw::contiguous(t), s3);
}

UnaryOp unary_of(Backend::Activation act) {
  switch (act) {
    case Backend::Activation::relu:
      return UnaryOp::relu;
    case Backend::Activation::gelu:
      return UnaryOp::gelu;
    case Backend::Activation::gelu_tanh:
      return UnaryOp::gelu_tanh;
    case Backend::Activation::none:
      break;
  }
  throw ValueError("linear_act: no activation to apply");
}

// (g, z) -> g * act'(z), as the activation's own backward computes it.
BinaryOp derivative_of(Backend::Activation act) {
  switch (act) {
    case Backend::Activation::relu:
      return BinaryOp::relu_backward;
    case Backend::Activation::gelu:
      return BinaryOp::gelu_backward;
    case Backend::Activation::gelu_tanh:
      return BinaryOp::gelu_tanh_backward;
    case Backend::Activation::none:
      break;
  }
  throw ValueError("linear_backward_act: expected relu, gelu or gelu_tanh");
}

// q, k, v of a packed (B, T, 3C) projection, each (B, H, T, D), strided views.
struct Heads {
  Tensor q, k, v;
};
Heads heads_of(const Tensor& qkv, int64_t H) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3 / H;
  const Tensor split = raw::permute(raw::view(qkv, {B, T, 3, H, D}), {2, 0, 3, 1, 4});  // (3, B, H, T, D)
  return {raw::select(split, 0, 0), raw::select(split, 0, 1), raw::select(split, 0, 2)};
}

}  // namespace

// ---- linear + activation ---------------------------------------------------------------
// matmul, then the bias added in place, then the activation: the values of
// linear's matmul and broadcast add followed by relu/gelu.
void Backend::linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act, const Tensor& out,
                         const Tensor& pre) {
  const Tensor& r = pre.defined() ? pre : out;  // (N, out): where x W^T + b goes first
  matmul(batch1(x), batch1(raw::transpose(weight, 0, 1)), batch1(r));
  if (bias.defined()) binary(BinaryOp::add, r, raw::expand(bias, r.shape()), r);  // elementwise: in place is safe
  if (act != Activation::none)
    unary(unary_of(act), 0.0, 0.0, r, out);
  else if (pre.defined())
    copy(pre, out);
}

void Backend::linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& grad_x,
                              const Tensor& grad_weight, const Tensor& grad_bias) {
  if (grad_x.defined()) matmul(batch1(grad_out), batch1(weight), batch1(grad_x));  // (N, out) (out, in)
  if (grad_weight.defined())
    matmul(batch1(raw::transpose(grad_out, 0, 1)), batch1(x), batch1(grad_weight));  // (out, N) (N, in)
  if (grad_bias.defined()) reduce(ReduceOp::sum, grad_out, {0}, raw::view(grad_bias, {1, grad_bias.size(0)}));
}

void Backend::linear_backward_act(const Tensor& grad_out, const Tensor& weight, Activation act, const Tensor& z,
                                  const Tensor& grad_z) {
  const BinaryOp back = derivative_of(act);
  matmul(batch1(grad_out), batch1(weight), batch1(grad_z));  // (N, out) (out, in)
  binary(back, grad_z, z, grad_z);                           // elementwise: in place is safe
}

// ---- causal attention ----------------------------------------------------------------------
// The unfused attention (nn::functional::scaled_dot_product_attention with
// causal = true): S = q k^T, P = causal_softmax(S, scale), y = P v, with the
// (B, H, T, T) S and P as temporaries. lse comes from the masked scaled
// scores: max + log(sum(exp(. - max))).
void Backend::causal_attention(const Tensor& qkv, int64_t heads, double scale, const Tensor& y, const Tensor& lse) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  if (qkv.numel() == 0) return;
  const Heads h = heads_of(qkv, heads);
  const Tensor s = raw::matmul(h.q, raw::transpose(h.k, -2, -1));  // (B, H, T, T), contiguous
  const Tensor p = empty(s.shape(), s.options());
  causal_softmax(s, scale, p);
  const Tensor o = raw::matmul(p, h.v);  // (B, H, T, D)
  copy(raw::transpose(o, 1, 2), raw::view(y, {B, T, heads, D}));
  const TensorOptions io(DType::i64, qkv.device());
  const Tensor hidden = raw::compare(CompareOp::gt, raw::view(arange(T, io), {1, T}), raw::view(arange(T, io), {T, 1}));
  const Tensor z = raw::masked_fill(raw::unary(UnaryOp::affine, raw::to_dtype(s, lse.dtype()), scale, 0.0), hidden,
                                    -std::numeric_limits<double>::infinity());  // (B, H, T, T), in lse's dtype
  const Tensor m = raw::reduce(ReduceOp::max, z, {-1}, true);                   // (B, H, T, 1)
  const Tensor sum = raw::reduce(ReduceOp::sum, raw::unary(UnaryOp::exp, raw::binary(BinaryOp::sub, z, m)), {-1}, true);
  copy(raw::view(raw::binary(BinaryOp::add, m, raw::unary(UnaryOp::log, sum)), {B, heads, T}), lse);
}

// The unfused attention's backward, P recomputed from S (lse and y are not
// read): dV = P^T dO, dP = dO V^T, dS = scale softmax_backward(dP, P),
// dQ = dS K, dK = (Q^T dS)^T, in the order and forms autograd's matmul and
// causal_softmax nodes use.
void Backend::causal_attention_backward(const Tensor& qkv, const Tensor&, const Tensor&, const Tensor& grad_y,
                                        int64_t heads, double scale, const Tensor& grad_qkv) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  if (qkv.numel() == 0) return;
  const Heads h = heads_of(qkv, heads);
  const Tensor s = raw::matmul(h.q, raw::transpose(h.k, -2, -1));  // (B, H, T, T)
  const Tensor p = empty(s.shape(), s.options());
  causal_softmax(s, scale, p);
  const Tensor go = raw::transpose(raw::view(grad_y, {B, T, heads, D}), 1, 2);  // (B, H, T, D)
  const Tensor dv = raw::matmul(raw::transpose(p, -1, -2), go);
  const Tensor dp = raw::matmul(go, raw::transpose(h.v, -1, -2));  // (B, H, T, T)
  Tensor ds = raw::softmax_backward(dp, p, -1, false);
  if (scale != 1.0) ds = raw::unary(UnaryOp::affine, ds, scale, 0.0);
  const Tensor dq = raw::matmul(ds, h.k);
  const Tensor dk = raw::transpose(raw::matmul(raw::transpose(h.q, -1, -2), ds), -1, -2);
  const Heads g = heads_of(grad_qkv, heads);
  copy(dq, g.q);
  copy(dk, g.k);
  copy(dv, g.v);
}

double Backend::causal_attention_flops(int64_t B, int64_t T, int64_t heads, int64_t D) {
  return cpu::causal_attention_flops(B, T, heads, D);
}

// ---- conv2d + ReLU ---------------------------------------------------------------------------
void Backend::conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                          const Tensor& out) {
  conv2d(x, weight, bias, p, out);
  unary(UnaryOp::relu, 0.0, 0.0, out, out);  // elementwise: in place is safe
}

void Backend::conv2d_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x, const Tensor& weight,
                                   const Conv2dParams& p, const Tensor& grad_x, const Tensor& grad_weight,
                                   const Tensor& grad_bias) {
  const Tensor masked = empty(grad_out.shape(), grad_out.options());  // grad_out * (y > 0)
  binary(BinaryOp::relu_backward, grad_out, y, masked);
  conv2d_backward(masked, x, weight, p, grad_x, grad_weight, grad_bias);
}

}  // namespace snug

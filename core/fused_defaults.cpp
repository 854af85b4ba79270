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

#include <snug/core/activation_ops.h>
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
    unary(activation_unary(act), 0.0, 0.0, r, out);
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
  const BinaryOp back = activation_derivative(act);
  matmul(batch1(grad_out), batch1(weight), batch1(grad_z));  // (N, out) (out, in)
  binary(back, grad_z, z, grad_z);                           // elementwise: in place is safe
}

// ---- attention -----------------------------------------------------------------------------
namespace {

// z in dtype dt: scale S with every masked-out score -inf (NOTE [ Attention
// masks ]), what the row softmax and lse are taken over. m's tensors are
// shaped to broadcast against s (mask_of below).
Tensor masked_scores(const Tensor& s, double scale, const AttentionMask& m, DType dt) {
  const int64_t T = s.size(-1);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Tensor z = raw::unary(UnaryOp::affine, raw::to_dtype(s, dt), scale, 0.0);
  if (m.mask.defined())
    z = m.mask.dtype() == DType::b8 ? raw::masked_fill(z, m.mask, -kInf)
                                    : raw::binary(BinaryOp::add, z, raw::to_dtype(m.mask, dt));
  if (m.key_padding.defined()) z = raw::masked_fill(z, m.key_padding, -kInf);
  if (m.causal) {
    const TensorOptions io(DType::i64, s.device());
    z = raw::masked_fill(z, raw::compare(CompareOp::gt, raw::view(arange(T, io), {1, T}), raw::view(arange(T, io), {T, 1})),
                         -kInf);
  }
  return z;
}

// The masks of batch element b, for its (H, T, T) scores: its (1, 1, T) key
// padding row and its (H, T, T) plane of the mask (views).
AttentionMask mask_of(const AttentionMask& m, int64_t b, int64_t T) {
  AttentionMask r;
  r.causal = m.causal;
  if (m.key_padding.defined()) r.key_padding = raw::view(raw::select(m.key_padding, 0, b), {1, 1, T});
  if (m.mask.defined()) r.mask = raw::select(m.mask, 0, b);
  return r;
}

// P = exp(z - lse) (0 in a row that sees no key, lse -inf there) and the rows' lse (..., T, 1).
std::pair<Tensor, Tensor> probs_and_lse(const Tensor& z) {
  const Tensor m = raw::reduce(ReduceOp::max, z, {-1}, true);  // -inf for a row without keys
  const Tensor finite = raw::compare_scalar(CompareOp::gt, m, -std::numeric_limits<double>::infinity());
  const Tensor zero = zeros(m.shape(), m.options());
  const Tensor m0 = raw::where(finite, m, zero);  // 0 for those rows
  const Tensor sum = raw::reduce(ReduceOp::sum, raw::unary(UnaryOp::exp, raw::binary(BinaryOp::sub, z, m0)), {-1}, true);
  const Tensor lse = raw::binary(BinaryOp::add, m0, raw::unary(UnaryOp::log, sum));  // -inf where sum is 0
  const Tensor lse0 = raw::where(finite, lse, zero);
  return {raw::unary(UnaryOp::exp, raw::binary(BinaryOp::sub, z, lse0)), lse};
}

bool causal_only(const AttentionMask& m) { return m.causal && !m.key_padding.defined() && !m.mask.defined(); }

}  // namespace

// The unfused attention. Causal alone (the decoder's): S = q k^T (B, H, T, T),
// P = causal_softmax(S, scale), y = P v, as causal_self_attention's composed
// ops do it. Otherwise one batch element at a time, so that the scores of
// the op are (H, T, T) at a time, not (B, H, T, T): S, the masked scaled
// scores and their row softmax in lse's dtype (f32 for 16-bit qkv), y = P v.
// Nothing but y and lse outlives the call (a GPU takes this for masked
// attention: docs/cuda.md).
void Backend::attention(const Tensor& qkv, int64_t heads, double scale, const AttentionMask& mask, const Tensor& y,
                        const Tensor& lse) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  if (qkv.numel() == 0) return;
  const Heads h = heads_of(qkv, heads);
  if (causal_only(mask)) {
    const Tensor s = raw::matmul(h.q, raw::transpose(h.k, -2, -1));  // (B, H, T, T)
    const Tensor p = empty(s.shape(), s.options());
    causal_softmax(s, scale, p);
    copy(raw::transpose(raw::matmul(p, h.v), 1, 2), raw::view(y, {B, T, heads, D}));
    const Tensor l = probs_and_lse(masked_scores(s, scale, mask, lse.dtype())).second;  // (B, H, T, 1)
    copy(raw::view(l, {B, heads, T}), lse);
    return;
  }
  const Tensor y4 = raw::view(y, {B, T, heads, D});
  for (int64_t b = 0; b < B; ++b) {
    const Tensor qb = raw::select(h.q, 0, b), kb = raw::select(h.k, 0, b), vb = raw::select(h.v, 0, b);  // (H, T, D)
    const Tensor s = raw::matmul(qb, raw::transpose(kb, -2, -1));                                         // (H, T, T)
    const auto [p, l] = probs_and_lse(masked_scores(s, scale, mask_of(mask, b, T), lse.dtype()));
    const Tensor o = raw::matmul(raw::to_dtype(p, qkv.dtype()), vb);  // (H, T, D)
    copy(raw::transpose(o, 0, 1), raw::select(y4, 0, b));              // (T, H, D)
    copy(raw::view(l, {heads, T}), raw::select(lse, 0, b));
  }
}

// Its backward, P recomputed from S (lse and y are not read): dV = P^T dO,
// dP = dO V^T, dS = scale softmax_backward(dP, P), dQ = dS K, dK = (Q^T dS)^T;
// whole for causal alone, else one batch element at a time as forward.
void Backend::attention_backward(const Tensor& qkv, const Tensor&, const Tensor& lse, const Tensor& grad_y,
                                 int64_t heads, double scale, const AttentionMask& mask, const Tensor& grad_qkv) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  if (qkv.numel() == 0) return;
  const Heads h = heads_of(qkv, heads), g = heads_of(grad_qkv, heads);
  const Tensor go = raw::transpose(raw::view(grad_y, {B, T, heads, D}), 1, 2);  // (B, H, T, D)
  // q, k, v, dO of one batch element or all, P -> dQ, dK, dV into g's.
  auto grads = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& p, const Tensor& gq,
                   const Tensor& gk, const Tensor& gv) {
    const Tensor dv = raw::matmul(raw::transpose(p, -1, -2), o);
    const Tensor dp = raw::matmul(o, raw::transpose(v, -1, -2));  // (..., T, T)
    Tensor ds = raw::softmax_backward(dp, p, -1, false);
    if (scale != 1.0) ds = raw::unary(UnaryOp::affine, ds, scale, 0.0);
    copy(raw::matmul(ds, k), gq);
    copy(raw::transpose(raw::matmul(raw::transpose(q, -1, -2), ds), -1, -2), gk);
    copy(dv, gv);
  };
  if (causal_only(mask)) {
    const Tensor s = raw::matmul(h.q, raw::transpose(h.k, -2, -1));  // (B, H, T, T)
    const Tensor p = empty(s.shape(), s.options());
    causal_softmax(s, scale, p);
    grads(h.q, h.k, h.v, go, p, g.q, g.k, g.v);
    return;
  }
  for (int64_t b = 0; b < B; ++b) {
    const Tensor qb = raw::select(h.q, 0, b), kb = raw::select(h.k, 0, b), vb = raw::select(h.v, 0, b);  // (H, T, D)
    const Tensor s = raw::matmul(qb, raw::transpose(kb, -2, -1));                                         // (H, T, T)
    const Tensor p =
        raw::to_dtype(probs_and_lse(masked_scores(s, scale, mask_of(mask, b, T), lse.dtype())).first, qkv.dtype());
    grads(qb, kb, vb, raw::select(go, 0, b), p, raw::select(g.q, 0, b), raw::select(g.k, 0, b), raw::select(g.v, 0, b));
  }
}

double Backend::attention_flops(int64_t B, int64_t T, int64_t heads, int64_t D, bool causal) {
  return cpu::attention_flops(B, T, heads, D, causal);
}

// ---- residual add + layer norm -------------------------------------------------------------------------------
void Backend::add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps,
                             const Tensor& h, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  binary(BinaryOp::add, x, r, h);
  layer_norm(h, weight, bias, eps, y, mean, rstd);
}

void Backend::add_layer_norm_backward(const Tensor& grad_y, const Tensor& grad_h, const Tensor& h,
                                      const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& grad_sum, const Tensor& grad_weight, const Tensor& grad_bias) {
  layer_norm_backward(grad_y, h, weight, mean, rstd, grad_sum, grad_weight, grad_bias);
  if (grad_sum.defined() && grad_h.defined()) binary(BinaryOp::add, grad_sum, grad_h, grad_sum);  // in place: safe
}

// ---- dropout -------------------------------------------------------------------------------------------------
// The composition autograd/dropout.cpp used before this entry: an f32 uniform draw, the comparison,
// the mask in x's dtype, scaled, then the product.
void Backend::dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out, const Tensor& keep) {
  const Tensor u = empty(x.shape(), TensorOptions(DType::f32, x.device()));
  random(RandomKind::uniform, state, 0.0, 1.0, u);
  const Tensor pt = full({}, p, TensorOptions(DType::f32, x.device()));  // p as compare_scalar takes it
  compare(CompareOp::ge, u, raw::expand(pt, u.shape()), keep);
  const Tensor mask = raw::unary(UnaryOp::affine, raw::to_dtype(keep, x.dtype()), 1.0 / (1.0 - p), 0.0);
  binary(BinaryOp::mul, x, mask, out);
}

void Backend::dropout_backward(const Tensor& grad_out, const Tensor& keep, double scale, const Tensor& grad_x) {
  const Tensor m = raw::unary(UnaryOp::affine, raw::to_dtype(keep, grad_out.dtype()), scale, 0.0);
  binary(BinaryOp::mul, grad_out, m, grad_x);
}

// ---- cross-entropy -------------------------------------------------------------------------------------------
// NOTE [ Fused cross-entropy ]
// The loss reads the logits in their own dtype and keeps only each row's
// logsumexp for backward, which writes the logits' gradient once, in their
// dtype: under autocast a (N, V) f32 copy of the logits, their f32 log-softmax
// (saved) and an f32 gradient converted back to 16 bits never exist. The CUDA
// backend runs one kernel for each direction (cuda/cross_entropy.cu). This
// default composes the primitives in the math type (f32, f64 for f64 logits):
// log-softmax, the target's column, the smoothing term; lse is max_c x - max_c
// logp (the largest logit's log-probability is exactly -log s). Its backward
// recomputes the softmax rather than reading lse, so it keeps the vectorized
// row kernel of the CPU.
namespace {
// logits in the math type (a copy only for 16-bit logits).
Tensor ce_math(const Tensor& logits) {
  const DType acc = promote_types(logits.dtype(), DType::f32);
  return logits.dtype() == acc ? logits : raw::to_dtype(logits, acc);
}
}  // namespace

// logits (N, C), target (N) -> loss (N), lse (N).
void Backend::cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double smoothing,
                            const Tensor& loss, const Tensor& lse) {
  const int64_t N = logits.size(0);
  const Tensor x = ce_math(logits);                                                 // (N, C)
  const Tensor logp = raw::softmax(x, 1, true);                                     // (N, C)
  const Tensor valid = raw::compare_scalar(CompareOp::ne, target, double(ignore_index));  // (N) bool
  const Tensor tsafe = raw::where(valid, target, zeros({}, TensorOptions(DType::i64, target.device())));
  Tensor row = raw::unary(UnaryOp::neg, raw::view(raw::gather(logp, 1, raw::view(tsafe, {N, 1})), {N}));
  if (smoothing > 0) {
    const Tensor smooth = raw::unary(UnaryOp::neg, raw::reduce(ReduceOp::mean, logp, {1}, false));
    row = raw::binary(BinaryOp::add, raw::unary(UnaryOp::affine, row, 1 - smoothing, 0),
                      raw::unary(UnaryOp::affine, smooth, smoothing, 0));
  }
  binary(BinaryOp::mul, row, raw::to_dtype(valid, row.dtype()), loss);  // ignored rows give exactly 0
  binary(BinaryOp::sub, raw::reduce(ReduceOp::max, x, {1}, false), raw::reduce(ReduceOp::max, logp, {1}, false), lse);
}

// grad_logits (N, C) = w (softmax - (1 - eps) onehot - eps / C), w (N) zero on ignored rows by the caller.
void Backend::cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor&, const Tensor& w,
                                     int64_t ignore_index, double smoothing, const Tensor& grad_logits) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const Tensor valid = raw::compare_scalar(CompareOp::ne, target, double(ignore_index));
  const Tensor tsafe = raw::where(valid, target, zeros({}, TensorOptions(DType::i64, target.device())));
  const Tensor w2 = raw::view(raw::binary(BinaryOp::mul, w, raw::to_dtype(valid, w.dtype())), {N, 1});  // (N, 1)
  Tensor g = raw::binary(BinaryOp::mul, raw::softmax(ce_math(logits), 1, false), w2);                // (N, C)
  if (smoothing > 0) g = raw::binary(BinaryOp::sub, g, raw::unary(UnaryOp::affine, w2, smoothing / double(C), 0));
  g = raw::scatter_add(g, 1, raw::view(tsafe, {N, 1}), raw::unary(UnaryOp::affine, w2, -(1 - smoothing), 0));
  copy(g, grad_logits);  // rounds to the logits' dtype once
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

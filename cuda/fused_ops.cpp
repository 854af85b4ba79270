// SPDX-License-Identifier: MIT
// CudaBackend's optimizer updates and loss-scaler unscale (core/backend.h;
// the composed default, core/update.cpp, takes what the kernels do not), and
// cuda/fused_api.h's attention: each checks the tensors, makes their device
// current and queues the kernel of cuda/fused.cu (cuda/attention.cu) on its
// current stream (memory/stream.h).
#include <snug/cuda/fused_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include <snug/core/backend.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/cuda/kernels.h>
#include <snug/memory/allocator.h>

namespace snug::cuda {

namespace {

struct Named {
  const char* name;
  const Tensor* t;
};

void check_dtype(const char* op, const char* name, const Tensor& t, std::initializer_list<DType> ok) {
  for (DType d : ok)
    if (t.dtype() == d) return;
  throw DTypeError(str("cuda::", op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", which is not taken here"));
}

// The kernels mark their arrays __restrict__: distinct state tensors must not share bytes.
void check_disjoint(const char* op, std::initializer_list<Named> ts) {
  for (auto a = ts.begin(); a != ts.end(); ++a)
    for (auto b = a + 1; b != ts.end(); ++b) {
      if (!a->t->defined() || !b->t->defined() || a->t->nbytes() == 0 || b->t->nbytes() == 0) continue;
      const auto a0 = reinterpret_cast<std::uintptr_t>(a->t->data_ptr()), a1 = a0 + a->t->nbytes();
      const auto b0 = reinterpret_cast<std::uintptr_t>(b->t->data_ptr()), b1 = b0 + b->t->nbytes();
      SNUG_CHECK(a1 <= b0 || b1 <= a0, ValueError, "cuda::", op, ": ", a->name, " and ", b->name, " overlap in memory");
    }
}

}  // namespace

namespace {
// Whether the kernels take these: all on the first one's CUDA device,
// contiguous, of its n elements; target and state f32, the gradient f32, f16
// or bf16. Undefined state (no momentum buffer) is fine.
bool kernels_take(const Tensor& target, const Tensor& grad, std::initializer_list<const Tensor*> state) {
  const Device d = target.device();
  auto f32_here = [&](const Tensor& t) {
    return t.device() == d && t.dtype() == DType::f32 && t.is_contiguous() && t.numel() == target.numel();
  };
  if (!d.is_cuda() || !f32_here(target) || grad.device() != d || !grad.is_contiguous() ||
      grad.numel() != target.numel())
    return false;
  if (grad.dtype() != DType::f32 && grad.dtype() != DType::f16 && grad.dtype() != DType::bf16) return false;
  for (const Tensor* s : state)
    if (s->defined() && !f32_here(*s)) return false;
  return true;
}
}  // namespace

void CudaBackend::adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                              const update::AdamArgs& a) {
  if (!m.defined() || !v.defined() || !kernels_take(p, g, {&m, &v})) return Backend::adam_update(p, g, m, v, a);
  check_disjoint("adam_update", {{"parameter", &p}, {"gradient", &g}, {"exp_avg", &m}, {"exp_avg_sq", &v}});
  profiler::RecordOp rec("fused_adam", p.device());
  OnDevice guard(p.device().index);
  kernels::fused_adam(g.dtype(), p.numel(), static_cast<float*>(p.data_ptr()), g.data_ptr(),
                      static_cast<float*>(m.data_ptr()), static_cast<float*>(v.data_ptr()), update::make_adam_consts(a),
                      guard.stream());
}

void CudaBackend::sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const update::SgdArgs& a) {
  if ((a.momentum != 0 && !buf.defined()) || !kernels_take(p, g, {&buf})) return Backend::sgd_update(p, g, buf, a);
  check_disjoint("sgd_update", {{"parameter", &p}, {"gradient", &g}, {"momentum_buffer", &buf}});
  profiler::RecordOp rec("fused_sgd", p.device());
  OnDevice guard(p.device().index);
  kernels::fused_sgd(g.dtype(), p.numel(), static_cast<float*>(p.data_ptr()), g.data_ptr(),
                     buf.defined() ? static_cast<float*>(buf.data_ptr()) : nullptr, update::make_sgd_consts(a),
                     guard.stream());
}

// A strided gradient is unscaled in a contiguous copy, written back when the
// unscale is in place.
void CudaBackend::unscale_and_check(const Tensor& g, const Tensor& out, double inv, const Tensor& flags, int64_t slot) {
  const DType cd = g.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const bool floating =
      cd == DType::f64 || g.dtype() == DType::f32 || g.dtype() == DType::f16 || g.dtype() == DType::bf16;
  const bool in_place = out.is_same(g);
  const bool takes = floating && g.device().is_cuda() && out.device() == g.device() && out.dtype() == cd &&
                     out.numel() == g.numel() && (in_place || out.storage() != g.storage()) && flags.defined() &&
                     flags.device() == g.device() && flags.dtype() == DType::i32 && flags.is_contiguous() &&
                     slot >= 0 && slot < flags.numel();
  if (!takes) return Backend::unscale_and_check(g, out, inv, flags, slot);
  const Tensor src = raw::contiguous(g);
  const Tensor dst = in_place ? src : (out.is_contiguous() ? out : empty(out.shape(), out.options()));
  profiler::RecordOp rec("unscale_check", g.device());
  {
    OnDevice guard(g.device().index);
    kernels::unscale_check(src.dtype(), dst.dtype(), src.numel(), src.data_ptr(), dst.data_ptr(), inv,
                           static_cast<int32_t*>(flags.data_ptr()) + slot, guard.stream());
  }
  if (!dst.is_same(out)) raw::copy_(out, dst);
  out.bump_version();
}

namespace {
// (B, T, 3C) f32 contiguous on a GPU, heads dividing C, D within the kernels' reach.
int check_attention(const char* op, const Tensor& qkv, int64_t heads) {
  SNUG_CHECK(qkv.defined() && qkv.device().is_cuda(), DeviceError, "cuda::", op, ": qkv is not on a CUDA device");
  SNUG_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, ShapeError, "cuda::", op, ": expected qkv (B, T, 3C), got ",
             shape_str(qkv.shape()));
  const int64_t C = qkv.size(2) / 3;
  SNUG_CHECK(heads > 0 && C % heads == 0, ValueError, "cuda::", op, ": ", heads, " heads do not divide the width ", C);
  SNUG_CHECK(C / heads <= kMaxFusedAttentionHeadSize, ValueError, "cuda::", op, ": head size ", C / heads, " is over ",
             kMaxFusedAttentionHeadSize);
  check_dtype(op, "qkv", qkv, {DType::f32});
  SNUG_CHECK(qkv.is_contiguous(), ValueError, "cuda::", op, ": qkv must be contiguous");
  return qkv.device().index;
}
void check_like(const char* op, const char* name, const Tensor& t, const Tensor& qkv, const Shape& shape) {
  SNUG_CHECK(
      t.defined() && t.device() == qkv.device() && t.dtype() == DType::f32 && t.is_contiguous() && t.shape() == shape,
      ValueError, "cuda::", op, ": ", name, " must be a contiguous f32 tensor of shape ", shape_str(shape), " on ",
      qkv.device().str());
}
}  // namespace

namespace {
// ---- the cuBLAS path (NOTE [ Attention through cuBLAS ] in cuda/attention.cu) ----
std::atomic<std::size_t> g_score_chunk_bytes{std::size_t{128} << 20};

// Part p (0 q, 1 k, 2 v) of a (B, T, 3C) tensor as a (B, H, T, D) view.
Tensor head_view(const Tensor& x, int64_t H, int p) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / 3 / H;
  return x.view({B, T, 3, H, D}).select(2, p).permute({0, 2, 1, 3});
}
// A (B, T, C) tensor as a (B, H, T, D) view.
Tensor heads_of(const Tensor& x, int64_t H) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / H;
  return x.view({B, T, H, D}).permute({0, 2, 1, 3});
}
// (B, H, T, D) view -> (B H, T, D) contiguous copy.
Tensor packed(const Tensor& v) { return raw::contiguous(v).view({v.size(0) * v.size(1), v.size(2), v.size(3)}); }
// q, k, v of a (B, T, 3C) tensor, each packed to (B H, T, D).
std::array<Tensor, 3> packed_qkv(const Tensor& qkv, int64_t H) {
  return {packed(head_view(qkv, H, 0)), packed(head_view(qkv, H, 1)), packed(head_view(qkv, H, 2))};
}
// Heads per chunk: the chunk's (T, T) f32 scores within g_score_chunk_bytes, at least one.
int64_t heads_per_chunk(int64_t BH, int64_t T) {
  const auto per_head = static_cast<std::size_t>(T) * static_cast<std::size_t>(T) * sizeof(float);
  return std::clamp<int64_t>(static_cast<int64_t>(g_score_chunk_bytes.load() / per_head), 1, BH);
}

void attention_forward_gemm(const Tensor& qkv, int64_t H, float scale, const Tensor& y, const Tensor& lse, bool tf32,
                            std::uintptr_t stream) {
  const int64_t B = qkv.size(0), T = qkv.size(1), BH = B * H;
  Backend& be = backend_for(qkv.device());
  const auto [q, k, v] = packed_qkv(qkv, H);
  const Tensor yh = empty(q.shape(), q.options());  // (B H, T, D)
  const int64_t n = heads_per_chunk(BH, T);
  const Tensor sbuf = empty({n, T, T}, q.options());
  Tf32Scope tf(tf32);
  for (int64_t h0 = 0; h0 < BH; h0 += n) {
    const int64_t c = std::min(n, BH - h0);
    const Tensor sc = sbuf.narrow(0, 0, c);
    be.matmul(q.narrow(0, h0, c), k.narrow(0, h0, c).transpose(1, 2), sc);  // S = Q K^T   (c, T, T)
    kernels::causal_softmax(DType::f32, c * T, T, T, scale, sc.data_ptr(), sc.data_ptr(), stream,
                            static_cast<float*>(lse.data_ptr()) + h0 * T);  // S -> P, lse
    be.matmul(sc, v.narrow(0, h0, c), yh.narrow(0, h0, c));                 // Y = P V   (c, T, D)
  }
  raw::copy_(heads_of(y, H), yh.view({B, H, T, q.size(2)}));
}

void attention_backward_gemm(const Tensor& qkv, const Tensor& lse, const Tensor& gy, int64_t H, float scale,
                             const Tensor& dqkv, bool tf32, std::uintptr_t stream) {
  const int64_t B = qkv.size(0), T = qkv.size(1), BH = B * H, D = qkv.size(2) / 3 / H;
  Backend& be = backend_for(qkv.device());
  const auto [q, k, v] = packed_qkv(qkv, H);
  const Tensor go = packed(heads_of(gy, H));
  const Tensor dq = empty(q.shape(), q.options()), dk = empty(q.shape(), q.options()),
               dv = empty(q.shape(), q.options());
  const int64_t n = heads_per_chunk(BH, T);
  const Tensor sbuf = empty({n, T, T}, q.options()), pbuf = empty({n, T, T}, q.options());
  Tf32Scope tf(tf32);
  for (int64_t h0 = 0; h0 < BH; h0 += n) {
    const int64_t c = std::min(n, BH - h0);
    const Tensor sc = sbuf.narrow(0, 0, c), dp = pbuf.narrow(0, 0, c);
    const Tensor qc = q.narrow(0, h0, c), kc = k.narrow(0, h0, c), vc = v.narrow(0, h0, c), gc = go.narrow(0, h0, c);
    be.matmul(qc, kc.transpose(1, 2), sc);  // S = Q K^T
    be.matmul(gc, vc.transpose(1, 2), dp);  // dP = dO V^T
    kernels::causal_softmax_lse_backward(c * T, T, scale, static_cast<float*>(sc.data_ptr()),
                                         static_cast<float*>(dp.data_ptr()),
                                         static_cast<const float*>(lse.data_ptr()) + h0 * T, stream);
    be.matmul(sc.transpose(1, 2), gc, dv.narrow(0, h0, c));  // dV = P^T dO
    be.matmul(dp, kc, dq.narrow(0, h0, c));                  // dQ = dS K
    be.matmul(dp.transpose(1, 2), qc, dk.narrow(0, h0, c));  // dK = dS^T Q
  }
  raw::copy_(head_view(dqkv, H, 0), dq.view({B, H, T, D}));
  raw::copy_(head_view(dqkv, H, 1), dk.view({B, H, T, D}));
  raw::copy_(head_view(dqkv, H, 2), dv.view({B, H, T, D}));
}
}  // namespace

std::size_t set_attention_chunk_bytes(std::size_t bytes) { return g_score_chunk_bytes.exchange(bytes); }

void causal_attention_forward(const Tensor& qkv, int64_t heads, double scale, const Tensor& y, const Tensor& lse,
                              bool tf32) {
  const int dev = check_attention("causal_attention_forward", qkv, heads);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  check_like("causal_attention_forward", "y", y, qkv, {B, T, C});
  check_like("causal_attention_forward", "lse", lse, qkv, {B, heads, T});
  OnDevice guard(dev);
  if (T >= kAttentionGemmMinT && B > 0) {
    attention_forward_gemm(qkv, heads, static_cast<float>(scale), y, lse, tf32, guard.stream());
    return;
  }
  kernels::causal_attention_forward(B, T, heads, C / heads, static_cast<float>(scale),
                                    static_cast<const float*>(qkv.data_ptr()), static_cast<float*>(y.data_ptr()),
                                    static_cast<float*>(lse.data_ptr()), guard.stream());
}

void causal_attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy, int64_t heads,
                               double scale, const Tensor& dqkv, bool tf32) {
  const int dev = check_attention("causal_attention_backward", qkv, heads);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  check_like("causal_attention_backward", "y", y, qkv, {B, T, C});
  check_like("causal_attention_backward", "lse", lse, qkv, {B, heads, T});
  check_like("causal_attention_backward", "gy", gy, qkv, {B, T, C});
  check_like("causal_attention_backward", "dqkv", dqkv, qkv, {B, T, 3 * C});
  if (T >= kAttentionGemmMinT && B > 0) {
    OnDevice guard(dev);
    attention_backward_gemm(qkv, lse, gy, heads, static_cast<float>(scale), dqkv, tf32, guard.stream());
    return;
  }
  Tensor dsum = empty({B, heads, T}, qkv.options());  // scratch: rowsum(dO o O), from the caching allocator
  OnDevice guard(dev);
  kernels::causal_attention_backward(B, T, heads, C / heads, static_cast<float>(scale),
                                     static_cast<const float*>(qkv.data_ptr()), static_cast<const float*>(y.data_ptr()),
                                     static_cast<const float*>(lse.data_ptr()),
                                     static_cast<const float*>(gy.data_ptr()), static_cast<float*>(dqkv.data_ptr()),
                                     static_cast<float*>(dsum.data_ptr()), guard.stream());
}

// ---- CudaBackend's attention entries (core/backend.h) ------------------------------------
// f32 and 16-bit qkv with heads of at most kMaxFusedAttentionHeadSize: the
// kernels above, 16-bit through f32 copies (NOTE [ 16-bit attention ] in
// core/cpu/attention.cpp; their products may use TF32). Anything else (f64,
// larger heads): Backend's composed default.
namespace {
bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }
bool takes_fused_attention(const Tensor& qkv, int64_t heads) {
  const DType dt = qkv.dtype();
  return (dt == DType::f32 || is_half(dt)) && qkv.size(2) / 3 / heads <= kMaxFusedAttentionHeadSize;
}
}  // namespace

void CudaBackend::causal_attention(const Tensor& qkv, int64_t heads, double scale, const Tensor& y, const Tensor& lse) {
  if (!takes_fused_attention(qkv, heads)) {
    Backend::causal_attention(qkv, heads, scale, y, lse);
    return;
  }
  if (!is_half(qkv.dtype())) {
    cuda::causal_attention_forward(qkv, heads, scale, y, lse, false);
    return;
  }
  Tensor x32, y32;  // (B, T, 3C), (B, T, C)
  {
    memory::TagScope tag(memory::Tag::workspace);
    x32 = raw::to_dtype(qkv, DType::f32);
    y32 = empty(y.shape(), x32.options());
  }
  cuda::causal_attention_forward(x32, heads, scale, y32, lse, /*tf32=*/true);
  copy(y32, y);  // rounded once
}

void CudaBackend::causal_attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& grad_y,
                                            int64_t heads, double scale, const Tensor& grad_qkv) {
  if (!takes_fused_attention(qkv, heads)) {
    Backend::causal_attention_backward(qkv, y, lse, grad_y, heads, scale, grad_qkv);
    return;
  }
  if (!is_half(qkv.dtype())) {
    cuda::causal_attention_backward(qkv, y, lse, grad_y, heads, scale, grad_qkv, false);
    return;
  }
  Tensor x32, y32, g32, d32;  // f32 workspace
  {
    memory::TagScope tag(memory::Tag::workspace);
    x32 = raw::to_dtype(qkv, DType::f32), y32 = raw::to_dtype(y, DType::f32);
    g32 = raw::contiguous(raw::to_dtype(grad_y, DType::f32));
    d32 = empty(qkv.shape(), x32.options());
  }
  cuda::causal_attention_backward(x32, y32, lse, g32, heads, scale, d32, /*tf32=*/true);
  copy(d32, grad_qkv);
}

}  // namespace snug::cuda

// SPDX-License-Identifier: MIT
// The host side of the fused attention on CUDA, beside its kernels
// (cuda/attention.cu): cuda/fused_api.h's attention_forward / _backward
// (causal or not, key padding or not), which check the tensors, make their
// device current and queue
// the warp kernels or, from T = kAttentionGemmMinT, the cuBLAS path (NOTE [
// Attention through cuBLAS ] in cuda/attention.cu) on the current stream
// (memory/stream.h); and CudaBackend's attention entries (core/backend.h),
// the twin of the ones in core/cpu/attention.cpp.
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
#include <snug/cuda/sdpa_plan.h>
#include <snug/memory/allocator.h>

namespace snug::cuda {

namespace {

void check_dtype(const char* op, const char* name, const Tensor& t, std::initializer_list<DType> ok) {
  for (DType d : ok)
    if (t.dtype() == d) return;
  throw DTypeError(str("cuda::", op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", which is not taken here"));
}

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
// The kernels' KeyMask: key_padding undefined, or (B, T) bool on qkv's device
// (made contiguous into `keep`, which the caller holds until the kernels are queued).
kernels::KeyMask key_mask(const char* op, bool causal, const Tensor& key_padding, const Tensor& qkv, Tensor& keep) {
  kernels::KeyMask km;
  km.causal = causal;
  if (!key_padding.defined()) return km;
  SNUG_CHECK(key_padding.dtype() == DType::b8 && key_padding.device() == qkv.device() &&
                 key_padding.shape() == (Shape{qkv.size(0), qkv.size(1)}),
             ValueError, "cuda::", op, ": key_padding must be a (", qkv.size(0), ", ", qkv.size(1), ") bool tensor on ",
             qkv.device().str(), ", got ", dtype_name(key_padding.dtype()), " ", shape_str(key_padding.shape()), " on ",
             key_padding.device().str());
  keep = raw::contiguous(key_padding);
  km.pad = static_cast<const bool*>(keep.data_ptr());
  return km;
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

void attention_forward_gemm(const Tensor& qkv, int64_t H, float scale, kernels::KeyMask km, const Tensor& y,
                            const Tensor& lse, bool tf32, std::uintptr_t stream) {
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
    kernels::attention_softmax_lse(c * T, h0 * T, T, H, scale, km, static_cast<float*>(sc.data_ptr()),
                                   static_cast<float*>(lse.data_ptr()) + h0 * T, stream);  // S -> P, lse
    be.matmul(sc, v.narrow(0, h0, c), yh.narrow(0, h0, c));                 // Y = P V   (c, T, D)
  }
  raw::copy_(heads_of(y, H), yh.view({B, H, T, q.size(2)}));
}

void attention_backward_gemm(const Tensor& qkv, const Tensor& lse, const Tensor& gy, int64_t H, float scale,
                             kernels::KeyMask km, const Tensor& dqkv, bool tf32, std::uintptr_t stream) {
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
    kernels::attention_softmax_lse_backward(c * T, h0 * T, T, H, scale, km, static_cast<float*>(sc.data_ptr()),
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

void attention_forward(const Tensor& qkv, int64_t heads, double scale, bool causal, const Tensor& key_padding,
                       const Tensor& y, const Tensor& lse, bool tf32) {
  const int dev = check_attention("attention_forward", qkv, heads);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  check_like("attention_forward", "y", y, qkv, {B, T, C});
  check_like("attention_forward", "lse", lse, qkv, {B, heads, T});
  OnDevice guard(dev);
  Tensor pad;  // key_padding, contiguous, alive until the kernels are queued (the allocator orders reuse by stream)
  const kernels::KeyMask km = key_mask("attention_forward", causal, key_padding, qkv, pad);
  if (T >= kAttentionGemmMinT && B > 0) {
    attention_forward_gemm(qkv, heads, static_cast<float>(scale), km, y, lse, tf32, guard.stream());
    return;
  }
  kernels::attention_forward(B, T, heads, C / heads, static_cast<float>(scale), km,
                             static_cast<const float*>(qkv.data_ptr()), static_cast<float*>(y.data_ptr()),
                             static_cast<float*>(lse.data_ptr()), guard.stream());
}

void attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy, int64_t heads,
                        double scale, bool causal, const Tensor& key_padding, const Tensor& dqkv, bool tf32) {
  const int dev = check_attention("attention_backward", qkv, heads);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  check_like("attention_backward", "y", y, qkv, {B, T, C});
  check_like("attention_backward", "lse", lse, qkv, {B, heads, T});
  check_like("attention_backward", "gy", gy, qkv, {B, T, C});
  check_like("attention_backward", "dqkv", dqkv, qkv, {B, T, 3 * C});
  OnDevice guard(dev);
  Tensor pad;
  const kernels::KeyMask km = key_mask("attention_backward", causal, key_padding, qkv, pad);
  if (T >= kAttentionGemmMinT && B > 0) {
    attention_backward_gemm(qkv, lse, gy, heads, static_cast<float>(scale), km, dqkv, tf32, guard.stream());
    return;
  }
  Tensor dsum = empty({B, heads, T}, qkv.options());  // scratch: rowsum(dO o O), from the caching allocator
  kernels::attention_backward(B, T, heads, C / heads, static_cast<float>(scale), km,
                              static_cast<const float*>(qkv.data_ptr()), static_cast<const float*>(y.data_ptr()),
                              static_cast<const float*>(lse.data_ptr()), static_cast<const float*>(gy.data_ptr()),
                              static_cast<float*>(dqkv.data_ptr()), static_cast<float*>(dsum.data_ptr()),
                              guard.stream());
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

// Causal or not, with or without key padding: the kernels above. A general
// mask (NOTE [ Attention masks ]) takes the composed default: it also keeps
// only y and lse between forward and backward (its scores are temporaries of
// each entry, one batch element at a time), but it is not a fused kernel.
namespace {
bool kernels_take(const AttentionMask& mask, const Tensor& qkv, int64_t heads) {
  return !mask.mask.defined() && takes_fused_attention(qkv, heads);
}
}  // namespace

namespace {
// The key of a 16-bit call that cuDNN may serve (NOTE [ Attention through
// cuDNN ] in cuda/attention_cudnn.cpp): its choice says, and the profiler
// shows which path ran.
SdpaKey sdpa_key(const Tensor& qkv, int64_t heads, double scale, bool causal, bool backward) {
  SdpaKey k;
  k.B = qkv.size(0);
  k.T = qkv.size(1);
  k.H = heads;
  k.D = qkv.size(2) / 3 / heads;
  k.dtype = qkv.dtype();
  k.causal = causal;
  k.backward = backward;
  k.scale = scale;
  k.device = qkv.device().index;
  return k;
}
// Whether cuDNN takes the call; a key padding mask is classified (read back
// once per mask) only when everything else would go to cuDNN, and marks the key.
bool cudnn_path(SdpaKey& key, const AttentionMask& mask, SdpaPaddingInfo& padding) {
  const bool pad = mask.key_padding.defined();
  if (cudnn_attention_choice(key, pad ? SdpaPadding::suffix : SdpaPadding::none, mask.mask.defined()).path !=
      SdpaPath::cudnn)
    return false;
  if (!pad) return true;
  padding = cudnn_key_padding(mask.key_padding);
  key.padded = padding.kind == SdpaPadding::suffix;
  return cudnn_attention_choice(key, padding.kind, mask.mask.defined()).path == SdpaPath::cudnn;
}
bool all_contiguous(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!t->is_contiguous()) return false;
  return true;
}
}  // namespace

void CudaBackend::attention(const Tensor& qkv, int64_t heads, double scale, const AttentionMask& mask, const Tensor& y,
                            const Tensor& lse) {
  if (is_half(qkv.dtype()) && qkv.size(2) % (3 * heads) == 0 && y.dtype() == qkv.dtype() &&
      lse.dtype() == DType::f32 && all_contiguous({&qkv, &y, &lse})) {
    SdpaKey key = sdpa_key(qkv, heads, scale, mask.causal, false);
    SdpaPaddingInfo padding;
    if (cudnn_path(key, mask, padding)) {
      profiler::RecordRange path("attention[cudnn]");
      if (cudnn_attention_forward(key, qkv, y, lse, padding)) return;
    }
  }
  profiler::RecordRange path("attention[kernels]");
  if (!kernels_take(mask, qkv, heads)) {
    Backend::attention(qkv, heads, scale, mask, y, lse);
    return;
  }
  if (!is_half(qkv.dtype())) {
    cuda::attention_forward(qkv, heads, scale, mask.causal, mask.key_padding, y, lse, false);
    return;
  }
  Tensor x32, y32;  // (B, T, 3C), (B, T, C)
  {
    memory::TagScope tag(memory::Tag::workspace);
    x32 = raw::to_dtype(qkv, DType::f32);
    y32 = empty(y.shape(), x32.options());
  }
  cuda::attention_forward(x32, heads, scale, mask.causal, mask.key_padding, y32, lse, /*tf32=*/true);
  copy(y32, y);  // rounded once
}

void CudaBackend::attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& grad_y,
                                     int64_t heads, double scale, const AttentionMask& mask, const Tensor& grad_qkv) {
  if (is_half(qkv.dtype()) && qkv.size(2) % (3 * heads) == 0 && y.dtype() == qkv.dtype() &&
      grad_y.dtype() == qkv.dtype() && grad_qkv.dtype() == qkv.dtype() && lse.dtype() == DType::f32 &&
      all_contiguous({&qkv, &y, &lse, &grad_y, &grad_qkv})) {
    SdpaKey key = sdpa_key(qkv, heads, scale, mask.causal, true);
    SdpaPaddingInfo padding;
    if (cudnn_path(key, mask, padding)) {
      profiler::RecordRange path("attention_backward[cudnn]");
      if (cudnn_attention_backward(key, qkv, y, lse, grad_y, grad_qkv, padding)) return;
    }
  }
  profiler::RecordRange path("attention_backward[kernels]");
  if (!kernels_take(mask, qkv, heads)) {
    Backend::attention_backward(qkv, y, lse, grad_y, heads, scale, mask, grad_qkv);
    return;
  }
  if (!is_half(qkv.dtype())) {
    cuda::attention_backward(qkv, y, lse, grad_y, heads, scale, mask.causal, mask.key_padding, grad_qkv, false);
    return;
  }
  Tensor x32, y32, g32, d32;  // f32 workspace
  {
    memory::TagScope tag(memory::Tag::workspace);
    x32 = raw::to_dtype(qkv, DType::f32), y32 = raw::to_dtype(y, DType::f32);
    g32 = raw::contiguous(raw::to_dtype(grad_y, DType::f32));
    d32 = empty(qkv.shape(), x32.options());
  }
  cuda::attention_backward(x32, y32, lse, g32, heads, scale, mask.causal, mask.key_padding, d32, /*tf32=*/true);
  copy(d32, grad_qkv);
}

}  // namespace snug::cuda

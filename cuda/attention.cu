// SPDX-License-Identifier: MIT
// Fused self-attention on the GPU (causal or not, with or without a key
// padding mask), the CUDA side of nn::functional::self_attention (NOTE [
// Fused attention ] in core/cpu/attention.h has the CPU side and the layout).
//
// NOTE [ CUDA fused attention ]
// One warp per row, lanes split over the head dimension (lane l holds
// d = l, l + 32, ..., so D <= 32 * kMaxSlices). No (T x T) tensor exists.
// "Visible" is KeyMask::sees: j <= i when causal, and key j not padding
// (NOTE [ Attention masks ] in core/backend.h).
//   forward, warp = query row i:  for each visible key j, s = scale q.k_j
//     (a warp sum), an online softmax (running max m, sum l, output rescaled
//     when m grows), o += p v_j; then y_i = o / l and lse_i = m + log l.
//     A row that sees no key gives y_i = 0 and lse_i = -inf.
//   backward A, warp = query row i: D_i = dO_i . O_i (kept for B), and
//     dQ_i = scale sum_{visible j} p_ij (dO_i . v_j - D_i) k_j with p_ij from lse_i.
//   backward B, warp = key row j: dV_j = sum_{i sees j} p_ij dO_i and
//     dK_j = scale sum_{i sees j} p_ij (dO_i . v_j - D_i) q_i (zeros for a
//     padding key, which no row sees).
// Every output row is written by exactly one warp, in a fixed order, so the
// results are deterministic (no atomics), and dqkv needs no zero-fill. This is
// the simple form (each pair's dot products are warp reductions); it keeps
// the memory of the fused CPU op, not a tiled kernel's speed. The row math
// (the softmax step, lse, dS) is core/attention_math.h's, shared with the CPU
// op (NOTE [ Attention row math ]); exp is expf here (ExactExp).
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include <snug/core/attention_math.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

constexpr int kWarpsPerBlock = 4;

using softmax_row::ExactExp;

__device__ SNUG_INLINE float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct Shape {
  int64_t B, T, H, D;
  float scale;
  __host__ __device__ int64_t C() const { return H * D; }
};

// Row r of the (B * H * T) rows this kernel covers: (b, h, t).
struct Row {
  int64_t b, h, t;
};
__device__ SNUG_INLINE Row row_of(int64_t r, const Shape& s) {
  Row x;
  x.t = r % s.T;
  const int64_t bh = r / s.T;
  x.h = bh % s.H;
  x.b = bh / s.H;
  return x;
}

// Lane `lane`'s slice of a D-vector at p: p[lane + 32 k] for k < kMaxSlices (0 past D).
template <int S>
__device__ SNUG_INLINE void load_slice(const float* p, int64_t D, int lane, float (&out)[S]) {
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int64_t d = lane + 32 * k;
    out[k] = d < D ? p[d] : 0.0f;
  }
}
template <int S>
__device__ SNUG_INLINE float dot_slice(const float (&a)[S], const float* p, int64_t D, int lane) {
  float part = 0.0f;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int64_t d = lane + 32 * k;
    if (d < D) part += a[k] * p[d];
  }
  return warp_sum(part);
}

template <int S>
__global__ void attention_forward_kernel(const float* __restrict__ qkv, float* __restrict__ y, float* __restrict__ lse,
                                         Shape s, KeyMask km) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (r >= s.B * s.H * s.T) return;  // the whole warp leaves together
  const Row x = row_of(r, s);
  const int64_t C = s.C(), C3 = 3 * C;
  const float* base = qkv + x.b * s.T * C3 + x.h * s.D;
  float q[S], o[S];
  load_slice(base + x.t * C3, s.D, lane, q);
#pragma unroll
  for (int k = 0; k < S; ++k) o[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t last = km.last_key(x.t, s.T);
  for (int64_t j = 0; j <= last; ++j) {
    if (km.padded(x.b, j, s.T)) continue;  // the same for the whole warp
    // The online softmax: the running max grows to m_new, and what l and o
    // summed so far is rescaled by exp(m - m_new) (0 on the first key, m = -inf).
    const float sc = s.scale * dot_slice(q, base + j * C3 + C, s.D, lane);
    const float m_new = softmax_row::max_nan(m, sc);
    const float corr = softmax_row::shifted_exp(m, m_new, ExactExp{});
    const float p = softmax_row::shifted_exp(sc, m_new, ExactExp{});
    l = l * corr + p;
    const float* v = base + j * C3 + 2 * C;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int64_t d = lane + 32 * k;
      if (d < s.D) o[k] = o[k] * corr + p * v[d];
    }
    m = m_new;
  }
  const float inv = softmax_row::inverse_sum<float>(l);
  float* yr = y + (x.b * s.T + x.t) * C + x.h * s.D;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int64_t d = lane + 32 * k;
    if (d < s.D) yr[d] = softmax_row::normalize(o[k], inv);
  }
  // No visible key: l = 0 and o = 0, so y_i = 0 * inf would be NaN; the
  // convention is zeros, and lse = -inf marks the row for backward.
  if (l == 0.0f) {
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int64_t d = lane + 32 * k;
      if (d < s.D) yr[d] = 0.0f;
    }
  }
  if (lane == 0) lse[r] = l == 0.0f ? -INFINITY : softmax_row::logsumexp(m, l);
}

// Backward A: one warp per query row: Dsum_i and dQ_i.
template <int S>
__global__ void attention_backward_q_kernel(const float* __restrict__ qkv, const float* __restrict__ y,
                                            const float* __restrict__ lse, const float* __restrict__ gy,
                                            float* __restrict__ dqkv, float* __restrict__ dsum, Shape s, KeyMask km) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (r >= s.B * s.H * s.T) return;
  const Row x = row_of(r, s);
  const int64_t C = s.C(), C3 = 3 * C;
  const float* base = qkv + x.b * s.T * C3 + x.h * s.D;
  const int64_t yoff = (x.b * s.T + x.t) * C + x.h * s.D;
  float q[S], g[S], dq[S];
  load_slice(base + x.t * C3, s.D, lane, q);
  load_slice(gy + yoff, s.D, lane, g);
  const float Di = dot_slice(g, y + yoff, s.D, lane);  // c = dO_i . O_i
  const float li = lse[r];
#pragma unroll
  for (int k = 0; k < S; ++k) dq[k] = 0.0f;
  const int64_t last = li == -INFINITY ? -1 : km.last_key(x.t, s.T);  // a row that saw no key has no gradient
  for (int64_t j = 0; j <= last; ++j) {
    if (km.padded(x.b, j, s.T)) continue;
    const float* kj = base + j * C3 + C;
    const float p = attention_row::prob(s.scale * dot_slice(q, kj, s.D, lane), li, ExactExp{});
    const float ds = attention_row::score_grad(p, dot_slice(g, kj + C, s.D, lane), Di);
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int64_t d = lane + 32 * k;
      if (d < s.D) dq[k] += ds * kj[d];
    }
  }
  float* out = dqkv + (x.b * s.T + x.t) * C3 + x.h * s.D;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int64_t d = lane + 32 * k;
    if (d < s.D) out[d] = s.scale * dq[k];
  }
  if (lane == 0) dsum[r] = Di;
}

// Backward B: one warp per key row j: dK_j and dV_j (after A: needs dsum).
template <int S>
__global__ void attention_backward_kv_kernel(const float* __restrict__ qkv, const float* __restrict__ lse,
                                             const float* __restrict__ gy, const float* __restrict__ dsum,
                                             float* __restrict__ dqkv, Shape s, KeyMask km) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (r >= s.B * s.H * s.T) return;
  const Row x = row_of(r, s);  // x.t is the key j
  const int64_t C = s.C(), C3 = 3 * C;
  const float* base = qkv + x.b * s.T * C3 + x.h * s.D;
  const int64_t row0 = r - x.t;  // this (b, h)'s first row in lse / dsum
  float kj[S], vj[S], dk[S], dv[S];
  load_slice(base + x.t * C3 + C, s.D, lane, kj);
  load_slice(base + x.t * C3 + 2 * C, s.D, lane, vj);
#pragma unroll
  for (int k = 0; k < S; ++k) dk[k] = dv[k] = 0.0f;
  // The query rows that see key j: i >= j when causal, every row otherwise;
  // none when j is padding. (A row that sees no key never sees j.)
  const int64_t first = km.padded(x.b, x.t, s.T) ? s.T : (km.causal ? x.t : 0);
  for (int64_t i = first; i < s.T; ++i) {
    const float* qi = base + i * C3;
    const float* gi = gy + (x.b * s.T + i) * C + x.h * s.D;
    const float p = attention_row::prob(s.scale * dot_slice(kj, qi, s.D, lane), lse[row0 + i], ExactExp{});
    const float ds = attention_row::score_grad(p, dot_slice(vj, gi, s.D, lane), dsum[row0 + i]);
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const int64_t d = lane + 32 * k;
      if (d < s.D) {
        dv[k] += p * gi[d];
        dk[k] += ds * qi[d];
      }
    }
  }
  float* out = dqkv + (x.b * s.T + x.t) * C3 + x.h * s.D;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int64_t d = lane + 32 * k;
    if (d < s.D) {
      out[C + d] = s.scale * dk[k];
      out[2 * C + d] = dv[k];
    }
  }
}

// NOTE [ Attention through cuBLAS ]
// From T = kAttentionGemmMinT on (cuda/fused_api.h), the per-pair warp sums
// above cost far more than the GEMMs they stand for (at T = 1024 the warp
// kernels took most of a 12-layer GPT step on an H200). cuda/attention.cpp
// then copies q, k, v to (B H, T, D) and, for a chunk of heads at a time (the
// chunk's (T, T) scores kept under 128 MiB), runs
//   forward:  S = Q K^T (cuBLAS); attention_softmax_lse (cuda/softmax.cu), in
//             place, over the keys each row sees (KeyMask): S -> P, lse; Y = P V
//   backward: S = Q K^T again, dP = dO V^T; attention_softmax_lse_backward
//             (beside it): S -> P, dP -> dS (scale folded in, 0 where unseen);
//             dV = P^T dO, dQ = dS K, dK = dS^T Q
// so only lse is kept between the passes, as in the kernels above, and the
// (T, T) buffers live for one chunk. The GEMMs compute the masked entries too;
// cuBLAS is fast enough that skipping them is not worth a kernel of our own.

unsigned blocks_for_rows(int64_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// Calls f with the slice count S (a compile-time constant) for head size D.
template <class F>
void with_slices(int64_t D, F&& f) {
  if (D <= 32)
    f(std::integral_constant<int, 1>{});
  else if (D <= 64)
    f(std::integral_constant<int, 2>{});
  else if (D <= 128)
    f(std::integral_constant<int, 4>{});
  else
    f(std::integral_constant<int, kAttentionMaxSlices>{});
}

}  // namespace

void attention_forward(int64_t B, int64_t T, int64_t H, int64_t D, float scale, KeyMask km, const float* qkv,
                       float* y, float* lse, StreamHandle st) {
  const int64_t rows = B * H * T;
  if (rows == 0) return;
  const Shape s{B, T, H, D, scale};
  with_slices(D, [&](auto S) {
    attention_forward_kernel<decltype(S)::value>
        <<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, as_stream(st)>>>(qkv, y, lse, s, km);
  });
  check_launch("attention_forward");
}

void attention_backward(int64_t B, int64_t T, int64_t H, int64_t D, float scale, KeyMask km, const float* qkv,
                        const float* y, const float* lse, const float* gy, float* dqkv, float* dsum, StreamHandle st) {
  const int64_t rows = B * H * T;
  if (rows == 0) return;
  const Shape s{B, T, H, D, scale};
  with_slices(D, [&](auto S) {
    attention_backward_q_kernel<decltype(S)::value>
        <<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, as_stream(st)>>>(qkv, y, lse, gy, dqkv, dsum, s, km);
    check_launch("attention_backward (queries)");
    // Same stream: B starts after A has written every dsum.
    attention_backward_kv_kernel<decltype(S)::value>
        <<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, as_stream(st)>>>(qkv, lse, gy, dsum, dqkv, s, km);
    check_launch("attention_backward (keys and values)");
  });
}

}  // namespace snug::cuda::kernels

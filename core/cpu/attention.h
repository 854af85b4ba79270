// SPDX-License-Identifier: MIT
// Fused causal self-attention on the CPU, from the packed q|k|v projection.
//
// NOTE [ Fused causal attention ]
// The unfused path (nn::functional::scaled_dot_product_attention) copies q, k
// and v out of the (B, T, 3C) projection, materializes the (B, H, T, T) scores
// and probabilities (half of them masked), and keeps the probabilities for
// backward: 4 MiB per W-GPT layer, and a zero-filled (B, T, 3C) gradient per
// select in backward. These kernels instead, for each (batch, head) on one
// thread:
//   forward:  for each block of kBlockRows query rows, S = scale Q K^T over the
//             visible keys only (the block's own diagonal tile is the only one
//             computed past the mask), a row softmax, O = P V written straight
//             into y's (B, T, H, D) = (B, T, C) layout, and the row's
//             logsumexp (B, H, T) -- the only thing kept besides q|k|v and y.
//   backward: the same blocks: P is recomputed from S and the logsumexp,
//             dP = dO V^T, dS = P (dP - rowsum(P o dP)), dQ = scale dS K,
//             dK += scale dS^T Q, dV += P^T dO, written straight into the
//             (B, T, 3C) gradient of the projection. rowsum(P o dP) equals
//             rowsum(dO o O) (dO . P V); a block holds all visible keys of its
//             rows, so it comes from the block, and y is not read in backward.
// The products are core/cpu/tile_gemm.h's unpacked small-tile GEMM; the head's K
// (and in backward V) is transposed once into scratch so that every block's
// Q K^T (dO V^T) reads unit-stride rows. Scratch is that, plus one
// (kBlockRows x T) tile pair per thread (thread-local, not tensor memory, like
// the GEMM's packing buffers). Every (batch, head) is done
// by one thread in a fixed order, so results do not depend on the thread count.
// Heads are handed out one at a time (schedule(dynamic, 1)): when the VM
// deschedules one thread, the other takes its remaining heads instead of
// waiting for it (NOTE [ Panels on demand ] in core/cpu/gemm_avx512.cpp).
#pragma once
#include <snug/core/cpu/level.h>
#include <cstdint>

#include <snug/core/tensor.h>

namespace snug::inline SNUG_CPU_LEVEL::cpu {

inline constexpr int64_t kAttentionBlockRows = 32;

// qkv (B, T, 3C) contiguous f32/f64 with C = heads * D; q, k, v are its thirds.
// Writes y (B, T, C) and lse (B, heads, T), both contiguous, same dtype.
void causal_attention_forward(const Tensor& qkv, int64_t heads, double scale, const Tensor& y, const Tensor& lse);

// gy (B, T, C) contiguous. Writes every element of dqkv (B, T, 3C).
void causal_attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy, int64_t heads,
                               double scale, const Tensor& dqkv);

// FLOPs of one forward pass (two GEMMs over the visible blocks), for the
// profiler; backward runs five GEMMs of the same sizes (2.5 times as many).
double causal_attention_flops(int64_t B, int64_t T, int64_t heads, int64_t D);

}  // namespace snug::SNUG_CPU_LEVEL::cpu

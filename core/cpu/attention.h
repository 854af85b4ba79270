// SPDX-License-Identifier: MIT
// Fused self-attention on the CPU (causal or not, with or without masks),
// from the packed q|k|v projection.
//
// NOTE [ Fused attention ]
// The unfused path (nn::functional::scaled_dot_product_attention) copies q, k
// and v out of the (B, T, 3C) projection, materializes the (B, H, T, T) scores
// and probabilities (half of them masked), and keeps the probabilities for
// backward: 4 MiB per W-GPT layer, and a zero-filled (B, T, 3C) gradient per
// select in backward. These kernels instead, for each (batch, head) on one
// thread:
//   forward:  for each block of kBlockRows query rows, S = scale Q K^T over the
//             visible keys only (causal: the block's own diagonal tile is the
//             only one computed past the mask; otherwise all T keys), the
//             masks applied to S in place (NOTE [ Attention masks ] in
//             core/backend.h: -inf where masked out, a floating mask added),
//             a row softmax, O = P V written straight
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
// A mask is read where it lies, through its strides (a (T, T) mask broadcast
// over batch and heads is read from its one copy), so a masked or padded
// attention stores nothing more than the causal one: no (B, H, T, T) tensor
// exists between forward and backward, nor inside them. A row that sees no
// key (all masked out) gets lse -inf, a zero output and zero gradients.
// Heads are handed out one at a time (schedule(dynamic, 1)): when the VM
// deschedules one thread, the other takes its remaining heads instead of
// waiting for it (NOTE [ Panels on demand ] in core/cpu/gemm_avx512.cpp).
#pragma once
#include <snug/core/cpu/level.h>
#include <cstdint>

#include <snug/core/backend.h>
#include <snug/core/tensor.h>

namespace snug::inline SNUG_CPU_LEVEL::cpu {

inline constexpr int64_t kAttentionBlockRows = 32;

// qkv (B, T, 3C) contiguous f32/f64 with C = heads * D; q, k, v are its thirds.
// mask as core/backend.h's AttentionMask: key_padding (B, T) bool contiguous,
// mask (B, heads, T, T) elements of any strides, bool or qkv's dtype.
// Writes y (B, T, C) and lse (B, heads, T), both contiguous, same dtype.
// f16/bf16 qkv (NOTE [ 16-bit attention ] in attention.cpp): computed in f32,
// y in qkv's dtype, lse f32; masks bool only.
void attention_forward(const Tensor& qkv, int64_t heads, double scale, const AttentionMask& mask, const Tensor& y,
                       const Tensor& lse);

// gy (B, T, C) contiguous. Writes every element of dqkv (B, T, 3C).
void attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy, int64_t heads,
                        double scale, const AttentionMask& mask, const Tensor& dqkv);

// FLOPs of one forward pass (two GEMMs over the computed blocks: the visible
// ones when causal, all of them otherwise), for the profiler; backward runs
// five GEMMs of the same sizes (2.5 times as many).
double attention_flops(int64_t B, int64_t T, int64_t heads, int64_t D, bool causal);

}  // namespace snug::SNUG_CPU_LEVEL::cpu

// SPDX-License-Identifier: MIT
// The math of one causal attention row, written once for the host and the GPU
// (NOTE [ One definition of each op's math ] in core/functors.h). The fused
// CPU op (core/cpu/attention.cpp), the warp kernels of cuda/attention.cu and
// the cuBLAS path's row kernels (cuda/softmax.cu) call these; how a row is
// walked (a block of rows between tile GEMMs, a warp over the keys, a thread
// block over a row of the score matrix) is what differs.
//
// NOTE [ Attention row math ]
// Query row i of a head sees the keys j <= i. With s_j = scale q_i . k_j:
//   forward:  m = max_j s_j,  l = sum_j exp(s_j - m)
//             o_i = (sum_j exp(s_j - m) v_j) / l      (normalized once, at the end)
//             lse_i = m + log(l)                      (the one thing kept for backward)
//   backward: p_j = exp(s_j - lse_i)                  (P recomputed from lse)
//             dp_j = dO_i . v_j
//             c = sum_j p_j dp_j                      (= dO_i . o_i)
//             ds_j = p_j (dp_j - c)
//             dq_i = scale sum_j ds_j k_j,  dk_j += scale ds_j q_i,  dv_j += p_j dO_i
// The softmax step is core/softmax_math.h's (softmax_row::): the running max
// is max_nan, the terms of l are shifted_exp, 1 / l is inverse_sum, and ds is
// softmax backward with dp as the incoming gradient; lse is logsumexp and o
// is normalize(sum, 1 / l). The CPU takes m and l in two passes over a block
// row that holds every visible key; a CUDA warp walks the keys once with an
// online softmax (m grows, and l and o are rescaled by exp(m_old - m_new),
// the same shifted_exp). Only backward's three steps get names here.
//
// The exp is a parameter, as in softmax_row: FastExp on the CPU and in the
// cuBLAS path's forward, ExactExp (expf) in the warp kernels and in the cuBLAS
// path's backward.
//
// A leaf header apart from core/softmax_math.h: nvcc compiles it too.
#pragma once
#include <snug/base/macros.h>
#include <snug/core/softmax_math.h>

namespace snug::attention_row {

// Backward's p_j = exp(s_j - lse_i).
template <class C, class Exp>
SNUG_HOST_DEVICE SNUG_INLINE C prob(C s, C lse, Exp exp) {
  return softmax_row::shifted_exp(s, lse, exp);
}

// c sums correction_term(p_j, dp_j) over the visible keys.
template <class C>
SNUG_HOST_DEVICE SNUG_INLINE C correction_term(C p, C dp) {
  return softmax_row::backward_term(dp, p, /*log=*/false);
}

// ds_j = p_j (dp_j - c): 0 where p_j is 0 (past the diagonal).
template <class C>
SNUG_HOST_DEVICE SNUG_INLINE C score_grad(C p, C dp, C c) {
  return softmax_row::softmax_backward_at(dp, p, c);
}

}  // namespace snug::attention_row

// SPDX-License-Identifier: MIT
// The host side of Linear through cuBLASLt (NOTE [ Linear through cuBLASLt ]
// in cuda/linear_lt.cpp): which epilogue each of a Linear's three GEMMs gets,
// what must run after it, and the key its algorithm is cached by. Plain C++
// (no CUDA header), so tests/test_lt_plan.cpp checks the choices and, with a
// reference GEMM and epilogue, the layouts on the CPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include <snug/core/dtype.h>
#include <snug/cuda/gemm_plan.h>

namespace snug::cuda {

// What cuBLASLt applies to a GEMM's result, in our names (cublasLtEpilogue_t
// in cuda/linear_lt.cpp). D is the column-major result (m, n) of the call
// (NOTE [ Row-major matmul through cuBLAS ]); "bias" has m elements, added to
// every column; "aux" is an m x n matrix with leading dimension aux_ld.
//   bias, relu_bias, gelu_bias:  D = act(A B + bias)
//   gelu_aux_bias:               aux = A B + bias, D = gelu(aux)
//   dgelu:                       D = (A B) * gelu'(aux)
//   bgradb:                      D = A B, and bias (n elements) = the sums of B over k
// cuBLASLt's GELU is the tanh approximation (GELU_tanh); the exact GELU has no epilogue.
enum class LtEpilogue : uint8_t { none, bias, relu, relu_bias, gelu, gelu_bias, gelu_aux, gelu_aux_bias, dgelu, bgradb };

// What a Linear's activation is, as backend.h's Backend::Activation (kept as its int).
enum class LtAct : int { none = 0, relu = 1, gelu = 2, gelu_tanh = 3 };

// The forward GEMM of linear_act: its epilogue, and what must follow it.
struct LtForward {
  LtEpilogue epilogue = LtEpilogue::none;
  bool into_pre = false;    // the GEMM writes `pre` (x W^T + b), not `out`
  bool act_after = false;   // then the activation runs as its own kernel, pre -> out
  bool copy_after = false;  // act none with pre wanted: pre is a copy of out
};

// out = act(x W^T + b), pre receiving x W^T + b when wanted. aux_ld_ok: the
// pre-activation's leading dimension (out features) suits cuBLASLt's aux
// matrix (a multiple of 8).
inline LtForward choose_lt_forward(LtAct act, bool bias, bool pre, bool aux_ld_ok) {
  LtForward f;
  switch (act) {
    case LtAct::none:
      f.epilogue = bias ? LtEpilogue::bias : LtEpilogue::none;
      f.copy_after = pre;
      return f;
    case LtAct::relu:
      if (!pre) {
        f.epilogue = bias ? LtEpilogue::relu_bias : LtEpilogue::relu;
        return f;
      }
      break;  // ReLU's aux is a bit mask, not the pre-activation
    case LtAct::gelu_tanh:
      if (!pre) {
        f.epilogue = bias ? LtEpilogue::gelu_bias : LtEpilogue::gelu;
        return f;
      }
      if (aux_ld_ok) {
        f.epilogue = bias ? LtEpilogue::gelu_aux_bias : LtEpilogue::gelu_aux;
        return f;
      }
      break;
    case LtAct::gelu:
      break;  // the exact GELU: cuBLASLt has none
  }
  // The GEMM with its bias into pre (or into out, when pre is not wanted:
  // the activation then runs in place), the activation after.
  f.epilogue = bias ? LtEpilogue::bias : LtEpilogue::none;
  f.into_pre = pre;
  f.act_after = true;
  return f;
}

// grad_z = (grad_out W) * act'(z): DGELU for the tanh GELU when z's leading
// dimension suits the aux matrix; otherwise the GEMM, then the derivative's
// elementwise kernel in place.
inline LtEpilogue choose_lt_backward_act(LtAct act, bool aux_ld_ok) {
  return act == LtAct::gelu_tanh && aux_ld_ok ? LtEpilogue::dgelu : LtEpilogue::none;
}

// cuBLASLt's aux matrices want a leading dimension that is a multiple of 8.
inline bool lt_aux_ld_ok(int64_t ld) { return ld > 0 && ld % 8 == 0; }

// A Linear's GEMMs as row-major matmuls a (M, K) @ b (K, N) (gemm_plan.h):
//   forward  out (N, out) = x (N, in) @ W^T: C is (m = out, n = N), bias per row of C
//   dgrad    gx  (N, in)  = g (N, out) @ W:   C is (m = in, n = N), aux = z (N, in)
//   wgrad    gW  (out, in) = g^T @ x (N, in): C is (m = in, n = out), k = N;
//            BGRADB sums B' = g^T over k: the bias gradient, one per output feature.
// Each takes its operands' element strides as 2-D views; plan.ok is false when
// one is neither row- nor column-major (the caller copies or falls back).
struct LtGemm {
  bool ok = false;
  GemmPlan plan;  // batch 1
};

// a (M, K) with strides sa, b (K, N) with strides sb -> C for out (M, N) contiguous.
inline LtGemm plan_lt_gemm(int64_t M, int64_t N, int64_t K, const int64_t sa[2], const int64_t sb[2]) {
  const int64_t shape_a[3] = {1, M, K}, strides_a[3] = {0, sa[0], sa[1]};
  const int64_t shape_b[3] = {1, K, N}, strides_b[3] = {0, sb[0], sb[1]};
  const GemmOperandPlan pa = plan_gemm_operand(shape_a, strides_a), pb = plan_gemm_operand(shape_b, strides_b);
  if (!pa.ok || !pb.ok) return {};
  return {true, plan_gemm(1, M, N, K, pa, pb)};
}
// x (N, in) strides sx, weight (out, in) strides sw: out (N, out) = x W^T.
inline LtGemm plan_linear_forward(int64_t N, int64_t in, int64_t outf, const int64_t sx[2], const int64_t sw[2]) {
  const int64_t swt[2] = {sw[1], sw[0]};  // W^T (in, out)
  return plan_lt_gemm(N, outf, in, sx, swt);
}
// g (N, out) strides sg, weight (out, in) strides sw: gx (N, in) = g W.
inline LtGemm plan_linear_dgrad(int64_t N, int64_t in, int64_t outf, const int64_t sg[2], const int64_t sw[2]) {
  return plan_lt_gemm(N, in, outf, sg, sw);
}
// g (N, out) strides sg, x (N, in) strides sx: gW (out, in) = g^T x.
inline LtGemm plan_linear_wgrad(int64_t N, int64_t in, int64_t outf, const int64_t sg[2], const int64_t sx[2]) {
  const int64_t sgt[2] = {sg[1], sg[0]};  // g^T (out, N)
  return plan_lt_gemm(outf, in, N, sgt, sx);
}

// Everything an algorithm choice depends on (pointers only through their alignment).
struct LtKey {
  int device = 0;
  DType dtype = DType::f32;
  bool tf32 = false;
  LtEpilogue epilogue = LtEpilogue::none;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0, aux_ld = 0;
  uint8_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0, align_aux = 0;  // bytes, up to 16
  bool operator==(const LtKey&) const = default;
};

struct LtKeyHash {
  std::size_t operator()(const LtKey& k) const {
    std::size_t h = 0;
    auto mix = [&h](std::size_t v) { h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2); };
    for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldc, k.aux_ld}) mix(std::hash<int64_t>{}(v));
    mix(static_cast<std::size_t>(k.dtype) | static_cast<std::size_t>(k.epilogue) << 8 |
        static_cast<std::size_t>(k.tf32) << 16 | static_cast<std::size_t>(k.trans_a) << 17 |
        static_cast<std::size_t>(k.trans_b) << 18);
    mix(std::size_t{k.align_a} | std::size_t{k.align_b} << 8 | std::size_t{k.align_c} << 16 |
        std::size_t{k.align_bias} << 24 | std::size_t{k.align_aux} << 32);
    mix(std::hash<int>{}(k.device));
    return h;
  }
};

// The alignment of a pointer as cuBLASLt's heuristics ask for it: the largest
// power of two up to 16 that divides it (0 for null, which has none to ask).
inline uint8_t lt_alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  if (v == 0) return 0;
  for (uint8_t a = 16; a > 1; a = static_cast<uint8_t>(a / 2))
    if (v % a == 0) return a;
  return 1;
}

}  // namespace snug::cuda

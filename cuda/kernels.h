// SPDX-License-Identifier: MIT
// The kernel launchers behind CudaBackend (cuda/cuda_backend.cpp). Plain C++:
// device pointers as void*, geometry as cuda/geometry.h structs, dtypes as
// DType. Each launcher is asynchronous on the stream given (a cudaStream_t as
// an integer; 0 is the default stream) and throws DeviceError naming the
// kernel if the launch fails. The math is in core/functors.h (NOTE [ One
// definition of each op's math ]), core/softmax_math.h, core/layer_norm_math.h,
// core/attention_math.h, core/pool_window.h and core/update_math.h, shared
// with the CPU loops. cuda/X.cu holds the kernels of core/cpu/X.cpp (softmax,
// layer_norm, pool, index, random, reduce, elementwise, attention, update; cross_entropy.cu is
// the fused cross-entropy, whose CPU side is the composed default).
#pragma once
#include <cstddef>
#include <cstdint>

#include <snug/core/dtype.h>
#include <snug/core/functors.h>
#include <snug/core/philox.h>
#include <snug/core/pool_window.h>
#include <snug/core/update_math.h>
#include <snug/cuda/geometry.h>

namespace snug::cuda::kernels {

using StreamHandle = std::uintptr_t;

// ---- elementwise.cu: operand 0 is the output ------------------------------------
// dst = convert(src), rounding to 16 bits as the CPU does (NOTE [ Rounding wide
// values to 16 bits ] in core/cpu/elementwise.cpp).
void copy(DType dst_t, DType src_t, const Geometry<2>& g, void* dst, const void* src, StreamHandle s);
// Every element of dst gets the bytes `bits` (elem_size 1, 2, 4 or 8).
void fill(std::size_t elem_size, uint64_t bits, const Geometry<1>& g, void* dst, StreamHandle s);
void unary(UnaryOp op, double a, double b, DType t, const Geometry<2>& g, void* out, const void* x, StreamHandle s);
void binary(BinaryOp op, DType t, const Geometry<3>& g, void* out, const void* a, const void* b, StreamHandle s);
void compare(CompareOp op, DType t, const Geometry<3>& g, bool* out, const void* a, const void* b, StreamHandle s);
void where(DType t, const Geometry<4>& g, void* out, const bool* cond, const void* a, const void* b, StreamHandle s);

// ---- index.cu ------------------------------------------------------------------
// out[o0] = x[o2 + index[o1] * jump] over g = (out, index, x seen without dim).
void gather(std::size_t elem_size, const Geometry<3>& g, int64_t jump, void* out, const int64_t* index, const void* x,
            StreamHandle s);
// For each position of `outer` (out, index, src with dim set to size 1), walk
// dim in order (len steps): out[o0 + index[o1 + j istep] ostep] += src[o2 + j sstep].
// One thread per position and no atomics: NOTE [ Deterministic scatter ].
void scatter_add(DType t, const Geometry<3>& outer, int64_t len, int64_t ostep, int64_t istep, int64_t sstep, void* out,
                 const int64_t* index, const void* src, StreamHandle s);

// ---- random.cu -----------------------------------------------------------------
// out (n,) contiguous floating: element i from the Philox stream at st
// (NOTE [ Philox element mapping ]); uniform: a + (b - a) u; normal: a + b z
// (random_value, core/philox.h).
void random(bool normal, DType t, PhiloxState st, double a, double b, int64_t n, void* out, StreamHandle s);

// ---- reduce.cu -----------------------------------------------------------------
// kept: (x, out) offsets over the kept dims; red: x offsets over the reduced dims.
void reduce(ReduceOp op, DType x_t, DType out_t, const Geometry<2>& kept, const Geometry<1>& red, const void* x,
            void* out, StreamHandle s);
// kept: (x, out) offsets; each output walks len elements xstep apart.
void arg_reduce(bool is_max, DType t, const Geometry<2>& kept, int64_t len, int64_t xstep, const void* x, int64_t* out,
                StreamHandle s);

// ---- softmax.cu ----------------------------------------------------------------
// rows: (x, y) row starts; steps: along the softmax dim.
void softmax(DType t, bool log, const Geometry<2>& rows, int64_t len, int64_t xstep, int64_t ystep, const void* x,
             void* y, StreamHandle s);
// rows: (grad_out, y, grad_in) row starts.
void softmax_backward(DType t, bool log, const Geometry<3>& rows, int64_t len, int64_t gstep, int64_t ystep,
                      int64_t dstep, const void* g, const void* y, void* d, StreamHandle s);
// x, y (rows, Tk) contiguous (x may be y), row r is query r % Tq.
void causal_softmax(DType t, int64_t rows, int64_t Tq, int64_t Tk, double scale, const void* x, void* y, StreamHandle s);

// Which keys a query row of the attention kernels sees (NOTE [ Attention
// masks ] in core/backend.h): j <= i when causal; none of batch b's padding
// keys when pad, (B, T) bool in device memory, is given (true = padding).
struct KeyMask {
  bool causal = true;
  const bool* pad = nullptr;
  SNUG_HOST_DEVICE int64_t last_key(int64_t i, int64_t T) const { return causal ? i : T - 1; }
  SNUG_HOST_DEVICE bool padded(int64_t b, int64_t j, int64_t T) const { return pad != nullptr && pad[b * T + j]; }
  SNUG_HOST_DEVICE bool sees(int64_t b, int64_t i, int64_t j, int64_t T) const {
    return j <= last_key(i, T) && !padded(b, j, T);
  }
};
// The attention's cuBLAS path (NOTE [ Attention through cuBLAS ]) on f32
// (rows, T) scores of rows / T heads of a (B, H) grid, the chunk's first row
// being row0 of B H T (which gives each row's batch element for km).
// Forward, in place: s -> P = softmax(scale s) over the keys the row sees
// (0 elsewhere), lse (rows) its logsumexp (-inf for a row that sees none).
void attention_softmax_lse(int64_t rows, int64_t row0, int64_t T, int64_t H, float scale, KeyMask km, float* s,
                           float* lse, StreamHandle st);
// Backward from lse: s holds the raw scores again and becomes P; dp = dO V^T
// becomes dS = scale P (dp - D_r), D_r = sum_j P_rj dp_rj (0 where unseen).
void attention_softmax_lse_backward(int64_t rows, int64_t row0, int64_t T, int64_t H, float scale, KeyMask km,
                                    float* s, float* dp, const float* lse, StreamHandle st);

// ---- layer_norm.cu -------------------------------------------------------------
// x, y (R, C) contiguous; w, b (C) or null; mean, rstd (R) f32. res, h: null,
// or (R, C): then h = x + res (rounded to t) is written and normalized
// (Backend::add_layer_norm).
void layer_norm(DType t, int64_t R, int64_t C, double eps, const void* x, const void* res, const void* w,
                const void* b, void* h, void* y, float* mean, float* rstd, StreamHandle s);
// gx (R, C) or null; gw, gb (C) or null; gadd (R, C) or null, added to gx
// (add_layer_norm_backward). scratch: 2 * layer_norm_wb_chunks(R) * C
// elements of the accumulation type (f64 for f64, else f32) when gw or gb is
// given (the column sums' per-chunk partials).
int64_t layer_norm_wb_chunks(int64_t R);
void layer_norm_backward(DType t, int64_t R, int64_t C, const void* g, const void* x, const void* w, const float* mean,
                         const float* rstd, const void* gadd, void* gx, void* gw, void* gb, void* scratch,
                         StreamHandle s);

// ---- dropout.cu: dropout in one kernel each way (Backend::dropout) ----------------
// x, out (n) of dtype t, keep (n) bool, contiguous; element i keeps when uniform_at(st, i) >= p.
void dropout(DType t, PhiloxState st, double p, int64_t n, const void* x, void* out, bool* keep, StreamHandle s);
// gx (n) = g (n) * (keep ? scale : 0), scale rounded to t.
void dropout_backward(DType t, double scale, int64_t n, const void* g, const bool* keep, void* gx, StreamHandle s);

// ---- cross_entropy.cu: the fused cross-entropy (NOTE [ Fused cross-entropy ]) ----
// x (N, C) of dtype t, contiguous; target (N) i64; loss, lse, w (N) f32 (f64 for f64 x);
// gx (N, C) of dtype t, every element written.
void cross_entropy(DType t, int64_t N, int64_t C, int64_t ignore_index, double eps, const void* x,
                   const int64_t* target, void* loss, void* lse, StreamHandle s);
void cross_entropy_backward(DType t, int64_t N, int64_t C, int64_t ignore_index, double eps, const void* x,
                            const int64_t* target, const void* lse, const void* w, void* gx, StreamHandle s);

// ---- pool.cu --------------------------------------------------------------------
// Windows over (H, W) of core/pool_window.h, shared with core/cpu/pool.cpp.
// x (planes, H, W), out/indices (planes, Ho, Wo), contiguous; indices only for max.
void pool2d(DType t, const PoolGeometry& g, const void* x, void* out, int64_t* indices, StreamHandle s);
// grad_x written whole; one thread per input element gathers the outputs whose
// windows hold it, in output order (the CPU's order of accumulation).
void pool2d_backward(DType t, const PoolGeometry& g, const void* grad_out, const int64_t* indices, void* grad_x,
                     StreamHandle s);

// ---- update.cu: optimizer updates and the loss scaler (core/update_math.h) -----
// p, m, v f32 (n) contiguous; g (n) contiguous of dtype gt (f32, f16 or bf16).
void fused_adam(DType gt, int64_t n, float* p, const void* g, float* m, float* v, const update::AdamConsts& k,
                StreamHandle s);
// buf f32 (n) or null without momentum.
void fused_sgd(DType gt, int64_t n, float* p, const void* g, float* buf, const update::SgdConsts& k, StreamHandle s);
// out (n) = g (n) * inv, f32 out for f32/f16/bf16 g (out may be g when g is
// f32), f64 out for f64 g (in place or not); *flag = 1 if any out is inf/NaN.
void unscale_check(DType gt, DType out_t, int64_t n, const void* g, void* out, double inv, int32_t* flag,
                   StreamHandle s);

// ---- attention.cu: fused self-attention (NOTE [ CUDA fused attention ]) ----
// qkv (B, T, 3 H D), y (B, T, H D), lse and dsum (B, H, T), gy (B, T, H D),
// dqkv (B, T, 3 H D): f32, contiguous. D <= 32 * kAttentionMaxSlices. km:
// causal or not, key padding or not.
constexpr int kAttentionMaxSlices = 8;
void attention_forward(int64_t B, int64_t T, int64_t H, int64_t D, float scale, KeyMask km, const float* qkv,
                       float* y, float* lse, StreamHandle s);
// Writes every element of dqkv; dsum is scratch (B, H, T).
void attention_backward(int64_t B, int64_t T, int64_t H, int64_t D, float scale, KeyMask km, const float* qkv,
                        const float* y, const float* lse, const float* gy, float* dqkv, float* dsum, StreamHandle s);

}  // namespace snug::cuda::kernels

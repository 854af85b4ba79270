// SPDX-License-Identifier: MIT
// Fused optimizer updates, the loss scaler's unscale, fused attention and
// cuDNN's batch norm on CUDA, as plain C++ (no CUDA header): nn/optim/fused.cpp,
// nn/amp/grad_scaler.cpp and nn/functional*.cpp call these for tensors on a
// cuda:N device. cuda/fused_ops.cpp implements them with the kernels of
// cuda/fused.cu (and cuda/attention.cu), cuda/batch_norm.cpp with cuDNN,
// all inside the CUDA plugin; without it (cuda/plugin_loader.cpp) they throw
// DeviceError. The per-element math is core/update_math.h, the same the CPU
// loops use. Each call queues one kernel on the device's current stream
// (memory/stream.h) and does not wait for it.
#pragma once
#include <cstddef>
#include <cstdint>

#include <snug/core/tensor.h>
#include <snug/core/update_math.h>

namespace snug::cuda {

// p, m, v: f32, contiguous, (n); g: f32/f16/bf16, contiguous, (n); all on one
// CUDA device. Anything else is a ValueError / DeviceError naming the tensor.
void fused_adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const update::AdamConsts& k);
// p f32 (n), g f32/f16/bf16 (n), buf f32 (n) or undefined (no momentum).
void fused_sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const update::SgdConsts& k);

// out = g * inv, element by element (f32 math for f32/f16/bf16 gradients, f64
// for f64), and flags[slot] = 1 if any element of out is inf or NaN (flags is
// left alone otherwise, so it must start at 0). g: contiguous floating (n);
// out: g itself (f32/f64 gradients, in place) or a contiguous f32 tensor (n);
// flags: contiguous i32 (slots) on the same device. The flags stay on the
// device: a caller unscaling many gradients reads them back once.
void unscale_check(const Tensor& g, const Tensor& out, double inv, const Tensor& flags, int64_t slot);

// Fused causal self-attention (nn::functional::causal_self_attention on a GPU;
// NOTE [ CUDA fused attention ] and NOTE [ Attention through cuBLAS ] in
// cuda/attention.cu). qkv (B, T, 3C) f32 contiguous, C = heads * D with
// D <= 256; y (B, T, C) and lse (B, heads, T) are written. Backward writes
// every element of dqkv (B, T, 3C) from gy (B, T, C). tf32: the cuBLAS path
// (T >= kAttentionGemmMinT) may multiply in TF32 (the caller's inputs were
// 16-bit, or the user allowed TF32); the short-T kernels are f32 throughout.
void causal_attention_forward(const Tensor& qkv, int64_t heads, double scale, const Tensor& y, const Tensor& lse,
                              bool tf32 = false);
void causal_attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy,
                               int64_t heads, double scale, const Tensor& dqkv, bool tf32 = false);
// From this sequence length on, attention goes through cuBLAS GEMMs and the
// causal softmax row kernels of cuda/softmax.cu, in chunks of heads; below
// it, one warp per row.
inline constexpr int64_t kAttentionGemmMinT = 64;
// The most bytes of (T, T) f32 scores one chunk of heads may take on that
// path (128 MiB; at least one head per chunk). Settable so that tests can
// reach several chunks with small inputs; returns the previous value.
std::size_t set_attention_chunk_bytes(std::size_t bytes);
// The head sizes the kernels take (D <= 256).
inline constexpr int64_t kMaxFusedAttentionHeadSize = 256;

// Batch normalization through cuDNN (nn::functional::batch_norm on a GPU;
// cuda/batch_norm.cpp), per channel over N and the spatial dims.
// x: (N, C), (N, C, L) or (N, C, H, W), contiguous, f32/f16/f64; y like x.
// weight, bias, save_mean, save_invstd, running_mean, running_var: (C),
// contiguous, f32 (f64 for f64 x), on x's device. Training writes y and the
// batch's mean and 1/sqrt(var + eps) for backward, and, when running_mean and
// running_var are given (both or neither), updates them in place:
// r = (1 - momentum) r + momentum * batch value, with the unbiased variance.
void batch_norm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                                 const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd);
// Evaluation: y from the running statistics.
void batch_norm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var, double eps, const Tensor& y);
// Backward of the training forward: gx like x, gweight and gbias (C), all written.
void batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& weight, const Tensor& save_mean,
                         const Tensor& save_invstd, double eps, const Tensor& gx, const Tensor& gweight,
                         const Tensor& gbias);

}  // namespace snug::cuda

// SPDX-License-Identifier: MIT
// Fused attention on CUDA, as plain C++ (no CUDA header): the entry points
// behind CudaBackend::attention (+backward), which nn/ reaches through
// backend_for(device); tests call them directly. cuda/attention.cpp
// implements them with the kernels of cuda/attention.cu, inside the CUDA
// plugin; without it (cuda/plugin_loader.cpp) they throw DeviceError. Each call queues its kernels on the device's current stream
// (memory/stream.h) and does not wait for them. (Batch norm, the optimizer
// updates and the loss scaler's unscale are backend entries: core/backend.h.)
#pragma once
#include <cstddef>
#include <cstdint>

#include <snug/core/tensor.h>

namespace snug::cuda {

// Fused self-attention (nn::functional::self_attention on a GPU; NOTE [ CUDA
// fused attention ] and NOTE [ Attention through cuBLAS ] in cuda/attention.cu).
// qkv (B, T, 3C) f32 contiguous, C = heads * D with D <= 256; causal or not;
// key_padding undefined or (B, T) bool on qkv's device, true at the padding
// keys no row sees (NOTE [ Attention masks ] in core/backend.h). y (B, T, C)
// and lse (B, heads, T) are written (a row that sees no key: zeros, lse
// -inf). Backward writes every element of dqkv (B, T, 3C) from gy (B, T, C).
// tf32: the cuBLAS path (T >= kAttentionGemmMinT) may multiply in TF32 (the
// caller's inputs were 16-bit, or the user allowed TF32); the short-T kernels
// are f32 throughout.
void attention_forward(const Tensor& qkv, int64_t heads, double scale, bool causal, const Tensor& key_padding,
                       const Tensor& y, const Tensor& lse, bool tf32 = false);
void attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy, int64_t heads,
                        double scale, bool causal, const Tensor& key_padding, const Tensor& dqkv, bool tf32 = false);
// From this sequence length on, attention goes through cuBLAS GEMMs and the
// attention softmax row kernels of cuda/softmax.cu, in chunks of heads; below
// it, one warp per row.
inline constexpr int64_t kAttentionGemmMinT = 64;
// The most bytes of (T, T) f32 scores one chunk of heads may take on that
// path (128 MiB; at least one head per chunk). Settable so that tests can
// reach several chunks with small inputs; returns the previous value.
std::size_t set_attention_chunk_bytes(std::size_t bytes);
// The head sizes the kernels take (D <= 256).
inline constexpr int64_t kMaxFusedAttentionHeadSize = 256;

}  // namespace snug::cuda

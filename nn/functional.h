// SPDX-License-Identifier: MIT
// nn::functional: the differentiable building blocks of the layers, each
// with its backward beside its forward. Shapes are given at each boundary.
#pragma once
#include <array>
#include <optional>

#include <snug/autograd/ops.h>
#include <snug/core/tensor.h>

namespace snug::nn::functional {

// x (..., in) @ weight (out, in)^T + bias (out) -> (..., out)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Normalizes over the last dim (normalized_shape = x.size(-1) only).
// x (..., C), weight/bias (C) or undefined -> (..., C)
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// A residual add and the layer norm of its sum, as one op (the backend's
// add_layer_norm: on a GPU one kernel each way): returns {h, y} with
// h = x + r and y = layer_norm(h, weight, bias, eps), the values of the two
// ops. x and r (..., C) of one shape and dtype (else: the two ops).
// A pre-norm transformer block's `h = x + attn; u = ln_2(h)`.
std::array<Tensor, 2> add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias,
                                     double eps = 1e-5);

// Rows of weight (num, dim) picked by indices (any shape, i64) -> (*indices.shape, dim)
Tensor embedding(const Tensor& indices, const Tensor& weight);

enum class Reduction { mean, sum, none };

// logits (N, C) or (N, C, d...) is not supported: flatten to (N, C) first.
// target (N) i64 class indices; entries equal to ignore_index contribute
// nothing (and do not count in the mean). label_smoothing in [0, 1).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::mean);
// log_probs (N, C), target (N) i64.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100,
                Reduction reduction = Reduction::mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Numerically stable: max(x,0) - x*t + log(1 + exp(-|x|)).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean);

// softmax(scale * x) over the last dim with a causal mask applied on the fly.
// x (..., Tq, Tk) -> same shape.
Tensor causal_softmax(const Tensor& x, double scale);

// Attention: q (B, H, Tq, D), k/v (B, H, Tk, D) -> (B, H, Tq, D).
// Masks follow NOTE [ Attention masks ] (core/backend.h): true = masked out.
// causal: query i sees keys j <= i + (Tk - Tq); no T x T mask tensor is made.
// mask (optional, broadcast to (B, H, Tq, Tk)): bool, true = masked out, or
// floating, added to the scaled scores. key_padding_mask (optional, (B, Tk)
// bool): true at keys no query sees. A query row that sees no key gives zeros.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false,
                                    const Tensor& mask = Tensor(), double dropout_p = 0.0, bool training = false,
                                    const Tensor& key_padding_mask = Tensor());

// Self-attention from the packed projection of MultiheadAttention:
// qkv (B, T, 3C) holding q | k | v, each (B, T, heads, C / heads) -> (B, T, C),
// the heads merged back. The same as splitting q, k and v into heads, calling
// scaled_dot_product_attention(causal, attn_mask, key_padding_mask) and
// merging. attn_mask broadcasts to (B, heads, T, T) (a (T, T) or (B, 1, T, T)
// mask is read where it lies, never expanded in memory); key_padding_mask is
// (B, T) bool, true at padding (data::pad_collate's padding_mask). Without
// attention dropout this is one op, the backend's attention (core/backend.h):
// on the CPU (any float dtype) and on a GPU a fused kernel that never builds
// the (B, heads, T, T) scores and keeps only a (B, heads, T) logsumexp for
// backward (NOTE [ Fused attention ] in core/cpu/attention.h, NOTE [ CUDA
// fused attention ] in cuda/attention.cu); elsewhere the backend's composed
// default. `fused = false` forces the unfused ops (tests, benchmarks).
Tensor self_attention(const Tensor& qkv, int64_t heads, bool causal, const Tensor& attn_mask = Tensor(),
                      const Tensor& key_padding_mask = Tensor(), double dropout_p = 0.0, bool training = false,
                      bool fused = true);
// self_attention(qkv, heads, causal = true) without masks.
Tensor causal_self_attention(const Tensor& qkv, int64_t heads, double dropout_p = 0.0, bool training = false,
                             bool fused = true);

// ---- convolution and pooling (nn/functional_conv.cpp, nn/functional_pool.cpp) ----
// x (N, Cin, H, W), weight (Cout, Cin/groups, kH, kW), bias (Cout) -> (N, Cout, Ho, Wo)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
// x (N, C, H, W) -> (N, C, Ho, Wo); stride defaults to kernel size.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0});
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0});
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
// x (N, C, ...) normalized per channel. Training: batch statistics, and the
// running buffers (C) are updated in place with momentum. Eval: running stats.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace snug::nn::functional

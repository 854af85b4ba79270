// SPDX-License-Identifier: MIT
// AdamW with 8-bit optimizer state (Dettmers et al., "8-bit Optimizers via
// Block-wise Quantization", 2022; docs/compression.md).
//
// The first moment m and the second moment v of every parameter with at
// least `min_8bit_size` elements are stored as one byte per element: the
// tensor is cut into blocks of `block_size` elements; each block keeps its
// absolute maximum in f32 and each element the index of the nearest entry of
// a 256-value dynamic quantization map (signed for m, unsigned for v). The
// map spaces its values like a float with a decimal exponent: dense near 0,
// coarse near 1, so small moments keep their relative precision. Smaller
// tensors (biases, norms) keep f32 moments. About 2 bytes of state per
// parameter instead of 8.
//
// A step dequantizes a block, applies the AdamW update with the exact new
// moments (bias-corrected, decoupled weight decay, the same formula as
// optim::AdamW) and quantizes the new moments back. f32 parameters only.
//
// State names: "exp_avg_q" / "exp_avg_sq_q" (u8, the parameter's shape),
// "exp_avg_absmax" / "exp_avg_sq_absmax" (f32, one per block), or "exp_avg" /
// "exp_avg_sq" (f32) for small tensors; state_dict round-trips them as they are.
#pragma once
#include <vector>

#include <snug/nn/optim/optimizer.h>

namespace snug::nn::optim {

// Defaults are bitsandbytes' AdamW8bit's (lr 1e-3, betas (0.9, 0.999), eps
// 1e-8, weight_decay 1e-2, min_8bit_size 4096, blocks of 256); docs/nn.md.
// Group options: "beta1", "beta2", "eps".
struct AdamW8bitOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  int64_t block_size = 256;
  int64_t min_8bit_size = 4096;  // tensors with fewer elements keep f32 state
};

class AdamW8bit : public Optimizer {
 public:
  explicit AdamW8bit(std::vector<Tensor> params, AdamW8bitOptions o = {});
  explicit AdamW8bit(std::vector<ParamGroup> groups, AdamW8bitOptions o = {});
  void step() override;
  std::string name() const override { return "AdamW8bit"; }
  void select_param_state(const Tensor& param, int64_t dim, const Tensor& index, const Shape& old_shape) override;
  AdamW8bitOptions defaults;

  // The two 256-entry maps, sorted ascending: signed in [-1, 1] (m), unsigned in [0, 1] (v).
  static const std::vector<float>& signed_map();
  static const std::vector<float>& unsigned_map();
  // Block-wise quantization of x (n elements) with `map`: codes (n) and absmax (ceil(n / block)).
  static void quantize_blockwise(const float* x, int64_t n, int64_t block, const std::vector<float>& map,
                                 uint8_t* codes, float* absmax);
  static void dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, int64_t block,
                                   const std::vector<float>& map, float* x);

 protected:
  Shape state_shape(const Tensor& p, const std::string& name) const override;
  std::size_t expected_param_state_bytes(size_t group, const Tensor& p) const override;
  void check_group(const ParamGroup& g, const std::string& where) const override;
};

}  // namespace snug::nn::optim

// SPDX-License-Identifier: MIT
// Multi-head self-attention and the pre-LayerNorm transformer block.
#pragma once
#include <snug/nn/layers.h>
#include <snug/nn/module.h>

namespace snug::nn {

// x (B, T, C) -> (B, T, C). One fused qkv projection Linear(C, 3C), heads of
// size C / heads, scaled dot-product attention, output projection Linear(C, C).
// Causal without a mask goes through functional::causal_self_attention (one
// fused op on the CPU that never builds the T x T scores); with a mask,
// through scaled_dot_product_attention.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embd, int64_t heads, bool causal = true, double dropout = 0.0, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // mask (bool, broadcast to (B, heads, T, T)): true = blocked.
  Tensor forward(const Tensor& x, const Tensor& mask);
  std::string repr() const override;
  std::shared_ptr<Linear> qkv, proj;
  // head_dim is embd / heads at construction. prune::compact can remove
  // heads; then heads * head_dim < embd (qkv: (3 heads head_dim, embd), proj:
  // (embd, heads head_dim)).
  int64_t embd, heads, head_dim;
  bool causal;
  double dropout_p;
};

// x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)),  mlp = Linear(C, 4C), GELU (erf), Linear(4C, C)
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t embd, int64_t heads, bool causal = true, double dropout = 0.0, int64_t mlp_ratio = 4);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<MultiheadAttention> attn;
  std::shared_ptr<Linear> fc, fc_proj;
  std::shared_ptr<Dropout> drop;

 private:
  // The Linears the constructor made: while fc and fc_proj are still those,
  // forward runs them with the GELU between as one op (functional::gelu_mlp).
  // Weak, so that a replaced layer is freed and can never be mistaken for a
  // new one at its address.
  std::weak_ptr<Linear> built_fc_, built_fc_proj_;
};

}  // namespace snug::nn

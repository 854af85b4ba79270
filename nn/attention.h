// SPDX-License-Identifier: MIT
// Multi-head self-attention, the transformer block (pre- or post-LayerNorm)
// and a stack of blocks, TransformerEncoder. Masks follow PyTorch's
// convention (NOTE [ Attention masks ] in core/backend.h): true = masked out.
#pragma once
#include <snug/autograd/ops.h>
#include <snug/nn/layers.h>
#include <snug/nn/module.h>

namespace snug::nn {

// x (B, T, C) -> (B, T, C). One fused qkv projection Linear(C, 3C), heads of
// size C / heads, scaled dot-product attention, output projection Linear(C, C).
// Every form (causal or not, with masks or without) goes through
// functional::self_attention: one fused op that never builds the (B, heads,
// T, T) scores (with attention dropout in training, the composed ops).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embd, int64_t heads, bool causal = true, double dropout = 0.0, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // attn_mask (broadcast to (B, heads, T, T)): bool, true = masked out, or
  // floating, added to the scaled scores. key_padding_mask (B, T) bool: true
  // at padding (data::pad_collate's padding_mask). Either may be undefined.
  Tensor forward(const Tensor& x, const Tensor& attn_mask, const Tensor& key_padding_mask = Tensor());
  std::string repr() const override;
  std::shared_ptr<Linear> qkv, proj;
  // head_dim is embd / heads at construction. prune::compact can remove
  // heads; then heads * head_dim < embd (qkv: (3 heads head_dim, embd), proj:
  // (embd, heads head_dim)).
  int64_t embd, heads, head_dim;
  bool causal;
  double dropout_p;
};

struct TransformerBlockOptions {
  bool causal = true;
  double dropout = 0.0;  // after the attention and the MLP
  // Of the attention probabilities; negative: the same as dropout. Above 0 in
  // training, attention runs the composed ops (the fused kernel has no
  // dropout) and keeps its (B, heads, T, T) probabilities for backward.
  double attention_dropout = -1.0;
  int64_t mlp_ratio = 4;
  // Pre-LayerNorm (GPT-2: x + attn(ln_1(x))) or post-LayerNorm (BERT and the
  // original transformer: ln_1(x + attn(x))), as PyTorch's norm_first.
  bool norm_first = true;
  GeluApprox gelu = GeluApprox::none;  // erf (BERT's "gelu"), or tanh (GPT-2's "gelu_new")
  double layer_norm_eps = 1e-5;
};

// norm_first: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
// otherwise:  x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))
// mlp = Linear(C, ratio C), GELU, Linear(ratio C, C); dropout after attn and mlp.
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t embd, int64_t heads, bool causal = true, double dropout = 0.0, int64_t mlp_ratio = 4);
  TransformerBlock(int64_t embd, int64_t heads, const TransformerBlockOptions& opt);
  Tensor forward(const Tensor& x) override;
  // The masks as MultiheadAttention::forward takes them.
  Tensor forward(const Tensor& x, const Tensor& attn_mask, const Tensor& key_padding_mask = Tensor());
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<MultiheadAttention> attn;
  std::shared_ptr<Linear> fc, fc_proj;
  std::shared_ptr<Dropout> drop;
  TransformerBlockOptions options;

 private:
  Tensor mlp(const Tensor& u);
  // The Linears the constructor made: while fc and fc_proj are still those,
  // forward runs them with the GELU between as one op (functional::gelu_mlp).
  // Weak, so that a replaced layer is freed and can never be mistaken for a
  // new one at its address.
  std::weak_ptr<Linear> built_fc_, built_fc_proj_;
};

// layers TransformerBlocks (options.causal false by default: an encoder), then
// a final LayerNorm when final_norm (pre-LN stacks need one; BERT's post-LN
// stack does not). x (B, T, C) -> (B, T, C); the masks go to every block.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(int64_t layers, int64_t embd, int64_t heads, TransformerBlockOptions opt = encoder_options(),
                     bool final_norm = false);
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const Tensor& attn_mask, const Tensor& key_padding_mask = Tensor());
  // Not causal; otherwise TransformerBlockOptions' defaults.
  static TransformerBlockOptions encoder_options() {
    TransformerBlockOptions o;
    o.causal = false;
    return o;
  }
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

}  // namespace snug::nn

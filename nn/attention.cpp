// SPDX-License-Identifier: MIT
#include <snug/nn/attention.h>

#include <snug/nn/fused.h>

namespace snug::nn {

namespace F = functional;

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, bool c, double d, bool bias)
    : Module("MultiheadAttention"), embd(e), heads(h), head_dim(h > 0 ? e / h : 0), causal(c), dropout_p(d) {
  SNUG_CHECK(e > 0 && h > 0 && e % h == 0, ValueError, "MultiheadAttention: embd (", e,
             ") must be a positive multiple of heads (", h, ")");
  register_module("qkv", qkv, std::make_shared<Linear>(e, 3 * e, bias));
  register_module("proj", proj, std::make_shared<Linear>(e, e, bias));
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, Tensor()); }

Tensor MultiheadAttention::forward(const Tensor& x, const Tensor& mask) {
  SNUG_CHECK(x.dim() == 3 && x.size(2) == embd, ShapeError, "MultiheadAttention: expected input (B, T, ", embd,
             "), got ", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), D = head_dim;
  Tensor qkv_out = qkv->forward(x);  // (B, T, 3C)
  if (causal && !mask.defined())     // fused on the CPU (NOTE [ Fused causal attention ])
    return proj->forward(F::causal_self_attention(qkv_out, heads, dropout_p, is_training()));
  Tensor split = qkv_out.view({B, T, 3, heads, D}).permute({2, 0, 3, 1, 4});  // (3, B, H, T, D)
  Tensor q = split.select(0, 0), k = split.select(0, 1), v = split.select(0, 2);
  Tensor y = F::scaled_dot_product_attention(q, k, v, causal, mask, dropout_p, is_training());  // (B, H, T, D)
  y = y.transpose(1, 2).reshape({B, T, heads * D});  // (B, T, H D), = (B, T, C) unless heads were pruned
  return proj->forward(y);
}

std::string MultiheadAttention::repr() const {
  return str("MultiheadAttention(embd=", embd, ", heads=", heads, ", causal=", causal ? "true" : "false", ")");
}

TransformerBlock::TransformerBlock(int64_t e, int64_t h, bool causal, double d, int64_t ratio)
    : Module("TransformerBlock") {
  register_module("ln_1", ln_1, std::make_shared<LayerNorm>(e));
  register_module("attn", attn, std::make_shared<MultiheadAttention>(e, h, causal, d));
  register_module("ln_2", ln_2, std::make_shared<LayerNorm>(e));
  register_module("fc", fc, std::make_shared<Linear>(e, ratio * e));
  register_module("fc_proj", fc_proj, std::make_shared<Linear>(ratio * e, e));
  register_module("drop", drop, std::make_shared<Dropout>(d));
  built_fc_ = fc, built_fc_proj_ = fc_proj;
}

Tensor TransformerBlock::forward(const Tensor& x) {
  Tensor h = x + drop->forward(attn->forward(ln_1->forward(x)));
  // fc, GELU, fc_proj as one op (nn/fused.h: GELU in the GEMMs' stores), on
  // purpose: the block built them as plain Linears. A layer put in their place
  // (replace_module; quant/ converts them so) is no longer the one the block
  // built, and runs its own forward.
  const Tensor u = ln_2->forward(h);
  const bool built = built_fc_.lock() == fc && built_fc_proj_.lock() == fc_proj;
  Tensor m = built ? functional::gelu_mlp(u, fc->weight, fc->bias, fc_proj->weight, fc_proj->bias)
                   : fc_proj->forward(gelu(fc->forward(u)));
  return h + drop->forward(m);
}

}  // namespace snug::nn

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

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, Tensor(), Tensor()); }

Tensor MultiheadAttention::forward(const Tensor& x, const Tensor& attn_mask, const Tensor& key_padding_mask) {
  SNUG_CHECK(x.dim() == 3 && x.size(2) == embd, ShapeError, "MultiheadAttention: expected input (B, T, ", embd,
             "), got ", shape_str(x.shape()));
  Tensor qkv_out = qkv->forward(x);  // (B, T, 3 H D)
  // NOTE [ Fused attention ]: causal or not, masked or not, one op.
  Tensor y = F::self_attention(qkv_out, heads, causal, attn_mask, key_padding_mask, dropout_p, is_training());
  return proj->forward(y);  // (B, T, H D) -> (B, T, C); H D = C unless heads were pruned
}

std::string MultiheadAttention::repr() const {
  return str("MultiheadAttention(embd=", embd, ", heads=", heads, ", causal=", causal ? "true" : "false", ")");
}

namespace {
TransformerBlockOptions block_options(bool causal, double dropout, int64_t ratio) {
  TransformerBlockOptions o;
  o.causal = causal, o.dropout = dropout, o.mlp_ratio = ratio;
  return o;
}
}  // namespace

TransformerBlock::TransformerBlock(int64_t e, int64_t h, bool causal, double d, int64_t ratio)
    : TransformerBlock(e, h, block_options(causal, d, ratio)) {}

TransformerBlock::TransformerBlock(int64_t e, int64_t h, const TransformerBlockOptions& opt)
    : Module("TransformerBlock"), options(opt) {
  SNUG_CHECK(opt.mlp_ratio >= 1, ValueError, "TransformerBlock: mlp_ratio must be >= 1, got ", opt.mlp_ratio);
  const double attn_p = opt.attention_dropout < 0 ? opt.dropout : opt.attention_dropout;
  register_module("ln_1", ln_1, std::make_shared<LayerNorm>(e, opt.layer_norm_eps));
  register_module("attn", attn, std::make_shared<MultiheadAttention>(e, h, opt.causal, attn_p));
  register_module("ln_2", ln_2, std::make_shared<LayerNorm>(e, opt.layer_norm_eps));
  register_module("fc", fc, std::make_shared<Linear>(e, opt.mlp_ratio * e));
  register_module("fc_proj", fc_proj, std::make_shared<Linear>(opt.mlp_ratio * e, e));
  register_module("drop", drop, std::make_shared<Dropout>(opt.dropout));
  built_fc_ = fc, built_fc_proj_ = fc_proj;
}

// fc, GELU, fc_proj as one op (nn/fused.h: GELU in the GEMMs' stores), on
// purpose: the block built them as plain Linears. A layer put in their place
// (replace_module; quant/ converts them so) is no longer the one the block
// built, and runs its own forward.
Tensor TransformerBlock::mlp(const Tensor& u) {
  const bool built = built_fc_.lock() == fc && built_fc_proj_.lock() == fc_proj;
  return built ? functional::gelu_mlp(u, fc->weight, fc->bias, fc_proj->weight, fc_proj->bias, options.gelu)
               : fc_proj->forward(gelu(fc->forward(u), options.gelu));
}

Tensor TransformerBlock::forward(const Tensor& x) { return forward(x, Tensor(), Tensor()); }

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& attn_mask, const Tensor& key_padding_mask) {
  if (options.norm_first) {
    // h = x + attn(...) and ln_2(h) as one op (one kernel each way on a GPU).
    const Tensor a = drop->forward(attn->forward(ln_1->forward(x), attn_mask, key_padding_mask));
    const auto [h, u] = functional::add_layer_norm(x, a, ln_2->weight, ln_2->bias, ln_2->eps);
    return h + drop->forward(mlp(u));
  }
  Tensor h = ln_1->forward(x + drop->forward(attn->forward(x, attn_mask, key_padding_mask)));
  return ln_2->forward(h + drop->forward(mlp(h)));
}

TransformerEncoder::TransformerEncoder(int64_t n, int64_t e, int64_t h, TransformerBlockOptions opt, bool final_norm)
    : Module("TransformerEncoder") {
  SNUG_CHECK(n >= 1, ValueError, "TransformerEncoder: layers must be >= 1, got ", n);
  register_module("layers", layers, std::make_shared<ModuleList>());
  for (int64_t i = 0; i < n; ++i) layers->push_back(std::make_shared<TransformerBlock>(e, h, opt));
  if (final_norm) register_module("norm", norm, std::make_shared<LayerNorm>(e, opt.layer_norm_eps));
}

Tensor TransformerEncoder::forward(const Tensor& x) { return forward(x, Tensor(), Tensor()); }

Tensor TransformerEncoder::forward(const Tensor& x, const Tensor& attn_mask, const Tensor& key_padding_mask) {
  Tensor h = x;
  const bool masked = attn_mask.defined() || key_padding_mask.defined();
  for (size_t i = 0; i < layers->size(); ++i) {
    if (auto block = layers->at<TransformerBlock>(i)) {
      h = block->forward(h, attn_mask, key_padding_mask);
      continue;
    }
    // A layer the user put in a block's place runs its own forward, which takes no masks.
    SNUG_CHECK(!masked, ValueError, "TransformerEncoder: layer ", i, " is a ", (*layers)[i]->name(),
               ", not a TransformerBlock, and cannot take the attention masks");
    h = (*layers)[i]->forward(h);
  }
  return norm ? norm->forward(h) : h;
}

}  // namespace snug::nn

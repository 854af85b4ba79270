#include "nn/models/gpt.h"

#include <cmath>

#include "nn/init.h"

namespace snug::nn::models {

namespace F = functional;

GPT::GPT(GPTConfig c) : Module("GPT"), cfg(c) {
  SNUG_CHECK(c.vocab > 0 && c.block > 0 && c.layers > 0 && c.heads > 0 && c.embd > 0 && c.embd % c.heads == 0,
             ValueError, "GPT: invalid config (vocab=", c.vocab, ", block=", c.block, ", layers=", c.layers,
             ", heads=", c.heads, ", embd=", c.embd, "; embd must be a multiple of heads)");
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab, c.embd));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.block, c.embd));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
  blocks = register_module("blocks", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.layers; ++i)
    blocks->push_back(std::make_shared<TransformerBlock>(c.embd, c.heads, true, c.dropout));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.embd));
  // docs/workloads.md init: N(0, 0.02) for Linear and Embedding weights, zero
  // biases, and N(0, 0.02 / sqrt(2 * layers)) for the two output projections.
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  apply([&](Module& m) {
    if (auto* lin = dynamic_cast<Linear*>(&m)) {
      init::normal_(lin->weight, 0, 0.02);
      if (lin->bias.defined()) init::zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<Embedding*>(&m)) {
      init::normal_(emb->weight, 0, 0.02);
    }
  });
  for (auto& b : *blocks) {
    auto blk = std::dynamic_pointer_cast<TransformerBlock>(b);
    init::normal_(blk->attn->proj->weight, 0, proj_std);
    init::normal_(blk->fc_proj->weight, 0, proj_std);
  }
}

Tensor GPT::embed(const Tensor& tokens) {
  SNUG_CHECK(tokens.dim() == 2, ShapeError, "GPT: expected tokens (B, T), got ", shape_str(tokens.shape()));
  const int64_t T = tokens.size(1);
  SNUG_CHECK(T <= cfg.block, ShapeError, "GPT: sequence length ", T, " exceeds the block size ", cfg.block);
  Tensor pos = arange(T, TensorOptions(DType::i64, tokens.device()));
  Tensor x = wte->forward(tokens) + wpe->forward(pos);  // (B, T, C) + (T, C)
  return drop->forward(x);
}

Tensor GPT::logits(const Tensor& x) {
  return F::linear(ln_f->forward(x), wte->weight);  // tied head: (B, T, C) @ (V, C)^T
}

Tensor GPT::forward(const Tensor& tokens) {
  Tensor x = embed(tokens);
  x = run_chain(block_chain(), checkpointing, x);  // (B, T, C)
  return logits(x);
}

Tensor GPT::loss(const Tensor& tokens, const Tensor& targets) {
  Tensor out = forward(tokens);
  return F::cross_entropy(out.view({-1, cfg.vocab}), targets.reshape({-1}));
}

ChainModel GPT::chain(const Tensor& tokens, const Tensor& targets) {
  ChainModel m;
  m.prefix = [this, tokens] { return embed(tokens); };
  m.layers = block_chain();
  m.head = [this, targets](const Tensor& x) {
    return F::cross_entropy(logits(x).view({-1, cfg.vocab}), targets.reshape({-1}));
  };
  m.parameters = parameters();
  return m;
}

std::vector<std::shared_ptr<Module>> GPT::block_chain() const { return {blocks->begin(), blocks->end()}; }

std::string GPT::repr() const {
  return str("GPT(vocab=", cfg.vocab, ", block=", cfg.block, ", layers=", cfg.layers, ", heads=", cfg.heads,
             ", embd=", cfg.embd, ")");
}

}  // namespace snug::nn::models

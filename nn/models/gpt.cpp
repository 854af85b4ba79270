// SPDX-License-Identifier: MIT
#include <snug/nn/models/gpt.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <snug/nn/init.h>

namespace snug::nn::models {

namespace F = functional;

// Fix: one combined check used to report every invalid config (layers 0,
// block 0, ...) as "embd must be a multiple of heads".
void GPTConfig::validate() const {
  for (auto [field, v] :
       {std::pair{"vocab", vocab}, {"block", block}, {"layers", layers}, {"heads", heads}, {"embd", embd}})
    SNUG_CHECK(v >= 1, ValueError, "GPTConfig: ", field, " must be >= 1, got ", v);
  SNUG_CHECK(embd % heads == 0, ValueError, "GPTConfig: embd ", embd, " must be a multiple of heads ", heads,
             " (each head gets embd / heads channels)");
  SNUG_CHECK(dropout >= 0 && dropout < 1, ValueError, "GPTConfig: dropout must be in [0, 1), got ", dropout);
}

std::map<std::string, std::string> GPTConfig::to_metadata() const {
  char d[32];
  std::snprintf(d, sizeof d, "%.17g", dropout);  // round-trips every double
  return {{"gpt.vocab", std::to_string(vocab)},   {"gpt.block", std::to_string(block)},
          {"gpt.layers", std::to_string(layers)}, {"gpt.heads", std::to_string(heads)},
          {"gpt.embd", std::to_string(embd)},     {"gpt.dropout", d}};
}

std::optional<GPTConfig> GPTConfig::from_metadata(const std::map<std::string, std::string>& md,
                                                  const std::string& source) {
  auto any = md.lower_bound("gpt.");
  if (any == md.end() || any->first.rfind("gpt.", 0) != 0) return std::nullopt;
  GPTConfig c;
  for (auto [key, field] : {std::pair{"gpt.vocab", &c.vocab},
                            {"gpt.block", &c.block},
                            {"gpt.layers", &c.layers},
                            {"gpt.heads", &c.heads},
                            {"gpt.embd", &c.embd}}) {
    auto it = md.find(key);
    SNUG_CHECK(it != md.end(), IOError, source, ": the model configuration has no \"", key, "\"");
    const std::string& s = it->second;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    SNUG_CHECK(!s.empty() && end && *end == 0 && errno == 0, IOError, source, ": metadata \"", key,
               "\" is not an integer: \"", s, "\"");
    *field = v;
  }
  if (auto it = md.find("gpt.dropout"); it != md.end()) {
    const std::string& s = it->second;
    char* end = nullptr;
    c.dropout = std::strtod(s.c_str(), &end);
    SNUG_CHECK(!s.empty() && end && *end == 0, IOError, source, ": metadata \"gpt.dropout\" is not a number: \"", s,
               "\"");
  }
  try {
    c.validate();
  } catch (const ValueError& e) {
    throw IOError(str(source, ": the model configuration it records is invalid: ", e.what()));
  }
  return c;
}

GPT::GPT(GPTConfig c) : Module("GPT"), cfg(c) {
  c.validate();
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

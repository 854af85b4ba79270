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
  SNUG_CHECK(mlp_ratio >= 1, ValueError, "GPTConfig: mlp_ratio must be >= 1, got ", mlp_ratio);
  SNUG_CHECK(layer_norm_eps > 0 && std::isfinite(layer_norm_eps), ValueError,
             "GPTConfig: layer_norm_eps must be a finite number > 0, got ", layer_norm_eps);
}

namespace {
std::string exact(double v) {
  char d[32];
  std::snprintf(d, sizeof d, "%.17g", v);  // round-trips every double
  return d;
}
}  // namespace

std::map<std::string, std::string> GPTConfig::to_metadata() const {
  return {{"gpt.vocab", std::to_string(vocab)},
          {"gpt.block", std::to_string(block)},
          {"gpt.layers", std::to_string(layers)},
          {"gpt.heads", std::to_string(heads)},
          {"gpt.embd", std::to_string(embd)},
          {"gpt.dropout", exact(dropout)},
          {"gpt.gelu", gelu == GeluApprox::tanh ? "tanh" : "none"},
          {"gpt.mlp_ratio", std::to_string(mlp_ratio)},
          {"gpt.layer_norm_eps", exact(layer_norm_eps)}};
}

std::optional<GPTConfig> GPTConfig::from_metadata(const std::map<std::string, std::string>& md,
                                                  const std::string& source) {
  auto any = md.lower_bound("gpt.");
  if (any == md.end() || any->first.rfind("gpt.", 0) != 0) return std::nullopt;
  GPTConfig c;
  auto integer = [&](const std::string& key, const std::string& s) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    SNUG_CHECK(!s.empty() && end && *end == 0 && errno == 0, IOError, source, ": metadata \"", key,
               "\" is not an integer: \"", s, "\"");
    return static_cast<int64_t>(v);
  };
  for (auto [key, field] : {std::pair{"gpt.vocab", &c.vocab},
                            {"gpt.block", &c.block},
                            {"gpt.layers", &c.layers},
                            {"gpt.heads", &c.heads},
                            {"gpt.embd", &c.embd}}) {
    auto it = md.find(key);
    SNUG_CHECK(it != md.end(), IOError, source, ": the model configuration has no \"", key, "\"");
    *field = integer(key, it->second);
  }
  // Recorded later: a file without them has the defaults.
  for (auto [key, field] : {std::pair{"gpt.dropout", &c.dropout}, {"gpt.layer_norm_eps", &c.layer_norm_eps}}) {
    auto it = md.find(key);
    if (it == md.end()) continue;
    const std::string& s = it->second;
    char* end = nullptr;
    *field = std::strtod(s.c_str(), &end);
    SNUG_CHECK(!s.empty() && end && *end == 0, IOError, source, ": metadata \"", key, "\" is not a number: \"", s,
               "\"");
  }
  if (auto it = md.find("gpt.mlp_ratio"); it != md.end()) c.mlp_ratio = integer(it->first, it->second);
  if (auto it = md.find("gpt.gelu"); it != md.end()) {
    SNUG_CHECK(it->second == "none" || it->second == "tanh", IOError, source,
               ": metadata \"gpt.gelu\" must be \"none\" or \"tanh\", got \"", it->second, "\"");
    c.gelu = it->second == "tanh" ? GeluApprox::tanh : GeluApprox::none;
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
  for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(std::make_shared<TransformerBlock>(c.embd, c.heads, block_options()));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.embd, c.layer_norm_eps));
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

TransformerBlockOptions GPT::block_options() const {
  TransformerBlockOptions o;  // pre-LN and causal: GPT-2's block
  o.causal = true;
  o.norm_first = true;
  o.dropout = cfg.dropout;
  o.mlp_ratio = cfg.mlp_ratio;
  o.gelu = cfg.gelu;
  o.layer_norm_eps = cfg.layer_norm_eps;
  return o;
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
  // W-GPT's settings are left out, so its repr is what it always was.
  std::string extra;
  if (cfg.gelu == GeluApprox::tanh) extra += ", gelu=tanh";
  if (cfg.mlp_ratio != 4) extra += str(", mlp_ratio=", cfg.mlp_ratio);
  if (cfg.layer_norm_eps != 1e-5) extra += str(", layer_norm_eps=", cfg.layer_norm_eps);
  return str("GPT(vocab=", cfg.vocab, ", block=", cfg.block, ", layers=", cfg.layers, ", heads=", cfg.heads,
             ", embd=", cfg.embd, extra, ")");
}

}  // namespace snug::nn::models

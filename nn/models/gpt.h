// SPDX-License-Identifier: MIT
// GPT: the W-GPT decoder-only transformer of docs/workloads.md, any size.
//   tokens (B, T) i64 -> logits (B, T, vocab)
#pragma once
#include <map>
#include <optional>
#include <string>

#include <snug/nn/attention.h>
#include <snug/nn/checkpoint_sequential.h>
#include <snug/nn/layers.h>
#include <snug/nn/module.h>
#include <snug/nn/planner.h>

namespace snug::nn::models {

struct GPTConfig {
  int64_t vocab = 65, block = 128, layers = 4, heads = 4, embd = 128;
  double dropout = 0.0;
  // What GPT-2 checkpoints need (nn/models/hf.h, docs/hf.md); the defaults are
  // W-GPT's. gelu: erf (none) or tanh (GPT-2's "gelu_new"); the MLP's hidden
  // width is mlp_ratio * embd (GPT-2's n_inner); eps of every LayerNorm.
  GeluApprox gelu = GeluApprox::none;
  int64_t mlp_ratio = 4;
  double layer_norm_eps = 1e-5;

  // Throws ValueError naming the first invalid field and its value: every
  // size >= 1 (mlp_ratio too), embd a multiple of heads, dropout in [0, 1),
  // layer_norm_eps > 0. GPT's constructor calls it.
  void validate() const;
  // The configuration as checkpoint metadata ("gpt.vocab", "gpt.block",
  // "gpt.layers", "gpt.heads", "gpt.embd", "gpt.dropout", "gpt.gelu" ("none"
  // or "tanh"), "gpt.mlp_ratio", "gpt.layer_norm_eps"; decimal text, doubles
  // to 17 digits), so a program can rebuild the model from the file alone
  // (docs/nn.md, training-state files).
  std::map<std::string, std::string> to_metadata() const;
  // The inverse: nullopt when `md` holds no "gpt." key (a file written
  // without a configuration); an IOError naming `source` and the key when a
  // size is missing, a value is malformed or the configuration is invalid.
  // Keys added after the first files were written read as their defaults
  // when missing: "gpt.dropout" 0, "gpt.gelu" none, "gpt.mlp_ratio" 4,
  // "gpt.layer_norm_eps" 1e-5.
  static std::optional<GPTConfig> from_metadata(const std::map<std::string, std::string>& md,
                                                const std::string& source);
};

class GPT : public Module {
 public:
  explicit GPT(GPTConfig cfg);
  Tensor forward(const Tensor& tokens) override;  // (B, T) -> (B, T, vocab)
  // Mean cross-entropy of next-token prediction: logits (B, T, V) vs targets (B, T).
  Tensor loss(const Tensor& tokens, const Tensor& targets);
  std::string repr() const override;
  // The pieces of forward: tokens (B, T) -> embed -> (B, T, C) -> blocks ->
  // (B, T, C) -> logits (B, T, vocab).
  Tensor embed(const Tensor& tokens);
  Tensor logits(const Tensor& x);
  // The options every block is built with (from cfg).
  TransformerBlockOptions block_options() const;
  // The blocks as a chain, for the planner and checkpointing.
  std::vector<std::shared_ptr<Module>> block_chain() const;
  // The training step as prefix (embed) -> blocks -> head (logits + loss),
  // for profile_chain. It refers to this model: do not let it outlive it.
  ChainModel chain(const Tensor& tokens, const Tensor& targets);
  GPTConfig cfg;
  // How forward runs the blocks: empty (default) keeps every activation;
  // sqrt_plan(cfg.layers) or a planner's plan checkpoints segments of blocks.
  ChainPlan checkpointing;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<LayerNorm> ln_f;
  // The LM head shares wte's weight (tied), so it has no parameter of its own.
};

}  // namespace snug::nn::models

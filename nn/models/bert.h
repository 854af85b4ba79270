// SPDX-License-Identifier: MIT
// BERT: a post-LayerNorm transformer encoder with token, position and segment
// embeddings, a masked-LM head tied to the token embeddings, and an optional
// sequence-classification head (Hugging Face's BertForMaskedLM and
// BertForSequenceClassification; nn/models/hf.h loads their checkpoints).
//
//   tokens (B, T) i64 [, token_types (B, T) i64] [, padding_mask (B, T) bool]
//     -> encode -> (B, T, hidden) -> mlm_logits -> (B, T, vocab)
//                                 -> classify   -> (B, labels)
//
// padding_mask is data::pad_collate's (true at padding, NOTE [ Attention
// masks ] in core/backend.h): padded keys are hidden from every query.
#pragma once
#include <map>
#include <optional>
#include <string>

#include <snug/nn/attention.h>
#include <snug/nn/layers.h>
#include <snug/nn/module.h>

namespace snug::nn::models {

struct BertConfig {
  int64_t vocab = 30522, hidden = 128, layers = 2, heads = 2, intermediate = 512;
  int64_t max_position = 512, type_vocab = 2;
  double dropout = 0.1;            // Hugging Face's hidden_dropout_prob
  double attention_dropout = 0.1;  // attention_probs_dropout_prob
  double layer_norm_eps = 1e-12;
  GeluApprox gelu = GeluApprox::none;  // hidden_act "gelu" (erf); "gelu_new" is tanh
  int64_t labels = 0;                  // > 0: a classification head with this many classes

  // Throws ValueError naming the first invalid field.
  void validate() const;
  // As checkpoint metadata ("bert.vocab", ...), and back (nullopt without "bert." keys).
  std::map<std::string, std::string> to_metadata() const;
  static std::optional<BertConfig> from_metadata(const std::map<std::string, std::string>& md,
                                                 const std::string& source);
};

class Bert : public Module {
 public:
  explicit Bert(BertConfig cfg);
  // tokens (B, T) -> mlm_logits(encode(tokens)).
  Tensor forward(const Tensor& tokens) override;
  // (B, T, hidden): embeddings (token + position + segment, LayerNorm,
  // dropout), then the encoder. token_types and padding_mask may be undefined
  // (segment 0 everywhere; no padding).
  Tensor encode(const Tensor& tokens, const Tensor& token_types = Tensor(), const Tensor& padding_mask = Tensor());
  // The masked-LM head: dense, GELU, LayerNorm, then the tied decoder
  // (hidden (B, T, C) @ word_embeddings^T + mlm_bias) -> (B, T, vocab).
  Tensor mlm_logits(const Tensor& hidden);
  // Mean cross-entropy of the masked-LM logits against labels (B, T) i64,
  // -100 where a position is not predicted (Hugging Face's convention).
  Tensor mlm_loss(const Tensor& tokens, const Tensor& labels, const Tensor& token_types = Tensor(),
                  const Tensor& padding_mask = Tensor());
  // The classification head (cfg.labels > 0): tanh(pooler(h[:, 0])), dropout,
  // classifier -> (B, labels).
  Tensor classify(const Tensor& tokens, const Tensor& token_types = Tensor(), const Tensor& padding_mask = Tensor());
  std::string repr() const override;

  BertConfig cfg;
  std::shared_ptr<Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<LayerNorm> embeddings_norm;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<Linear> mlm_dense;
  std::shared_ptr<LayerNorm> mlm_norm;
  Tensor mlm_bias;                                  // (vocab)
  std::shared_ptr<Linear> pooler, classifier;       // null when cfg.labels == 0
};

}  // namespace snug::nn::models

// SPDX-License-Identifier: MIT
#include <snug/nn/models/bert.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <snug/autograd/autocast.h>
#include <snug/nn/functional.h>
#include <snug/nn/init.h>

namespace snug::nn::models {

namespace F = functional;

void BertConfig::validate() const {
  for (auto [field, v] : {std::pair{"vocab", vocab},
                          {"hidden", hidden},
                          {"layers", layers},
                          {"heads", heads},
                          {"intermediate", intermediate},
                          {"max_position", max_position},
                          {"type_vocab", type_vocab}})
    SNUG_CHECK(v >= 1, ValueError, "BertConfig: ", field, " must be >= 1, got ", v);
  SNUG_CHECK(hidden % heads == 0, ValueError, "BertConfig: hidden ", hidden, " must be a multiple of heads ", heads);
  // The encoder block's MLP is Linear(C, ratio C): an integer ratio.
  SNUG_CHECK(intermediate % hidden == 0, ValueError, "BertConfig: intermediate ", intermediate,
             " must be a multiple of hidden ", hidden);
  SNUG_CHECK(labels >= 0, ValueError, "BertConfig: labels must be >= 0, got ", labels);
  for (auto [field, p] : {std::pair{"dropout", dropout}, {"attention_dropout", attention_dropout}})
    SNUG_CHECK(p >= 0 && p < 1, ValueError, "BertConfig: ", field, " must be in [0, 1), got ", p);
  SNUG_CHECK(layer_norm_eps > 0, ValueError, "BertConfig: layer_norm_eps must be > 0, got ", layer_norm_eps);
}

namespace {
std::string exact(double v) {  // round-trips every double
  char d[32];
  std::snprintf(d, sizeof d, "%.17g", v);
  return d;
}
}  // namespace

std::map<std::string, std::string> BertConfig::to_metadata() const {
  return {{"bert.vocab", std::to_string(vocab)},
          {"bert.hidden", std::to_string(hidden)},
          {"bert.layers", std::to_string(layers)},
          {"bert.heads", std::to_string(heads)},
          {"bert.intermediate", std::to_string(intermediate)},
          {"bert.max_position", std::to_string(max_position)},
          {"bert.type_vocab", std::to_string(type_vocab)},
          {"bert.labels", std::to_string(labels)},
          {"bert.dropout", exact(dropout)},
          {"bert.attention_dropout", exact(attention_dropout)},
          {"bert.layer_norm_eps", exact(layer_norm_eps)},
          {"bert.gelu", gelu == GeluApprox::tanh ? "tanh" : "erf"}};
}

std::optional<BertConfig> BertConfig::from_metadata(const std::map<std::string, std::string>& md,
                                                    const std::string& source) {
  auto any = md.lower_bound("bert.");
  if (any == md.end() || any->first.rfind("bert.", 0) != 0) return std::nullopt;
  auto text = [&](const char* key) -> const std::string& {
    auto it = md.find(key);
    SNUG_CHECK(it != md.end(), IOError, source, ": the model configuration has no \"", key, "\"");
    return it->second;
  };
  BertConfig c;
  for (auto [key, field] : {std::pair{"bert.vocab", &c.vocab},
                            {"bert.hidden", &c.hidden},
                            {"bert.layers", &c.layers},
                            {"bert.heads", &c.heads},
                            {"bert.intermediate", &c.intermediate},
                            {"bert.max_position", &c.max_position},
                            {"bert.type_vocab", &c.type_vocab},
                            {"bert.labels", &c.labels}}) {
    const std::string& s = text(key);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    SNUG_CHECK(!s.empty() && end && *end == 0 && errno == 0, IOError, source, ": metadata \"", key,
               "\" is not an integer: \"", s, "\"");
    *field = v;
  }
  for (auto [key, field] : {std::pair{"bert.dropout", &c.dropout},
                            {"bert.attention_dropout", &c.attention_dropout},
                            {"bert.layer_norm_eps", &c.layer_norm_eps}}) {
    const std::string& s = text(key);
    char* end = nullptr;
    *field = std::strtod(s.c_str(), &end);
    SNUG_CHECK(!s.empty() && end && *end == 0, IOError, source, ": metadata \"", key, "\" is not a number: \"", s,
               "\"");
  }
  const std::string& g = text("bert.gelu");
  SNUG_CHECK(g == "erf" || g == "tanh", IOError, source, ": metadata \"bert.gelu\" must be erf or tanh, got \"", g,
             "\"");
  c.gelu = g == "tanh" ? GeluApprox::tanh : GeluApprox::none;
  try {
    c.validate();
  } catch (const ValueError& e) {
    throw IOError(str(source, ": the model configuration it records is invalid: ", e.what()));
  }
  return c;
}

Bert::Bert(BertConfig c) : Module("Bert"), cfg(c) {
  c.validate();
  register_module("word_embeddings", word_embeddings, std::make_shared<Embedding>(c.vocab, c.hidden));
  register_module("position_embeddings", position_embeddings, std::make_shared<Embedding>(c.max_position, c.hidden));
  register_module("token_type_embeddings", token_type_embeddings, std::make_shared<Embedding>(c.type_vocab, c.hidden));
  register_module("embeddings_norm", embeddings_norm, std::make_shared<LayerNorm>(c.hidden, c.layer_norm_eps));
  register_module("drop", drop, std::make_shared<Dropout>(c.dropout));
  TransformerBlockOptions o;
  o.causal = false, o.norm_first = false;  // BERT is post-LayerNorm
  o.dropout = c.dropout, o.attention_dropout = c.attention_dropout;
  o.mlp_ratio = c.intermediate / c.hidden, o.gelu = c.gelu, o.layer_norm_eps = c.layer_norm_eps;
  register_module("encoder", encoder, std::make_shared<TransformerEncoder>(c.layers, c.hidden, c.heads, o));
  register_module("mlm_dense", mlm_dense, std::make_shared<Linear>(c.hidden, c.hidden));
  register_module("mlm_norm", mlm_norm, std::make_shared<LayerNorm>(c.hidden, c.layer_norm_eps));
  mlm_bias = register_parameter("mlm_bias", zeros({c.vocab}));
  if (c.labels > 0) {
    register_module("pooler", pooler, std::make_shared<Linear>(c.hidden, c.hidden));
    register_module("classifier", classifier, std::make_shared<Linear>(c.hidden, c.labels));
  }
  // Hugging Face's BERT init: N(0, 0.02) for Linear and Embedding weights,
  // zero biases; LayerNorm ones and zeros (its constructor's).
  apply([&](Module& m) {
    if (auto* lin = dynamic_cast<Linear*>(&m)) {
      init::normal_(lin->weight, 0, 0.02);
      if (lin->bias.defined()) init::zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<Embedding*>(&m)) {
      init::normal_(emb->weight, 0, 0.02);
    }
  });
}

Tensor Bert::encode(const Tensor& tokens, const Tensor& token_types, const Tensor& padding_mask) {
  SNUG_CHECK(tokens.dim() == 2, ShapeError, "Bert: expected tokens (B, T), got ", shape_str(tokens.shape()));
  const int64_t T = tokens.size(1);
  SNUG_CHECK(T <= cfg.max_position, ShapeError, "Bert: sequence length ", T, " exceeds max_position ",
             cfg.max_position);
  if (token_types.defined())
    SNUG_CHECK(token_types.shape() == tokens.shape(), ShapeError, "Bert: token_types ",
               shape_str(token_types.shape()), " must have the tokens' shape ", shape_str(tokens.shape()));
  const Tensor pos = arange(T, TensorOptions(DType::i64, tokens.device()));
  Tensor x = word_embeddings->forward(tokens) + position_embeddings->forward(pos);  // (B, T, C) + (T, C)
  // Segment 0 everywhere without token_types: its one row, broadcast, in the
  // embeddings' dtype (lowered under autocast like the lookups: an f32 row
  // would promote the sum, and with it the whole residual stream, to f32).
  x = token_types.defined() ? x + token_type_embeddings->forward(token_types)
                            : x + autocast::lower(token_type_embeddings->weight.narrow(0, 0, 1));
  x = drop->forward(embeddings_norm->forward(x));
  return encoder->forward(x, Tensor(), padding_mask);  // (B, T, C)
}

Tensor Bert::mlm_logits(const Tensor& hidden) {
  const Tensor h = mlm_norm->forward(gelu(mlm_dense->forward(hidden), cfg.gelu));
  return F::linear(h, word_embeddings->weight, mlm_bias);  // tied decoder: (B, T, C) @ (V, C)^T + (V)
}

Tensor Bert::forward(const Tensor& tokens) { return mlm_logits(encode(tokens)); }

Tensor Bert::mlm_loss(const Tensor& tokens, const Tensor& labels, const Tensor& token_types,
                      const Tensor& padding_mask) {
  SNUG_CHECK(labels.shape() == tokens.shape(), ShapeError, "Bert::mlm_loss: labels ", shape_str(labels.shape()),
             " must have the tokens' shape ", shape_str(tokens.shape()));
  const Tensor logits = mlm_logits(encode(tokens, token_types, padding_mask));
  return F::cross_entropy(logits.view({-1, cfg.vocab}), labels.reshape({-1}), -100);
}

Tensor Bert::classify(const Tensor& tokens, const Tensor& token_types, const Tensor& padding_mask) {
  SNUG_CHECK(classifier != nullptr, ValueError, "Bert::classify: the model has no classification head (labels 0)");
  const Tensor h = encode(tokens, token_types, padding_mask);  // (B, T, C)
  const Tensor pooled = tanh(pooler->forward(h.select(1, 0)));  // the first token's state, (B, C)
  return classifier->forward(drop->forward(pooled));           // (B, labels)
}

std::string Bert::repr() const {
  return str("Bert(vocab=", cfg.vocab, ", hidden=", cfg.hidden, ", layers=", cfg.layers, ", heads=", cfg.heads,
             ", intermediate=", cfg.intermediate, ", labels=", cfg.labels, ")");
}

}  // namespace snug::nn::models

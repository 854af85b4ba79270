// SPDX-License-Identifier: MIT
// load_hf_bert (nn/models/hf.h): a Hugging Face BertForMaskedLM, BertModel or
// BertForSequenceClassification directory into nn::models::Bert. The name
// mapping is docs/hf.md's BERT table; q, k and v's three Linears become the
// one packed qkv projection of snug's MultiheadAttention (rows q | k | v, each
// (heads, head_dim) in order: the split Hugging Face's BertSelfAttention uses).
#include <snug/nn/models/hf.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_ops.h>
#include <snug/core/safetensors.h>

namespace snug::nn::models {

namespace {

BertConfig bert_config(const HfConfig& c) {
  BertConfig b;
  b.vocab = c.integer("vocab_size");
  b.hidden = c.integer("hidden_size");
  b.layers = c.integer("num_hidden_layers");
  b.heads = c.integer("num_attention_heads");
  b.intermediate = c.integer("intermediate_size");
  b.max_position = c.integer("max_position_embeddings");
  b.type_vocab = c.has("type_vocab_size") ? c.integer("type_vocab_size") : 2;
  b.dropout = c.number("hidden_dropout_prob", 0.1);
  b.attention_dropout = c.number("attention_probs_dropout_prob", 0.1);
  b.layer_norm_eps = c.number("layer_norm_eps", 1e-12);
  const std::string act = c.text("hidden_act", "gelu");
  SNUG_CHECK(act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh", ValueError, c.path(),
             ": hidden_act \"", act, "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh)");
  b.gelu = act == "gelu" ? GeluApprox::none : GeluApprox::tanh;
  const std::string pos = c.text("position_embedding_type", "absolute");
  SNUG_CHECK(pos == "absolute", ValueError, c.path(), ": position_embedding_type \"", pos,
             "\" is not supported (absolute only)");
  SNUG_CHECK(!c.flag("is_decoder", false), ValueError, c.path(),
             ": a decoder BERT (is_decoder) is not supported");
  // A classification head when the architecture says so; num_labels or id2label give its size.
  if (c.has("architectures") && c.raw("architectures").find("ForSequenceClassification") != std::string::npos) {
    if (c.has("num_labels")) {
      b.labels = c.integer("num_labels");
    } else {
      const std::string& m = c.raw("id2label");  // a JSON object: count its keys
      int64_t n = 0;
      bool in_str = false;
      for (size_t i = 0; i < m.size(); ++i) {
        if (m[i] == '\\') ++i;
        else if (m[i] == '"') in_str = !in_str;
        else if (!in_str && m[i] == ':') ++n;
      }
      b.labels = n;
    }
  }
  b.validate();
  return b;
}

// The file's tensors by name, each taken once; what remains at the end was not used.
struct Tensors {
  std::map<std::string, Tensor> left;
  std::string file, prefix;
  Tensor take(const std::string& name, const Shape& shape) {
    std::string key = prefix + name;
    auto it = left.find(key);
    if (it == left.end()) it = left.find(name);  // heads (cls., classifier.) are outside the "bert." prefix
    SNUG_CHECK(it != left.end(), ValueError, file, ": no tensor \"", key, "\" (a ", shape_str(shape),
               " parameter of the configured model)");
    Tensor t = it->second;
    SNUG_CHECK(t.shape() == shape, ValueError, file, ": tensor \"", it->first, "\" is ", shape_str(t.shape()),
               ", the configuration needs ", shape_str(shape));
    left.erase(it);
    return t;
  }
  bool has(const std::string& name) const { return left.count(prefix + name) || left.count(name); }
};

void set(const Tensor& dst, const Tensor& src) { raw::copy_(dst, src); }

}  // namespace

std::shared_ptr<Bert> load_hf_bert(const std::string& dir) {
  const HfConfig c(dir + "/config.json");
  const BertConfig cfg = bert_config(c);
  auto model = std::make_shared<Bert>(cfg);
  Tensors ts;
  ts.file = dir + "/model.safetensors";
  for (auto& [name, t] : load_safetensors(ts.file).tensors) ts.left.emplace(name, t);
  // BertForMaskedLM and ...ForSequenceClassification keep the encoder under "bert."; BertModel at the top.
  for (auto& [name, t] : ts.left)
    if (name.rfind("bert.", 0) == 0) ts.prefix = "bert.";
  const int64_t C = cfg.hidden, I = cfg.intermediate, V = cfg.vocab;
  NoGradGuard no_grad;
  auto linear = [&](Linear& lin, const std::string& name, int64_t out, int64_t in) {
    set(lin.weight, ts.take(name + ".weight", {out, in}));
    set(lin.bias, ts.take(name + ".bias", {out}));
  };
  auto norm = [&](LayerNorm& ln, const std::string& name) {
    set(ln.weight, ts.take(name + ".weight", {C}));
    set(ln.bias, ts.take(name + ".bias", {C}));
  };
  set(model->word_embeddings->weight, ts.take("embeddings.word_embeddings.weight", {V, C}));
  set(model->position_embeddings->weight, ts.take("embeddings.position_embeddings.weight", {cfg.max_position, C}));
  set(model->token_type_embeddings->weight, ts.take("embeddings.token_type_embeddings.weight", {cfg.type_vocab, C}));
  norm(*model->embeddings_norm, "embeddings.LayerNorm");
  for (int64_t i = 0; i < cfg.layers; ++i) {
    auto blk = model->encoder->layers->at<TransformerBlock>(size_t(i));
    const std::string l = str("encoder.layer.", i, ".");
    std::vector<Tensor> w, b;
    for (const char* part : {"query", "key", "value"}) {
      w.push_back(ts.take(l + "attention.self." + part + ".weight", {C, C}));
      b.push_back(ts.take(l + "attention.self." + part + ".bias", {C}));
    }
    set(blk->attn->qkv->weight, raw::cat(w, 0));  // (3C, C): q | k | v
    set(blk->attn->qkv->bias, raw::cat(b, 0));
    linear(*blk->attn->proj, l + "attention.output.dense", C, C);
    norm(*blk->ln_1, l + "attention.output.LayerNorm");
    linear(*blk->fc, l + "intermediate.dense", I, C);
    linear(*blk->fc_proj, l + "output.dense", C, I);
    norm(*blk->ln_2, l + "output.LayerNorm");
  }
  // The masked-LM head (BertForMaskedLM); a model without one keeps its initial head.
  if (ts.has("cls.predictions.transform.dense.weight")) {
    linear(*model->mlm_dense, "cls.predictions.transform.dense", C, C);
    norm(*model->mlm_norm, "cls.predictions.transform.LayerNorm");
    set(model->mlm_bias, ts.take("cls.predictions.bias", {V}));
    // The decoder is tied to the word embeddings: a stored copy must be that.
    for (const char* tied : {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}) {
      if (!ts.has(tied)) continue;
      const bool weight = std::string(tied).find("weight") != std::string::npos;
      const Tensor t = ts.take(tied, weight ? Shape{V, C} : Shape{V});
      const Tensor ref = weight ? model->word_embeddings->weight : model->mlm_bias;
      const double diff = raw::reduce(ReduceOp::max,
                                      raw::unary(UnaryOp::abs, raw::binary(BinaryOp::sub, raw::to_dtype(t, ref.dtype()), ref)),
                                      {}, false)
                              .item<double>();
      SNUG_CHECK(diff == 0.0, ValueError, ts.file, ": \"", tied, "\" differs from the ",
                 weight ? "word embeddings" : "prediction bias", " it must be tied to (snug's BERT ties them)");
    }
  }
  if (cfg.labels > 0) {
    linear(*model->pooler, "pooler.dense", C, C);
    linear(*model->classifier, "classifier", cfg.labels, C);
  } else if (ts.has("pooler.dense.weight")) {  // BertModel's pooler, unused without a classification head
    ts.take("pooler.dense.weight", {C, C});
    ts.take("pooler.dense.bias", {C});
  }
  ts.left.erase(ts.prefix + "embeddings.position_ids");  // a buffer (arange), not a parameter
  if (!ts.left.empty()) {
    std::string names;
    for (auto& [n, t] : ts.left) names += (names.empty() ? "" : ", ") + n;
    throw ValueError(str(ts.file, ": tensors the BERT mapping does not use: ", names));
  }
  model->eval();
  return model;
}

void save_hf_bert(const Bert& m, const std::string& dir) {
  const BertConfig& c = m.cfg;
  const int64_t C = c.hidden;
  TensorMap t;
  auto add = [&](const std::string& name, const Tensor& x) { t.push_back({name, x.detach()}); };
  auto linear = [&](const std::string& name, const Linear& l) {
    add(name + ".weight", l.weight);
    add(name + ".bias", l.bias);
  };
  auto norm = [&](const std::string& name, const LayerNorm& l) {
    add(name + ".weight", l.weight);
    add(name + ".bias", l.bias);
  };
  add("bert.embeddings.word_embeddings.weight", m.word_embeddings->weight);
  add("bert.embeddings.position_embeddings.weight", m.position_embeddings->weight);
  add("bert.embeddings.token_type_embeddings.weight", m.token_type_embeddings->weight);
  norm("bert.embeddings.LayerNorm", *m.embeddings_norm);
  for (int64_t i = 0; i < c.layers; ++i) {
    auto blk = m.encoder->layers->at<TransformerBlock>(size_t(i));
    SNUG_CHECK(blk && blk->attn->heads * blk->attn->head_dim == C && blk->fc->weight.size(0) == c.intermediate,
               ValueError, "save_hf_bert: layer ", i,
               " is not the configured block (pruned or replaced layers have no Hugging Face form)");
    const std::string l = str("bert.encoder.layer.", i, ".");
    const char* parts[] = {"query", "key", "value"};
    for (int k = 0; k < 3; ++k) {
      add(l + "attention.self." + parts[k] + ".weight", blk->attn->qkv->weight.narrow(0, k * C, C).contiguous());
      add(l + "attention.self." + parts[k] + ".bias", blk->attn->qkv->bias.narrow(0, k * C, C).contiguous());
    }
    linear(l + "attention.output.dense", *blk->attn->proj);
    norm(l + "attention.output.LayerNorm", *blk->ln_1);
    linear(l + "intermediate.dense", *blk->fc);
    linear(l + "output.dense", *blk->fc_proj);
    norm(l + "output.LayerNorm", *blk->ln_2);
  }
  linear("cls.predictions.transform.dense", *m.mlm_dense);
  norm("cls.predictions.transform.LayerNorm", *m.mlm_norm);
  add("cls.predictions.bias", m.mlm_bias);
  if (c.labels > 0) {
    linear("bert.pooler.dense", *m.pooler);
    linear("classifier", *m.classifier);
  }
  std::filesystem::create_directories(dir);
  char eps[32], hd[32], ad[32];
  std::snprintf(eps, sizeof eps, "%.17g", c.layer_norm_eps);
  std::snprintf(hd, sizeof hd, "%.17g", c.dropout);
  std::snprintf(ad, sizeof ad, "%.17g", c.attention_dropout);
  const std::string config = str(
      "{\n  \"architectures\": [\"", c.labels > 0 ? "BertForSequenceClassification" : "BertForMaskedLM",
      "\"],\n  \"model_type\": \"bert\",\n  \"vocab_size\": ", c.vocab, ",\n  \"hidden_size\": ", c.hidden,
      ",\n  \"num_hidden_layers\": ", c.layers, ",\n  \"num_attention_heads\": ", c.heads,
      ",\n  \"intermediate_size\": ", c.intermediate, ",\n  \"max_position_embeddings\": ", c.max_position,
      ",\n  \"type_vocab_size\": ", c.type_vocab, ",\n  \"hidden_act\": \"", c.gelu == GeluApprox::tanh ? "gelu_new" : "gelu",
      "\",\n  \"layer_norm_eps\": ", eps, ",\n  \"hidden_dropout_prob\": ", hd,
      ",\n  \"attention_probs_dropout_prob\": ", ad, ",\n  \"position_embedding_type\": \"absolute\",\n  \"pad_token_id\": 0",
      c.labels > 0 ? str(",\n  \"num_labels\": ", c.labels) : std::string(), ",\n  \"tie_word_embeddings\": true\n}\n");
  const std::string cpath = dir + "/config.json";
  {
    std::ofstream f(cpath);
    f << config;
    SNUG_CHECK(f.good(), IOError, cpath, ": cannot write");
  }
  save_safetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
}

}  // namespace snug::nn::models

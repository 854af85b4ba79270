// SPDX-License-Identifier: MIT
// nn::models::Bert (nn/models/bert.h) and load_hf_bert (nn/models/hf.h):
// shapes, padding, the heads, metadata, and a Hugging Face-named directory
// written here from a snug model's own weights and read back.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <snug/autograd/grad_mode.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include <snug/core/safetensors.h>
#include <snug/nn/models/bert.h>
#include <snug/nn/models/hf.h>
#include "test_util.h"

using namespace snug;
using namespace snug::nn::models;
using snug::testing::contains;
using snug::testing::error_of;
namespace fs = std::filesystem;

namespace {

BertConfig tiny(int64_t labels = 0) {
  BertConfig c;
  c.vocab = 50, c.hidden = 16, c.layers = 2, c.heads = 2, c.intermediate = 32, c.max_position = 24;
  c.dropout = 0.0, c.attention_dropout = 0.0, c.labels = labels;
  return c;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return raw::reduce(ReduceOp::max, raw::unary(UnaryOp::abs, raw::binary(BinaryOp::sub, a.detach(), b.detach())), {},
                     false)
      .item<double>();
}

struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("snug_bert_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// m's weights under Hugging Face's names (BertForMaskedLM, or ...ForSequenceClassification with labels).
TensorMap hf_tensors(Bert& m) {
  TensorMap t;
  const std::string p = "bert.";
  t.push_back({p + "embeddings.word_embeddings.weight", m.word_embeddings->weight});
  t.push_back({p + "embeddings.position_embeddings.weight", m.position_embeddings->weight});
  t.push_back({p + "embeddings.token_type_embeddings.weight", m.token_type_embeddings->weight});
  t.push_back({p + "embeddings.LayerNorm.weight", m.embeddings_norm->weight});
  t.push_back({p + "embeddings.LayerNorm.bias", m.embeddings_norm->bias});
  const int64_t C = m.cfg.hidden;
  for (int64_t i = 0; i < m.cfg.layers; ++i) {
    auto b = m.encoder->layers->at<nn::TransformerBlock>(size_t(i));
    const std::string l = p + "encoder.layer." + std::to_string(i) + ".";
    const char* parts[] = {"query", "key", "value"};
    for (int k = 0; k < 3; ++k) {
      t.push_back({l + "attention.self." + parts[k] + ".weight", b->attn->qkv->weight.narrow(0, k * C, C)});
      t.push_back({l + "attention.self." + parts[k] + ".bias", b->attn->qkv->bias.narrow(0, k * C, C)});
    }
    t.push_back({l + "attention.output.dense.weight", b->attn->proj->weight});
    t.push_back({l + "attention.output.dense.bias", b->attn->proj->bias});
    t.push_back({l + "attention.output.LayerNorm.weight", b->ln_1->weight});
    t.push_back({l + "attention.output.LayerNorm.bias", b->ln_1->bias});
    t.push_back({l + "intermediate.dense.weight", b->fc->weight});
    t.push_back({l + "intermediate.dense.bias", b->fc->bias});
    t.push_back({l + "output.dense.weight", b->fc_proj->weight});
    t.push_back({l + "output.dense.bias", b->fc_proj->bias});
    t.push_back({l + "output.LayerNorm.weight", b->ln_2->weight});
    t.push_back({l + "output.LayerNorm.bias", b->ln_2->bias});
  }
  t.push_back({"cls.predictions.transform.dense.weight", m.mlm_dense->weight});
  t.push_back({"cls.predictions.transform.dense.bias", m.mlm_dense->bias});
  t.push_back({"cls.predictions.transform.LayerNorm.weight", m.mlm_norm->weight});
  t.push_back({"cls.predictions.transform.LayerNorm.bias", m.mlm_norm->bias});
  t.push_back({"cls.predictions.bias", m.mlm_bias});
  if (m.cfg.labels > 0) {
    t.push_back({p + "pooler.dense.weight", m.pooler->weight});
    t.push_back({p + "pooler.dense.bias", m.pooler->bias});
    t.push_back({"classifier.weight", m.classifier->weight});
    t.push_back({"classifier.bias", m.classifier->bias});
  }
  return t;
}

std::string hf_config(const BertConfig& c, const std::string& extra = "") {
  return str("{\"architectures\": [\"", c.labels > 0 ? "BertForSequenceClassification" : "BertForMaskedLM",
             "\"], \"vocab_size\": ", c.vocab, ", \"hidden_size\": ", c.hidden, ", \"num_hidden_layers\": ", c.layers,
             ", \"num_attention_heads\": ", c.heads, ", \"intermediate_size\": ", c.intermediate,
             ", \"max_position_embeddings\": ", c.max_position, ", \"type_vocab_size\": ", c.type_vocab,
             ", \"hidden_act\": \"gelu\", \"layer_norm_eps\": 1e-12, \"hidden_dropout_prob\": 0.0,",
             " \"attention_probs_dropout_prob\": 0.0", c.labels > 0 ? str(", \"num_labels\": ", c.labels) : "", extra,
             "}");
}

void write_dir(const fs::path& dir, const std::string& config, const TensorMap& tensors) {
  std::ofstream(dir / "config.json") << config;
  save_safetensors((dir / "model.safetensors").string(), tensors);
}

}  // namespace

TEST_CASE("Bert: shapes, the tied decoder, and segment 0 by default") {
  manual_seed(1);
  Bert m(tiny());
  m.eval();
  Generator g(2);
  const Tensor tok = randint(0, 50, {3, 10}, DType::i64, &g);
  const Tensor logits = m.forward(tok);
  CHECK(logits.shape() == Shape{3, 10, 50});
  CHECK(m.encode(tok).shape() == Shape{3, 10, 16});
  CHECK(max_abs_diff(m.encode(tok, zeros({3, 10}, DType::i64)), m.encode(tok)) < 1e-6);
  CHECK(max_abs_diff(m.encode(tok, ones({3, 10}, DType::i64)), m.encode(tok)) > 1e-3);
  // The decoder is the word embedding matrix itself: no separate (V, C) parameter.
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  CHECK(n == 50 * 16 + 24 * 16 + 2 * 16 + 2 * 16 + 2 * (4 * 16 * 16 + 4 * 16 + 2 * 16 * 32 + 32 + 16 + 4 * 16) +
                 16 * 16 + 16 + 2 * 16 + 50);
  CHECK(contains(error_of([&] { m.forward(zeros({2, 25}, DType::i64)); }), "exceeds max_position 24"));
  CHECK(contains(error_of([&] { m.classify(tok); }), "no classification head"));
}

TEST_CASE("Bert: padding changes nothing at the real positions; mlm_loss ignores -100") {
  manual_seed(3);
  Bert m(tiny());
  m.eval();
  Generator g(4);
  const Tensor tok = randint(0, 50, {2, 12}, DType::i64, &g);
  Tensor pad = zeros({2, 12}, DType::b8);
  for (int64_t t = 7; t < 12; ++t) pad.data<bool>()[12 + t] = true;  // row 1: 7 real tokens
  const Tensor h = m.encode(tok, Tensor(), pad);
  const Tensor alone = m.encode(tok.narrow(0, 1, 1).narrow(1, 0, 7).contiguous());
  CHECK(max_abs_diff(h.narrow(0, 1, 1).narrow(1, 0, 7), alone) < 1e-5);
  CHECK(max_abs_diff(h.narrow(0, 0, 1), m.encode(tok.narrow(0, 0, 1).contiguous())) < 1e-5);
  // Labels: -100 except three positions; the loss is their mean cross-entropy.
  Tensor labels = full({2, 12}, -100.0, DType::i64);
  labels.data<int64_t>()[1] = 5, labels.data<int64_t>()[4] = 9, labels.data<int64_t>()[13] = 0;
  const Tensor logp = raw::softmax(m.mlm_logits(h), -1, true);  // (2, 12, 50)
  const double ref = -(logp.data<float>()[1 * 50 + 5] + logp.data<float>()[4 * 50 + 9] +
                       logp.data<float>()[13 * 50 + 0]) / 3.0;
  CHECK(m.mlm_loss(tok, labels, Tensor(), pad).item() == doctest::Approx(ref).epsilon(1e-5));
}

TEST_CASE("Bert: the classification head and the configuration as metadata") {
  manual_seed(5);
  Bert m(tiny(3));
  const Tensor tok = randint(0, 50, {4, 6}, DType::i64);
  CHECK(m.classify(tok).shape() == Shape{4, 3});
  BertConfig c = tiny(3);
  c.gelu = GeluApprox::tanh, c.dropout = 0.1;
  auto back = BertConfig::from_metadata(c.to_metadata(), "x");
  REQUIRE(back);
  CHECK(back->to_metadata() == c.to_metadata());
  CHECK_FALSE(BertConfig::from_metadata({{"gpt.vocab", "3"}}, "x"));
  auto md = c.to_metadata();
  md["bert.heads"] = "3";
  CHECK(contains(error_of([&] { BertConfig::from_metadata(md, "f.safetensors"); }),
                 "f.safetensors: the model configuration it records is invalid"));
  BertConfig bad = tiny();
  bad.intermediate = 20;
  CHECK(contains(error_of([&] { Bert{bad}; }), "intermediate 20 must be a multiple of hidden 16"));
}

TEST_CASE("load_hf_bert: Hugging Face names and layouts give back the same model") {
  for (int64_t labels : {0, 2}) {
    CAPTURE(labels);
    manual_seed(6 + uint64_t(labels));
    Bert m(tiny(labels));
    m.eval();
    TempDir d;
    write_dir(d.path, hf_config(m.cfg), hf_tensors(m));
    auto loaded = load_hf_bert(d.path.string());
    Generator g(7);
    const Tensor tok = randint(0, 50, {2, 9}, DType::i64, &g), types = randint(0, 2, {2, 9}, DType::i64, &g);
    autograd::NoGradGuard ng;
    CHECK(max_abs_diff(loaded->mlm_logits(loaded->encode(tok, types)), m.mlm_logits(m.encode(tok, types))) == 0.0);
    if (labels) CHECK(max_abs_diff(loaded->classify(tok, types), m.classify(tok, types)) == 0.0);
  }
}

TEST_CASE("save_hf_bert writes what load_hf_bert reads, under the same names as written by hand") {
  manual_seed(9);
  Bert m(tiny(2));
  m.eval();
  TempDir d;
  save_hf_bert(m, d.path.string());
  const SafetensorsFile f = load_safetensors((d.path / "model.safetensors").string());
  std::vector<std::string> saved, by_hand;
  for (auto& [n, t] : f.tensors) saved.push_back(n);
  for (auto& [n, t] : hf_tensors(m)) by_hand.push_back(n);
  std::sort(saved.begin(), saved.end());
  std::sort(by_hand.begin(), by_hand.end());
  CHECK(saved == by_hand);
  auto back = load_hf_bert(d.path.string());
  const Tensor tok = randint(0, 50, {2, 5}, DType::i64);
  autograd::NoGradGuard ng;
  CHECK(max_abs_diff(back->forward(tok), m.forward(tok)) == 0.0);
  CHECK(max_abs_diff(back->classify(tok), m.classify(tok)) == 0.0);
}

TEST_CASE("load_hf_bert: bad directories name the problem") {
  manual_seed(8);
  Bert m(tiny());
  TempDir d;
  TensorMap t = hf_tensors(m);
  // A missing tensor.
  TensorMap missing(t.begin() + 1, t.end());
  write_dir(d.path, hf_config(m.cfg), missing);
  CHECK(contains(error_of([&] { load_hf_bert(d.path.string()); }), "no tensor \"bert.embeddings.word_embeddings.weight\""));
  // A wrong shape.
  TensorMap wrong = t;
  wrong[0].second = zeros({49, 16});
  write_dir(d.path, hf_config(m.cfg), wrong);
  CHECK(contains(error_of([&] { load_hf_bert(d.path.string()); }), "is [49, 16], the configuration needs [50, 16]"));
  // A tensor nothing uses.
  TensorMap extra = t;
  extra.push_back({"bert.encoder.layer.9.output.dense.weight", zeros({2})});
  write_dir(d.path, hf_config(m.cfg), extra);
  CHECK(contains(error_of([&] { load_hf_bert(d.path.string()); }), "tensors the BERT mapping does not use"));
  // An unsupported setting, and a decoder tied to something else.
  write_dir(d.path, hf_config(m.cfg, ", \"position_embedding_type\": \"relative_key\""), t);
  CHECK(contains(error_of([&] { load_hf_bert(d.path.string()); }), "position_embedding_type \"relative_key\""));
  TensorMap untied = t;
  untied.push_back({"cls.predictions.decoder.weight", zeros({50, 16})});
  write_dir(d.path, hf_config(m.cfg), untied);
  CHECK(contains(error_of([&] { load_hf_bert(d.path.string()); }), "differs from the word embeddings"));
  // A missing config.
  fs::remove(d.path / "config.json");
  CHECK(contains(error_of([&] { load_hf_bert(d.path.string()); }), "config.json"));
}

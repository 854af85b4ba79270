// SPDX-License-Identifier: MIT
// Hugging Face checkpoints into snug models: a directory written by
// transformers' save_pretrained (config.json + model.safetensors), with
// Hugging Face's parameter names, mapped onto snug's modules (docs/hf.md).
//
//   auto bert = nn::models::load_hf_bert("path/to/bert");  // BertForMaskedLM / ...ForSequenceClassification
//   auto gpt2 = nn::models::load_hf_gpt2("path/to/gpt2");  // GPT2LMHeadModel
//
// Errors: IOError naming the file for a missing or malformed config.json or
// safetensors file; ValueError naming the parameter for a missing tensor, a
// shape that disagrees with the configuration, or an unsupported setting
// (an activation, a position embedding type, ...). A tensor the mapping does
// not use is an error too unless it is a known buffer (GPT-2's attn.bias).
#pragma once
#include <map>
#include <memory>
#include <string>

#include <snug/nn/models/bert.h>
#include <snug/nn/models/gpt.h>

namespace snug::nn::models {

std::shared_ptr<Bert> load_hf_bert(const std::string& dir);
// The inverse: writes dir/config.json and dir/model.safetensors (created if
// needed) as transformers' BertForMaskedLM (or ...ForSequenceClassification
// with cfg.labels) reads them, so a snug model opens in Hugging Face (the
// PyTorch peer of examples/bert starts from snug's initial weights this way).
void save_hf_bert(const Bert& model, const std::string& dir);
std::shared_ptr<GPT> load_hf_gpt2(const std::string& dir);

// config.json as flat key -> JSON text of the value ("768", "\"gelu\"", "null"),
// top-level keys only; IOError naming the file when it is not a JSON object.
std::map<std::string, std::string> read_hf_config(const std::string& path);

// One config.json with typed lookups, the loaders' reader. A required key
// that is missing, or a value of the wrong type, is an IOError naming the
// file and the key; the getters with a fallback return it for a missing or
// null key.
class HfConfig {
 public:
  explicit HfConfig(const std::string& path);  // read_hf_config(path)
  const std::string& path() const { return path_; }
  bool has(const std::string& key) const;  // present and not null
  int64_t integer(const std::string& key) const;
  double number(const std::string& key, double fallback) const;
  std::string text(const std::string& key, const std::string& fallback) const;
  bool flag(const std::string& key, bool fallback) const;
  // The value's JSON text ("[\"BertForMaskedLM\"]", "{...}"); IOError when missing.
  const std::string& raw(const std::string& key) const;

 private:
  std::string path_;
  std::map<std::string, std::string> entries_;
};

}  // namespace snug::nn::models

// SPDX-License-Identifier: MIT
// snug-hf: runs a Hugging Face checkpoint (a save_pretrained directory:
// config.json + model.safetensors) with snug's models (nn/models/hf.h) and
// writes what it computes to a safetensors file, so that Python tools
// (tools/hf_parity.py) compare snug with transformers without linking anything.
//
//   snug-hf gpt2 --model DIR --ids IN.safetensors --out OUT.safetensors [--threads N] [--json]
//   snug-hf bert --model DIR --ids IN.safetensors --out OUT.safetensors [--threads N] [--json]
//
// The input file (--ids) holds the batch, by name (docs/hf.md, "snug-hf"):
//   ids           (B, T) i64 (or i32)    token ids, required
//   token_types   (B, T) i64 (or i32)    bert only: segment ids (default 0)
//   padding_mask  (B, T) bool (or ints)  bert only: true (nonzero) at padding,
//                                        the opposite of Hugging Face's attention_mask
// Any other name is an error, so that a misspelt one is not silently ignored.
// The output file holds, in f32:
//   gpt2: logits (B, T, vocab)
//   bert: hidden (B, T, hidden), the encoder's output; logits (B, T, vocab),
//         the masked-LM head, when the checkpoint is a BertForMaskedLM;
//         class_logits (B, labels) when it is a BertForSequenceClassification.
// The model runs in eval mode (no dropout) without autograd.
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "common/cli.h"

#include <snug/autograd/grad_mode.h>
#include <snug/core/safetensors.h>
#include <snug/nn/models/hf.h>

using namespace snug;

namespace {

struct Batch {
  Tensor ids, token_types, padding_mask;
};

// The input file's tensors; `allowed` are the names this subcommand reads.
Batch read_batch(const std::string& path, const std::set<std::string>& allowed) {
  SafetensorsFile f = load_safetensors(path);
  std::map<std::string, Tensor> by_name;
  for (auto& [name, t] : f.tensors) {
    std::string names;
    for (const auto& a : allowed) names += (names.empty() ? "" : ", ") + a;
    SNUG_CHECK(allowed.count(name), ValueError, path, ": tensor \"", name, "\" is not an input of this model (",
               names, ")");
    by_name[name] = t;
  }
  SNUG_CHECK(by_name.count("ids"), ValueError, path, ": no tensor \"ids\" (the (B, T) token ids)");
  Batch b;
  auto integer = [&](const std::string& name) {
    const Tensor t = by_name.at(name);
    SNUG_CHECK(t.dim() == 2, ShapeError, path, ": \"", name, "\" must be (B, T), got ", shape_str(t.shape()));
    SNUG_CHECK(t.dtype() == kInt64 || t.dtype() == kInt32, DTypeError, path, ": \"", name, "\" must be i64 or i32, got ",
               dtype_name(t.dtype()));
    return t.dtype() == kInt64 ? t : t.to(kInt64);
  };
  b.ids = integer("ids");
  if (by_name.count("token_types")) b.token_types = integer("token_types");
  if (by_name.count("padding_mask")) {
    const Tensor t = by_name.at("padding_mask");
    SNUG_CHECK(!t.is_floating_point(), DTypeError, path, ": \"padding_mask\" must be bool or integer, got ",
               dtype_name(t.dtype()));
    b.padding_mask = t.dtype() == kBool ? t : t.to(kBool);
  }
  for (const char* name : {"token_types", "padding_mask"}) {
    const Tensor& t = std::string(name) == "token_types" ? b.token_types : b.padding_mask;
    SNUG_CHECK(!t.defined() || t.shape() == b.ids.shape(), ShapeError, path, ": \"", name, "\" is ",
               shape_str(t.shape()), ", \"ids\" is ", shape_str(b.ids.shape()));
  }
  return b;
}

// The checkpoint's architectures list mentions `what` ("ForMaskedLM").
bool architecture_has(const std::string& dir, const std::string& what) {
  const auto cfg = nn::models::read_hf_config(dir + "/config.json");
  auto it = cfg.find("architectures");
  return it != cfg.end() && it->second.find(what) != std::string::npos;
}

struct Flags {
  std::string model, ids, out;
  int64_t threads = 0;
  bool json = false;
};

void add_flags(CLI::App* cmd, Flags& f) {
  cmd->add_option("--model", f.model, "the save_pretrained directory (config.json + model.safetensors)")
      ->type_name("DIR")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--ids", f.ids, "safetensors file with \"ids\" (B, T) i64 and the optional inputs (docs/hf.md)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", f.out, "safetensors file to write the outputs to")->type_name("FILE");
  cmd->add_option("--threads", f.threads, "CPU threads for the kernels; 0: OpenMP's default")
      ->transform(cli::integer(0, 4096));
  cmd->add_flag("--json", f.json, "stdout holds one JSON line with the summary");
}

void require(const Flags& f) {
  SNUG_FLAG_CHECK(!f.model.empty(), "--model DIR is required");
  SNUG_FLAG_CHECK(!f.ids.empty(), "--ids FILE is required");
  SNUG_FLAG_CHECK(!f.out.empty(), "--out FILE is required");
  if (f.threads > 0) set_num_threads(static_cast<int>(f.threads));
}

std::string shape_json(const Shape& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

// Writes the outputs and prints the summary (JSON or a line for people).
void finish(const std::string& sub, const Flags& f, const TensorMap& outputs, int64_t params, double seconds) {
  save_safetensors(f.out, outputs, {{"program", "snug-hf " + sub}, {"model", f.model}});
  std::string shapes_json, shapes_text;
  for (const auto& [name, t] : outputs) {
    shapes_json += str(shapes_json.empty() ? "" : ", ", "\"", name, "\": ", shape_json(t.shape()));
    shapes_text += str(shapes_text.empty() ? "" : ", ", name, " ", shape_str(t.shape()));
  }
  if (f.json)
    std::printf("{\"model\": \"%s\", \"params\": %lld, \"outputs\": {%s}, \"seconds\": %.4f, \"out\": \"%s\"}\n",
                sub.c_str(), static_cast<long long>(params), shapes_json.c_str(), seconds, f.out.c_str());
  else
    std::printf("snug-hf %s: %s (%lld parameters): %s -> %s in %.3f s\n", sub.c_str(), f.model.c_str(),
                static_cast<long long>(params), shapes_text.c_str(), f.out.c_str(), seconds);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_gpt2(const Flags& f) {
  require(f);
  const Batch b = read_batch(f.ids, {"ids"});
  auto model = nn::models::load_hf_gpt2(f.model);
  model->eval();
  NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor logits = model->forward(b.ids);  // (B, T, vocab)
  const double s = since(t0);
  finish("gpt2", f, {{"logits", logits}}, model->num_parameters(), s);
  return 0;
}

int run_bert(const Flags& f) {
  require(f);
  const Batch b = read_batch(f.ids, {"ids", "token_types", "padding_mask"});
  auto model = nn::models::load_hf_bert(f.model);
  model->eval();
  NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  TensorMap out;
  Tensor hidden = model->encode(b.ids, b.token_types, b.padding_mask);  // (B, T, hidden)
  out.emplace_back("hidden", hidden);
  // Only a checkpoint that has a masked-LM head gets its logits (load_hf_bert
  // leaves the head of any other one at its initial values).
  if (architecture_has(f.model, "ForMaskedLM")) out.emplace_back("logits", model->mlm_logits(hidden));
  if (model->cfg.labels > 0) out.emplace_back("class_logits", model->classify(b.ids, b.token_types, b.padding_mask));
  const double s = since(t0);
  finish("bert", f, out, model->num_parameters(), s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs a Hugging Face checkpoint (save_pretrained: config.json + model.safetensors) with snug's "
               "models and writes the outputs to a safetensors file. `snug-hf SUBCOMMAND --help` lists its flags.",
               "snug-hf"};
  cli::init(app);
  app.require_subcommand(1);
  Flags gpt2, bert;
  CLI::App* g = app.add_subcommand("gpt2", "GPT2LMHeadModel / GPT2Model -> logits (B, T, vocab)");
  add_flags(g, gpt2);
  CLI::App* e = app.add_subcommand(
      "bert", "BertForMaskedLM / BertModel / BertForSequenceClassification -> hidden, logits, class_logits");
  add_flags(e, bert);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  const std::string sub = g->parsed() ? "gpt2" : "bert";
  try {
    return g->parsed() ? run_gpt2(gpt2) : run_bert(bert);
  } catch (const std::exception& ex) {
    return cli::exit_status("snug-hf " + sub, ex);
  }
}

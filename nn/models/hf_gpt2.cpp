// SPDX-License-Identifier: MIT
// GPT-2 checkpoints of Hugging Face transformers (GPT2LMHeadModel, GPT2Model)
// into snug's GPT (nn/models/hf.h; the name table is in docs/hf.md).
//
// NOTE [ GPT-2's Conv1D ]
// GPT-2 keeps its projections as Conv1D modules whose weight is (in, out):
// y = x W + b. snug's Linear holds (out, in) and computes x W^T + b, so every
// projection weight is transposed on the way in; biases are the same. c_attn's
// 3C output columns are q | k | v, each C wide and split into heads of C/heads
// consecutive columns, which is exactly how MultiheadAttention reads its qkv
// output, (B, T, 3, heads, D): the transposed c_attn is snug's qkv as it is.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include <snug/base/error.h>
#include <snug/core/safetensors.h>
#include <snug/nn/models/hf.h>

namespace snug::nn::models {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// GPT2Config's fields as GPTConfig. Missing optional keys take GPT2Config's
// defaults (n_inner null, gelu_new, eps 1e-5, dropouts 0.1).
GPTConfig gpt2_config(const HfConfig& c) {
  const std::string type = c.text("model_type", "gpt2");
  SNUG_CHECK(type == "gpt2", ValueError, c.path(), ": model_type \"", type, "\" is not GPT-2 (\"gpt2\")");
  GPTConfig g;
  g.vocab = c.integer("vocab_size");
  g.block = c.integer("n_positions");
  g.embd = c.integer("n_embd");
  g.layers = c.integer("n_layer");
  g.heads = c.integer("n_head");
  g.mlp_ratio = 4;
  if (c.has("n_inner")) {  // null: 4 n_embd
    const int64_t inner = c.integer("n_inner");
    // snug's block has an integer mlp_ratio: the hidden width is mlp_ratio * embd.
    SNUG_CHECK(g.embd > 0 && inner > 0 && inner % g.embd == 0, ValueError, c.path(), ": n_inner ", inner,
               " is not a multiple of n_embd ", g.embd, " (snug's MLP is mlp_ratio * n_embd wide)");
    g.mlp_ratio = inner / g.embd;
  }
  const std::string act = c.text("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    g.gelu = GeluApprox::tanh;
  else if (act == "gelu")
    g.gelu = GeluApprox::none;
  else
    throw ValueError(str(c.path(), ": activation_function \"", act,
                         "\" is not supported (snug's GPT has \"gelu_new\", \"gelu_pytorch_tanh\" and \"gelu\")"));
  g.layer_norm_eps = c.number("layer_norm_epsilon", 1e-5);
  // One dropout for the whole model: GPT-2's residual dropout (snug's block
  // uses it after attention and the MLP, and on the attention weights).
  g.dropout = c.number("resid_pdrop", 0.1);
  // Settings that change the math and that snug's GPT does not have.
  SNUG_CHECK(c.flag("scale_attn_weights", true), ValueError, c.path(),
             ": scale_attn_weights false is not supported (snug scales scores by 1/sqrt(head size))");
  SNUG_CHECK(!c.flag("scale_attn_by_inverse_layer_idx", false), ValueError, c.path(),
             ": scale_attn_by_inverse_layer_idx true is not supported");
  SNUG_CHECK(!c.flag("add_cross_attention", false), ValueError, c.path(), ": add_cross_attention true is not supported");
  try {
    g.validate();
  } catch (const ValueError& e) {
    throw ValueError(str(c.path(), ": the configuration does not make a valid GPT: ", e.what()));
  }
  return g;
}

// model.safetensors, or the shards a model.safetensors.index.json lists.
struct Checkpoint {
  std::string where;  // for messages
  TensorMap tensors;
};

Checkpoint read_checkpoint(const fs::path& dir) {
  const fs::path one = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(one)) return {one.string(), load_safetensors(one.string()).tensors};
  if (fs::exists(index)) {
    const auto top = read_hf_config(index.string());
    SNUG_CHECK(top.count("weight_map"), IOError, index.string(), ": no \"weight_map\"");
    const json map = json::parse(top.at("weight_map"));
    SNUG_CHECK(map.is_object(), IOError, index.string(), ": \"weight_map\" must be an object");
    std::set<std::string> shards;
    for (auto it = map.begin(); it != map.end(); ++it) {
      SNUG_CHECK(it.value().is_string(), IOError, index.string(), ": weight_map[\"", it.key(), "\"] is not a file name");
      shards.insert(it.value().get<std::string>());
    }
    Checkpoint c{index.string(), {}};
    for (const auto& s : shards)
      for (auto& nt : load_safetensors((dir / s).string()).tensors) c.tensors.push_back(std::move(nt));
    return c;
  }
  const bool bin = fs::exists(dir / "pytorch_model.bin");
  throw IOError(str(one.string(), ": no such file", bin ? " (the directory has pytorch_model.bin: snug reads only "
                                                          "safetensors; save with save_pretrained(dir, "
                                                          "safe_serialization=True))"
                                                        : ""));
}

}  // namespace

std::shared_ptr<GPT> load_hf_gpt2(const std::string& dir_name) {
  const fs::path dir(dir_name);
  const HfConfig cfg((dir / "config.json").string());
  const GPTConfig g = gpt2_config(cfg);
  Checkpoint ck = read_checkpoint(dir);

  // Hugging Face names without GPT2LMHeadModel's "transformer." prefix (so
  // GPT2Model's checkpoints read the same); lm_head.weight keeps its name.
  std::map<std::string, Tensor> given;
  for (auto& [name, t] : ck.tensors) {
    const bool prefixed = name.rfind("transformer.", 0) == 0;
    const std::string key = prefixed ? name.substr(12) : name;
    SNUG_CHECK(given.emplace(key, t).second, ValueError, ck.where, ": tensor \"", key, "\" appears both with and ",
               "without the \"transformer.\" prefix");
  }
  // Shown in messages with the prefix the file uses.
  const bool file_prefixed = std::any_of(ck.tensors.begin(), ck.tensors.end(),
                                         [](const auto& nt) { return nt.first.rfind("transformer.", 0) == 0; });
  auto hf_name = [&](const std::string& key) {
    return (file_prefixed && key != "lm_head.weight" ? "transformer." : "") + key;
  };

  struct Entry {
    std::string hf, snug;
    Shape shape;          // as the file holds it
    bool conv1d = false;  // NOTE [ GPT-2's Conv1D ]: (in, out), transposed to (out, in)
  };
  const int64_t C = g.embd, H = g.mlp_ratio * g.embd;
  std::vector<Entry> table = {{"wte.weight", "wte.weight", {g.vocab, C}}, {"wpe.weight", "wpe.weight", {g.block, C}}};
  for (int64_t i = 0; i < g.layers; ++i) {
    const std::string h = str("h.", i, "."), b = str("blocks.", i, ".");
    for (const char* ln : {"ln_1", "ln_2"})
      for (const char* p : {"weight", "bias"}) table.push_back({h + ln + "." + p, b + ln + "." + p, {C}});
    table.push_back({h + "attn.c_attn.weight", b + "attn.qkv.weight", {C, 3 * C}, true});
    table.push_back({h + "attn.c_attn.bias", b + "attn.qkv.bias", {3 * C}});
    table.push_back({h + "attn.c_proj.weight", b + "attn.proj.weight", {C, C}, true});
    table.push_back({h + "attn.c_proj.bias", b + "attn.proj.bias", {C}});
    table.push_back({h + "mlp.c_fc.weight", b + "fc.weight", {C, H}, true});
    table.push_back({h + "mlp.c_fc.bias", b + "fc.bias", {H}});
    table.push_back({h + "mlp.c_proj.weight", b + "fc_proj.weight", {H, C}, true});
    table.push_back({h + "mlp.c_proj.bias", b + "fc_proj.bias", {C}});
  }
  table.push_back({"ln_f.weight", "ln_f.weight", {C}});
  table.push_back({"ln_f.bias", "ln_f.bias", {C}});

  auto as_f32 = [&](const std::string& key, const Tensor& t) {
    SNUG_CHECK(t.is_floating_point(), ValueError, ck.where, ": tensor \"", hf_name(key), "\" is ",
               dtype_name(t.dtype()), ", expected a floating-point tensor");
    return t.dtype() == DType::f32 ? t : t.to(DType::f32);
  };
  NamedTensors state;
  std::set<std::string> used;
  std::vector<std::string> missing;
  for (const Entry& e : table) {
    auto it = given.find(e.hf);
    if (it == given.end()) {
      missing.push_back(str("\"", hf_name(e.hf), "\" (snug's ", e.snug, ")"));
      continue;
    }
    used.insert(e.hf);
    const Tensor& t = it->second;
    SNUG_CHECK(t.shape() == e.shape, ValueError, ck.where, ": tensor \"", hf_name(e.hf), "\" (snug's ", e.snug,
               ") is ", shape_str(t.shape()), ", expected ", shape_str(e.shape), " from ", cfg.path(),
               e.conv1d ? " (a Conv1D weight: (in, out))" : "");
    Tensor v = as_f32(e.hf, t);
    state.emplace_back(e.snug, e.conv1d ? v.t().contiguous() : v);
  }
  SNUG_CHECK(missing.empty(), ValueError, ck.where, ": no tensor ", missing.front(),
             missing.size() > 1 ? str(" (and ", missing.size() - 1, " more missing)") : std::string());

  // The LM head is wte (tied): a separate lm_head.weight must hold the same values.
  if (auto it = given.find("lm_head.weight"); it != given.end()) {
    used.insert(it->first);
    const Tensor& head = it->second;
    SNUG_CHECK(head.shape() == Shape({g.vocab, C}), ValueError, ck.where, ": tensor \"lm_head.weight\" is ",
               shape_str(head.shape()), ", expected ", shape_str(Shape({g.vocab, C})));
    const std::vector<float> a = as_f32(it->first, head).to_vector<float>();
    const std::vector<float> w = as_f32("wte.weight", given.at("wte.weight")).to_vector<float>();
    SNUG_CHECK(a == w, ValueError, ck.where, ": \"lm_head.weight\" differs from \"", hf_name("wte.weight"),
               "\": snug's GPT ties its LM head to the token embeddings (tie_word_embeddings) and cannot hold "
               "a separate head");
  }
  // GPT-2's causal-mask buffers, which older checkpoints saved: snug's attention makes its mask itself.
  auto known_buffer = [&](const std::string& key) {
    for (int64_t i = 0; i < g.layers; ++i) {
      const std::string h = str("h.", i, ".attn.");
      if (key == h + "bias" || key == h + "masked_bias") return true;
    }
    return false;
  };
  std::vector<std::string> unexpected;
  for (const auto& [key, t] : given)
    if (!used.count(key) && !known_buffer(key)) unexpected.push_back(hf_name(key));
  if (!unexpected.empty()) {
    std::string list;
    for (size_t i = 0; i < unexpected.size() && i < 5; ++i) list += str(i ? ", " : "", "\"", unexpected[i], "\"");
    throw ValueError(str(ck.where, ": ", unexpected.size(), " tensor", unexpected.size() > 1 ? "s" : "",
                         " that GPT-2's mapping does not use: ", list, unexpected.size() > 5 ? ", ..." : "",
                         " (docs/hf.md lists the names it reads)"));
  }

  auto model = std::make_shared<GPT>(g);
  model->load_state_dict(state, /*strict=*/true);
  return model;
}

}  // namespace snug::nn::models

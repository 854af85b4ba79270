// SPDX-License-Identifier: MIT
// GPT-2 checkpoints in Hugging Face's layout (nn/models/hf.h): a tiny
// checkpoint written here (config.json + model.safetensors with GPT-2's names
// and Conv1D weights) loads into snug's GPT, whose forward equals a snug GPT
// with the transposed weights copied in by hand and GPT-2's forward written
// out with primitive ops; the errors name the file, the key or the tensor.
// GPTConfig's GPT-2 fields in checkpoint metadata. tools/hf_parity.py checks
// the same against transformers itself.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/safetensors.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/hf.h>
#include "test_util.h"

using namespace snug;
using namespace snug::nn;
using models::GPT;
using models::GPTConfig;
using snug::testing::error_of;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("snug_test_hf_gpt2_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A tiny GPT-2: vocab 37, 8 positions, 2 layers, 16 channels, 2 heads.
struct Tiny {
  int64_t vocab = 37, positions = 8, layers = 2, embd = 16, heads = 2, inner = 64;
  std::string activation = "\"gelu_new\"";
  std::string n_inner = "null";
  double eps = 1e-5;
  bool prefix = true;  // GPT2LMHeadModel's "transformer." names

  std::string config() const {
    return str("{\n  \"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"],\n  \"vocab_size\": ", vocab,
               ", \"n_positions\": ", positions, ", \"n_embd\": ", embd, ", \"n_layer\": ", layers,
               ", \"n_head\": ", heads, ", \"n_inner\": ", n_inner, ",\n  \"activation_function\": ", activation,
               ", \"layer_norm_epsilon\": ", eps,
               ", \"resid_pdrop\": 0.1, \"embd_pdrop\": 0.1, \"attn_pdrop\": 0.1,\n"
               "  \"scale_attn_weights\": true, \"tie_word_embeddings\": true, \"torch_dtype\": \"float32\"\n}\n");
  }
  // Random tensors under GPT-2's names, Conv1D weights as (in, out).
  TensorMap tensors(uint64_t seed = 7) const {
    Generator g(seed);
    const std::string p = prefix ? "transformer." : "";
    auto r = [&](Shape s, double scale = 0.2) { return randn(s, TensorOptions(kFloat32), &g).mul_(scale); };
    TensorMap m;
    m.emplace_back(p + "wte.weight", r({vocab, embd}));
    m.emplace_back(p + "wpe.weight", r({positions, embd}));
    for (int64_t i = 0; i < layers; ++i) {
      const std::string h = str(p, "h.", i, ".");
      m.emplace_back(h + "ln_1.weight", r({embd}).add_(1.0));
      m.emplace_back(h + "ln_1.bias", r({embd}));
      m.emplace_back(h + "attn.c_attn.weight", r({embd, 3 * embd}));
      m.emplace_back(h + "attn.c_attn.bias", r({3 * embd}));
      m.emplace_back(h + "attn.c_proj.weight", r({embd, embd}));
      m.emplace_back(h + "attn.c_proj.bias", r({embd}));
      m.emplace_back(h + "ln_2.weight", r({embd}).add_(1.0));
      m.emplace_back(h + "ln_2.bias", r({embd}));
      m.emplace_back(h + "mlp.c_fc.weight", r({embd, inner}));
      m.emplace_back(h + "mlp.c_fc.bias", r({inner}));
      m.emplace_back(h + "mlp.c_proj.weight", r({inner, embd}));
      m.emplace_back(h + "mlp.c_proj.bias", r({embd}));
    }
    m.emplace_back(p + "ln_f.weight", r({embd}).add_(1.0));
    m.emplace_back(p + "ln_f.bias", r({embd}));
    return m;
  }
  void write(const TempDir& d, const TensorMap& m) const {
    write_text(d.path / "config.json", config());
    save_safetensors((d.path / "model.safetensors").string(), m);
  }
};

Tensor get(const TensorMap& m, const std::string& name) {
  for (auto& [n, t] : m)
    if (n == name) return t;
  FAIL("no tensor " << name);
  return Tensor();
}
TensorMap without(TensorMap m, const std::string& name) {
  std::erase_if(m, [&](const auto& nt) { return nt.first == name; });
  return m;
}
TensorMap replaced(TensorMap m, const std::string& name, const Tensor& t) {
  for (auto& [n, v] : m)
    if (n == name) v = t;
  return m;
}

Tensor tokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  return randint(0, vocab, {B, T}, TensorOptions(kInt64), &g);
}

// max |a - b| / max |b|
double rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double d = 0, m = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i])), m = std::max(m, std::abs(y[i]));
  return d / m;
}

// GPT-2's forward as transformers writes it, from the Conv1D weights (x W + b),
// with c_attn's output split as q | k | v and each into heads.
Tensor gpt2_reference(const TensorMap& w, const Tiny& c, const Tensor& ids) {
  namespace F = functional;
  const std::string p = c.prefix ? "transformer." : "";
  const int64_t B = ids.size(0), T = ids.size(1), C = c.embd, H = c.heads, D = C / H;
  auto conv1d = [&](const Tensor& x, const std::string& name) {
    return matmul(x, get(w, name + ".weight")) + get(w, name + ".bias");
  };
  auto ln = [&](const Tensor& x, const std::string& name) {
    return F::layer_norm(x, get(w, name + ".weight"), get(w, name + ".bias"), c.eps);
  };
  std::vector<double> causal(T * T, 0.0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) causal[i * T + j] = -1e9;
  const Tensor mask = from_vector<double>(causal, {T, T}, TensorOptions(kFloat32));
  Tensor x = F::embedding(ids, get(w, p + "wte.weight")) +
             F::embedding(arange(T, TensorOptions(kInt64)), get(w, p + "wpe.weight"));
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string h = str(p, "h.", i, ".");
    Tensor qkv = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn");  // (B, T, 3C)
    auto heads = [&](int64_t part) {
      return qkv.narrow(2, part * C, C).reshape({B, T, H, D}).permute({0, 2, 1, 3});  // (B, H, T, D)
    };
    Tensor s = matmul(heads(0), heads(1).transpose(2, 3)) * scalar_tensor(1.0 / std::sqrt(double(D))) + mask;
    Tensor y = matmul(softmax(s, -1), heads(2)).permute({0, 2, 1, 3}).reshape({B, T, C});
    x = x + conv1d(y, h + "attn.c_proj");
    Tensor u = gelu(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc"), GeluApprox::tanh);
    x = x + conv1d(u, h + "mlp.c_proj");
  }
  return F::linear(ln(x, p + "ln_f"), get(w, p + "wte.weight"));
}

}  // namespace

TEST_CASE("load_hf_gpt2: GPT-2's names and Conv1D weights give GPT-2's forward") {
  NoGradGuard ng;
  for (bool prefix : {true, false}) {
    CAPTURE(prefix);
    Tiny c;
    c.prefix = prefix;
    TempDir d;
    const TensorMap w = c.tensors();
    c.write(d, w);
    auto model = models::load_hf_gpt2(d.str());
    CHECK(model->cfg.vocab == c.vocab);
    CHECK(model->cfg.block == c.positions);
    CHECK(model->cfg.layers == c.layers);
    CHECK(model->cfg.heads == c.heads);
    CHECK(model->cfg.embd == c.embd);
    CHECK(model->cfg.mlp_ratio == 4);
    CHECK(model->cfg.gelu == GeluApprox::tanh);
    CHECK(model->cfg.layer_norm_eps == 1e-5);
    CHECK(model->cfg.dropout == doctest::Approx(0.1));
    model->eval();

    // The same model with the weights copied in by hand.
    GPTConfig g = model->cfg;
    GPT hand(g);
    hand.eval();
    const std::string p = prefix ? "transformer." : "";
    hand.wte->weight.copy_(get(w, p + "wte.weight"));
    hand.wpe->weight.copy_(get(w, p + "wpe.weight"));
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string h = str(p, "h.", i, ".");
      auto b = hand.blocks->at<TransformerBlock>(i);
      b->ln_1->weight.copy_(get(w, h + "ln_1.weight"));
      b->ln_1->bias.copy_(get(w, h + "ln_1.bias"));
      b->attn->qkv->weight.copy_(get(w, h + "attn.c_attn.weight").t());
      b->attn->qkv->bias.copy_(get(w, h + "attn.c_attn.bias"));
      b->attn->proj->weight.copy_(get(w, h + "attn.c_proj.weight").t());
      b->attn->proj->bias.copy_(get(w, h + "attn.c_proj.bias"));
      b->ln_2->weight.copy_(get(w, h + "ln_2.weight"));
      b->ln_2->bias.copy_(get(w, h + "ln_2.bias"));
      b->fc->weight.copy_(get(w, h + "mlp.c_fc.weight").t());
      b->fc->bias.copy_(get(w, h + "mlp.c_fc.bias"));
      b->fc_proj->weight.copy_(get(w, h + "mlp.c_proj.weight").t());
      b->fc_proj->bias.copy_(get(w, h + "mlp.c_proj.bias"));
    }
    hand.ln_f->weight.copy_(get(w, p + "ln_f.weight"));
    hand.ln_f->bias.copy_(get(w, p + "ln_f.bias"));

    const Tensor ids = tokens(3, c.positions, c.vocab, 11);
    const Tensor got = model->forward(ids);
    CHECK(got.shape() == Shape{3, c.positions, c.vocab});
    CHECK(got.to_vector<float>() == hand.forward(ids).to_vector<float>());  // the same ops on the same numbers
    CHECK(rel_diff(got, gpt2_reference(w, c, ids)) < 1e-5);
    // Shorter sequences use the first positions.
    const Tensor short_ids = ids.narrow(1, 0, 5).contiguous();
    CHECK(rel_diff(model->forward(short_ids), gpt2_reference(w, c, short_ids)) < 1e-5);
  }
}

TEST_CASE("load_hf_gpt2: n_inner, the activations, eps, f16 files, a tied lm_head and the mask buffers") {
  NoGradGuard ng;
  SUBCASE("n_inner 2 * n_embd and erf GELU") {
    Tiny c;
    c.inner = 32, c.n_inner = "32", c.activation = "\"gelu\"", c.eps = 1e-6;
    TempDir d;
    const TensorMap w = c.tensors();
    c.write(d, w);
    auto m = models::load_hf_gpt2(d.str());
    CHECK(m->cfg.mlp_ratio == 2);
    CHECK(m->cfg.gelu == GeluApprox::none);
    CHECK(m->cfg.layer_norm_eps == 1e-6);
    CHECK(m->blocks->at<TransformerBlock>(0)->fc->weight.shape() == Shape{32, 16});
    CHECK(m->ln_f->eps == 1e-6);
  }
  SUBCASE("gelu_pytorch_tanh is the tanh GELU") {
    Tiny c;
    c.activation = "\"gelu_pytorch_tanh\"";
    TempDir d;
    c.write(d, c.tensors());
    CHECK(models::load_hf_gpt2(d.str())->cfg.gelu == GeluApprox::tanh);
  }
  SUBCASE("f16 tensors are read as f32") {
    Tiny c;
    TempDir d;
    TensorMap w = c.tensors();
    TensorMap half;
    for (auto& [n, t] : w) half.emplace_back(n, t.to(kFloat16));
    c.write(d, half);
    auto m = models::load_hf_gpt2(d.str());
    CHECK(m->wte->weight.dtype() == kFloat32);
    CHECK(m->wte->weight.to_vector<float>() == get(half, "transformer.wte.weight").to(kFloat32).to_vector<float>());
  }
  SUBCASE("lm_head.weight equal to wte and GPT-2's causal-mask buffers load") {
    Tiny c;
    TempDir d;
    TensorMap w = c.tensors();
    w.emplace_back("lm_head.weight", get(w, "transformer.wte.weight").clone());
    for (int64_t i = 0; i < c.layers; ++i) {
      w.emplace_back(str("transformer.h.", i, ".attn.bias"), ones({1, 1, c.positions, c.positions}));
      w.emplace_back(str("transformer.h.", i, ".attn.masked_bias"), scalar_tensor(-1e4));
    }
    c.write(d, w);
    CHECK_NOTHROW(models::load_hf_gpt2(d.str()));
  }
}

TEST_CASE("load_hf_gpt2: errors name the file, the key or the tensor") {
  Tiny c;
  const TensorMap w = c.tensors();
  auto load = [](const TempDir& d) { models::load_hf_gpt2(d.str()); };
  SUBCASE("a missing tensor names it and snug's parameter") {
    TempDir d;
    c.write(d, without(w, "transformer.h.1.mlp.c_fc.bias"));
    const std::string m = error_of<ValueError>([&] { load(d); });
    CHECK(has(m, "transformer.h.1.mlp.c_fc.bias"));
    CHECK(has(m, "blocks.1.fc.bias"));
    CHECK(has(m, "model.safetensors"));
  }
  SUBCASE("a wrong shape names the tensor and both shapes") {
    TempDir d;
    // (out, in) as a Linear would hold it, where GPT-2's Conv1D is (in, out).
    c.write(d, replaced(w, "transformer.h.0.attn.c_attn.weight", zeros({3 * c.embd, c.embd})));
    const std::string m = error_of<ValueError>([&] { load(d); });
    CHECK(has(m, "transformer.h.0.attn.c_attn.weight"));
    CHECK(has(m, "[48, 16]"));
    CHECK(has(m, "[16, 48]"));
  }
  SUBCASE("an unknown activation") {
    Tiny bad = c;
    bad.activation = "\"relu\"";
    TempDir d;
    bad.write(d, w);
    const std::string m = error_of<ValueError>([&] { load(d); });
    CHECK(has(m, "activation_function"));
    CHECK(has(m, "relu"));
    CHECK(has(m, "config.json"));
  }
  SUBCASE("n_inner that is not a multiple of n_embd") {
    Tiny bad = c;
    bad.n_inner = "24";
    TempDir d;
    bad.write(d, w);
    CHECK(has(error_of<ValueError>([&] { load(d); }), "n_inner 24"));
  }
  SUBCASE("malformed config.json names the file") {
    TempDir d;
    c.write(d, w);
    write_text(d.path / "config.json", "{\"vocab_size\": 37, \"n_embd\": }");
    const std::string m = error_of<IOError>([&] { load(d); });
    CHECK(has(m, (d.path / "config.json").string()));
    CHECK(has(m, "malformed JSON"));
    write_text(d.path / "config.json", "[1, 2]");
    CHECK(has(error_of<IOError>([&] { load(d); }), "must be a JSON object"));
  }
  SUBCASE("a missing or mistyped configuration key") {
    TempDir d;
    c.write(d, w);
    std::string cfg = c.config();
    write_text(d.path / "config.json", std::regex_replace(cfg, std::regex("\"n_head\": 2, "), ""));
    std::string m = error_of<IOError>([&] { load(d); });
    CHECK(has(m, "config.json"));
    CHECK(has(m, "\"n_head\""));
    write_text(d.path / "config.json", std::regex_replace(cfg, std::regex("\"n_head\": 2"), "\"n_head\": \"2\""));
    CHECK(has(error_of<IOError>([&] { load(d); }), "\"n_head\" must be an integer"));
  }
  SUBCASE("no config.json, no model.safetensors") {
    TempDir d;
    CHECK(has(error_of<IOError>([&] { load(d); }), "config.json"));
    write_text(d.path / "config.json", c.config());
    CHECK(has(error_of<IOError>([&] { load(d); }), "model.safetensors: no such file"));
  }
  SUBCASE("an unexpected tensor") {
    TempDir d;
    TensorMap more = w;
    more.emplace_back("transformer.h.0.attn.rotary.weight", zeros({4}));
    more.emplace_back("transformer.h.2.ln_1.weight", zeros({c.embd}));  // a third layer
    c.write(d, more);
    const std::string m = error_of<ValueError>([&] { load(d); });
    CHECK(has(m, "transformer.h.0.attn.rotary.weight"));
    CHECK(has(m, "transformer.h.2.ln_1.weight"));
  }
  SUBCASE("an lm_head that is not wte") {
    TempDir d;
    TensorMap more = w;
    more.emplace_back("lm_head.weight", zeros({c.vocab, c.embd}));
    c.write(d, more);
    CHECK(has(error_of<ValueError>([&] { load(d); }), "lm_head.weight"));
  }
  SUBCASE("a setting snug's GPT does not have") {
    TempDir d;
    c.write(d, w);
    write_text(d.path / "config.json",
               std::regex_replace(c.config(), std::regex("\"scale_attn_weights\": true"),
                                  "\"scale_attn_weights\": true, \"scale_attn_by_inverse_layer_idx\": true"));
    CHECK(has(error_of<ValueError>([&] { load(d); }), "scale_attn_by_inverse_layer_idx"));
  }
}

TEST_CASE("read_hf_config: top-level keys with their values as JSON text") {
  TempDir d;
  const fs::path p = d.path / "config.json";
  write_text(p, "{\"n_embd\": 768, \"activation_function\": \"gelu\", \"n_inner\": null, \"eps\": 1e-05, "
                "\"nested\": {\"a\": [1, 2]}, \"flag\": true}");
  const auto m = models::read_hf_config(p.string());
  CHECK(m.size() == 6);
  CHECK(m.at("n_embd") == "768");
  CHECK(m.at("activation_function") == "\"gelu\"");
  CHECK(m.at("n_inner") == "null");
  CHECK(std::stod(m.at("eps")) == 1e-5);
  CHECK(m.at("nested") == "{\"a\":[1,2]}");
  CHECK(m.at("flag") == "true");
  write_text(p, "{\"a\": 1,");
  const std::string e = error_of<IOError>([&] { models::read_hf_config(p.string()); });
  CHECK(has(e, p.string()));
  CHECK(has(e, "byte offset"));
  CHECK(has(error_of<IOError>([&] { models::read_hf_config((d.path / "none.json").string()); }), "none.json"));
}

TEST_CASE("GPTConfig: GPT-2's fields in checkpoint metadata; older files read the defaults") {
  GPTConfig c;
  CHECK(c.gelu == GeluApprox::none);
  CHECK(c.mlp_ratio == 4);
  CHECK(c.layer_norm_eps == 1e-5);
  CHECK(GPT(c).repr() == "GPT(vocab=65, block=128, layers=4, heads=4, embd=128)");
  c.gelu = GeluApprox::tanh, c.mlp_ratio = 3, c.layer_norm_eps = 1e-6;
  auto md = c.to_metadata();
  CHECK(md.at("gpt.gelu") == "tanh");
  CHECK(md.at("gpt.mlp_ratio") == "3");
  auto back = GPTConfig::from_metadata(md, "f");
  REQUIRE(back.has_value());
  CHECK(back->gelu == GeluApprox::tanh);
  CHECK(back->mlp_ratio == 3);
  CHECK(back->layer_norm_eps == 1e-6);
  for (const char* k : {"gpt.gelu", "gpt.mlp_ratio", "gpt.layer_norm_eps"}) md.erase(k);
  back = GPTConfig::from_metadata(md, "f");
  CHECK(back->gelu == GeluApprox::none);
  CHECK(back->mlp_ratio == 4);
  CHECK(back->layer_norm_eps == 1e-5);
  md["gpt.gelu"] = "sigmoid";
  CHECK(has(error_of<IOError>([&] { GPTConfig::from_metadata(md, "run.safetensors"); }), "gpt.gelu"));
  md["gpt.gelu"] = "none";
  md["gpt.mlp_ratio"] = "0";
  CHECK(has(error_of<IOError>([&] { GPTConfig::from_metadata(md, "f"); }), "mlp_ratio must be >= 1"));
  // The block options follow the config.
  GPTConfig t;
  t.layers = 1, t.gelu = GeluApprox::tanh, t.layer_norm_eps = 1e-6, t.mlp_ratio = 2;
  GPT m(t);
  auto b = m.blocks->at<TransformerBlock>(0);
  CHECK(b->options.gelu == GeluApprox::tanh);
  CHECK(b->options.norm_first);
  CHECK(b->ln_1->eps == 1e-6);
  CHECK(b->fc->out_features == 2 * t.embd);
  CHECK(m.ln_f->eps == 1e-6);
}

// SPDX-License-Identifier: MIT
// The W-GPT model (docs/workloads.md): parameter count, shapes, the tied
// LM head, initialization, and that it learns.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include "test_util.h"

using namespace snug;
using namespace snug::nn;
using models::GPT;
using models::GPTConfig;

namespace {

Tensor tokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  return randint(0, vocab, {B, T}, TensorOptions(kInt64), &g);
}
std::pair<double, double> mean_std(const Tensor& t) {
  auto v = t.to_vector<double>();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= v.size();
  for (double x : v) s += (x - m) * (x - m);
  return {m, std::sqrt(s / v.size())};
}

}  // namespace

TEST_CASE("W-GPT default config: 818,048 parameters, the layout of docs/workloads.md") {
  manual_seed(1337);
  GPT m(GPTConfig{});
  CHECK(m.cfg.vocab == 65);
  CHECK(m.cfg.block == 128);
  CHECK(m.num_parameters() == 818048);
  // By hand: wte 65*128 + wpe 128*128 + 4 blocks * (2 LN * 256 + qkv 128*384+384 +
  // proj 128*128+128 + fc 128*512+512 + fc_proj 512*128+128) + ln_f 256.
  const int64_t block = 2 * 256 + (128 * 384 + 384) + (128 * 128 + 128) + (128 * 512 + 512) + (512 * 128 + 128);
  CHECK(m.num_parameters() == 65 * 128 + 128 * 128 + 4 * block + 256);
  // No separate head parameter: the head is wte.weight.
  for (auto& [n, t] : m.named_parameters()) {
    CHECK(n.find("head") == std::string::npos);
    CHECK(n.find("lm") == std::string::npos);
  }
  CHECK(m.named_parameters().size() == 2 + 4 * 12 + 2);
  CHECK(m.blocks->size() == 4);
}

TEST_CASE("GPT forward: (B, T) -> (B, T, vocab); T > block and bad shapes rejected") {
  manual_seed(1);
  GPT m(GPTConfig{});
  Tensor y = m.forward(tokens(2, 16, 65, 2));
  CHECK(y.shape() == Shape{2, 16, 65});
  CHECK(y.dtype() == kFloat32);
  GPTConfig small;
  small.block = 8;
  small.layers = 1;
  small.embd = 16;
  small.heads = 2;
  GPT s(small);
  CHECK(s.forward(tokens(1, 8, 65, 3)).shape() == Shape{1, 8, 65});
  CHECK(s.forward(tokens(3, 1, 65, 3)).shape() == Shape{3, 1, 65});
  try {
    s.forward(tokens(1, 9, 65, 3));
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    CHECK(msg.find("9") != std::string::npos);
    CHECK(msg.find("8") != std::string::npos);
  }
  CHECK_THROWS_AS(s.forward(zeros({4}, kInt64)), ShapeError);
  CHECK_THROWS_AS(s.forward(from_vector<int64_t>({65}, {1, 1}, TensorOptions(kInt64))), IndexError);
  GPTConfig bad = small;
  bad.heads = 3;
  CHECK_THROWS_AS(GPT{bad}, ValueError);
}

TEST_CASE("the LM head is tied to wte.weight") {
  manual_seed(4);
  GPTConfig c;
  c.layers = 1;
  c.block = 16;
  GPT m(c);
  // Inputs avoid token 64, so its wte row only enters through the head.
  Tensor x = tokens(2, 10, 64, 5);
  Tensor y0 = m.forward(x);
  {
    NoGradGuard ng;
    // Scaled, not shifted: the final LayerNorm's output sums to ~0 over the
    // width, so adding a constant to the row left a logit unchanged by luck.
    m.wte->weight.select(0, 64).mul_(3.0);
  }
  Tensor y1 = m.forward(x);
  // Only the logits of token 64 change, and the rest are bit-identical.
  Tensor a = y0.contiguous(), b = y1.contiguous();
  auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  int changed = 0, same_other = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    if (i % 65 == 64)
      changed += av[i] != bv[i];
    else
      same_other += av[i] == bv[i];
  }
  CHECK(changed == 20);
  CHECK(same_other == 20 * 64);
  // Its gradient gets the head's contribution: row 64 is non-zero though never looked up.
  m.zero_grad();
  m.loss(x, tokens(2, 10, 65, 6)).backward();
  auto row = m.wte->weight.grad().select(0, 64).to_vector<double>();
  double n = 0;
  for (double v : row) n += v * v;
  CHECK(n > 0);
}

TEST_CASE("init: N(0, 0.02) weights, N(0, 0.02/sqrt(2 L)) output projections, zero biases, unit LayerNorm") {
  manual_seed(1337);
  GPT m(GPTConfig{});
  auto check_std = [](const Tensor& t, double want, const char* what) {
    const auto ms = mean_std(t);
    const double mu = ms.first, sd = ms.second;
    INFO(what, ": mean ", mu, " std ", sd, " want ", want);
    CHECK(std::fabs(mu) < 0.1 * want);
    CHECK(sd == doctest::Approx(want).epsilon(0.05));
  };
  check_std(m.wte->weight, 0.02, "wte");
  check_std(m.wpe->weight, 0.02, "wpe");
  const double proj = 0.02 / std::sqrt(8.0);
  for (size_t i = 0; i < m.blocks->size(); ++i) {
    auto blk = m.blocks->at<TransformerBlock>(i);
    REQUIRE(blk != nullptr);
    check_std(blk->attn->qkv->weight, 0.02, "qkv");
    check_std(blk->fc->weight, 0.02, "fc");
    check_std(blk->attn->proj->weight, proj, "attn.proj");
    check_std(blk->fc_proj->weight, proj, "fc_proj");
    for (const Tensor& b : {blk->attn->qkv->bias, blk->attn->proj->bias, blk->fc->bias, blk->fc_proj->bias})
      for (double v : b.to_vector<double>()) CHECK(v == 0.0);
    for (double v : blk->ln_1->weight.to_vector<double>()) CHECK(v == 1.0);
  }
  for (double v : m.ln_f->bias.to_vector<double>()) CHECK(v == 0.0);
  // The same seed gives the same model.
  manual_seed(1337);
  GPT m2(GPTConfig{});
  CHECK(m2.wte->weight.to_vector<float>() == m.wte->weight.to_vector<float>());
}

TEST_CASE("initial loss is about ln(65) and AdamW on a repeated batch reduces it") {
  manual_seed(1337);
  GPT m(GPTConfig{});
  Tensor x = tokens(1, 24, 65, 7), y = tokens(1, 24, 65, 8);
  optim::AdamW opt(m.parameters(), {.lr = 3e-3, .weight_decay = 0.01});
  std::vector<double> losses;
  for (int s = 0; s < 5; ++s) {
    opt.zero_grad();
    Tensor loss = m.loss(x, y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  CHECK(losses[0] == doctest::Approx(std::log(65.0)).epsilon(0.02));
  for (double l : losses) CHECK(std::isfinite(l));
  CHECK(losses.back() < losses.front() - 0.3);
  for (int s = 1; s < 5; ++s) CHECK(losses[s] < losses[0]);
  // loss() equals cross-entropy of forward()'s logits computed naively.
  NoGradGuard ng;
  Tensor logits = m.forward(x).contiguous();
  auto lv = logits.to_vector<double>();
  auto yv = y.to_vector<int64_t>();
  double total = 0;
  for (size_t r = 0; r < yv.size(); ++r) {
    double mx = -INFINITY, z = 0;
    for (int c = 0; c < 65; ++c) mx = std::max(mx, lv[r * 65 + c]);
    for (int c = 0; c < 65; ++c) z += std::exp(lv[r * 65 + c] - mx);
    total += mx + std::log(z) - lv[r * 65 + yv[r]];
  }
  CHECK(m.loss(x, y).item() == doctest::Approx(total / yv.size()).epsilon(1e-5));
  CHECK(m.repr() == "GPT(vocab=65, block=128, layers=4, heads=4, embd=128)");
}

TEST_CASE("GPTConfig: each invalid field is an error naming that field and its value") {
  using snug::testing::error_of;
  struct Case {
    const char* name;
    GPTConfig cfg;
    std::string want;
  };
  auto with = [](auto set) {
    GPTConfig c;
    set(c);
    return c;
  };
  const std::vector<Case> cases = {
      {"layers 0", with([](GPTConfig& c) { c.layers = 0; }), "layers must be >= 1, got 0"},
      {"block 0", with([](GPTConfig& c) { c.block = 0; }), "block must be >= 1, got 0"},
      {"vocab -3", with([](GPTConfig& c) { c.vocab = -3; }), "vocab must be >= 1, got -3"},
      {"embd 0", with([](GPTConfig& c) { c.embd = 0; }), "embd must be >= 1, got 0"},
      {"heads 0", with([](GPTConfig& c) { c.heads = 0; }), "heads must be >= 1, got 0"},
      {"embd 100 heads 3", with([](GPTConfig& c) { c.embd = 100, c.heads = 3; }),
       "embd 100 must be a multiple of heads 3"},
      {"dropout 1", with([](GPTConfig& c) { c.dropout = 1; }), "dropout must be in [0, 1), got 1"},
      {"dropout -0.5", with([](GPTConfig& c) { c.dropout = -0.5; }), "dropout must be in [0, 1), got -0.5"},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.name));
    const std::string m = error_of<ValueError>([&] { GPT g(c.cfg); });
    INFO("message: ", m);
    CHECK(m.find(c.want) != std::string::npos);
    CHECK(m.find("GPTConfig") != std::string::npos);
    CHECK_THROWS_AS(c.cfg.validate(), ValueError);
  }
  CHECK_NOTHROW(GPTConfig{}.validate());
}

TEST_CASE("GPTConfig round-trips through checkpoint metadata; missing or malformed entries are IOErrors") {
  using snug::testing::error_of;
  GPTConfig c{.vocab = 70, .block = 32, .layers = 6, .heads = 2, .embd = 48, .dropout = 0.1};
  const auto md = c.to_metadata();
  CHECK(md.at("gpt.layers") == "6");
  const std::optional<GPTConfig> back = GPTConfig::from_metadata(md, "run.safetensors");
  REQUIRE(back.has_value());
  CHECK(back->vocab == 70);
  CHECK(back->block == 32);
  CHECK(back->layers == 6);
  CHECK(back->heads == 2);
  CHECK(back->embd == 48);
  CHECK(back->dropout == 0.1);
  // No configuration at all: nullopt (the caller decides).
  CHECK_FALSE(GPTConfig::from_metadata({{"step", "3"}, {"model", "x"}}, "f").has_value());
  // Files from before dropout was recorded.
  auto no_dropout = md;
  no_dropout.erase("gpt.dropout");
  CHECK(GPTConfig::from_metadata(no_dropout, "f")->dropout == 0.0);
  auto missing = md;
  missing.erase("gpt.heads");
  std::string m = error_of<IOError>([&] { GPTConfig::from_metadata(missing, "run.safetensors"); });
  CHECK(m.find("run.safetensors") != std::string::npos);
  CHECK(m.find("gpt.heads") != std::string::npos);
  auto bad = md;
  bad["gpt.layers"] = "6x";
  CHECK(error_of<IOError>([&] { GPTConfig::from_metadata(bad, "f"); }).find("\"6x\"") != std::string::npos);
  bad["gpt.layers"] = "0";
  CHECK(error_of<IOError>([&] { GPTConfig::from_metadata(bad, "f"); }).find("layers must be >= 1") !=
        std::string::npos);
}

// SPDX-License-Identifier: MIT
#include <snug/parallel/layer_stack.h>

#include <unordered_set>

#include <snug/nn/functional.h>
#include <snug/nn/layers.h>

namespace snug::parallel {

namespace F = nn::functional;

std::vector<Tensor> LayerStack::parameters() const {
  std::vector<Tensor> out;
  std::unordered_set<const void*> seen;
  for (const auto& l : layers)
    for (const Tensor& p : l->parameters())
      if (seen.insert(p.impl()).second) out.push_back(p);
  return out;
}

Device layer_device(const nn::Module& layer) {
  auto ps = layer.parameters();
  if (!ps.empty()) return ps.front().device();
  auto bs = layer.named_buffers();
  return bs.empty() ? kCPU : bs.front().second.device();
}

Tensor run_stack(const LayerStack& stack, Tensor x) {
  for (const auto& l : stack.layers) {
    const bool has_state = !l->parameters().empty() || !l->named_buffers().empty();
    if (has_state) {
      const Device d = layer_device(*l);
      if (x.device() != d) x = x.to(d);
    }
    x = l->forward(x);
  }
  return x;
}

namespace {

// tokens (B, T) i64 -> (B, T, C)
class GPTEmbed : public nn::Module {
 public:
  explicit GPTEmbed(nn::models::GPT& g) : Module("GPTEmbed"), gpt_(g) {
    register_module("wte", g.wte);
    register_module("wpe", g.wpe);
    register_module("drop", g.drop);
  }
  Tensor forward(const Tensor& tokens) override { return gpt_.embed(tokens); }
  std::string repr() const override { return "GPTEmbed"; }

 private:
  nn::models::GPT& gpt_;
};

// (B, T, C) -> logits (B, T, V). ln_f is registered here; the tied weight is
// not (the embed layer owns it), so moving this layer leaves it in place.
class GPTHead : public nn::Module {
 public:
  explicit GPTHead(nn::models::GPT& g) : Module("GPTHead"), gpt_(g) { register_module("ln_f", g.ln_f); }
  Tensor forward(const Tensor& x) override {
    Tensor w = gpt_.wte->weight;  // (V, C)
    if (w.device() != x.device()) w = w.to(x.device());
    return F::linear(gpt_.ln_f->forward(x), w);
  }
  std::string repr() const override { return "GPTHead"; }

 private:
  nn::models::GPT& gpt_;
};

}  // namespace

LayerStack gpt_stack(nn::models::GPT& gpt) {
  LayerStack s;
  s.layers.push_back(std::make_shared<GPTEmbed>(gpt));
  s.names.push_back("embed");
  int i = 0;
  for (const auto& b : *gpt.blocks) {
    s.layers.push_back(b);
    s.names.push_back(str("block ", i++));
  }
  s.layers.push_back(std::make_shared<GPTHead>(gpt));
  s.names.push_back("head");
  const int64_t V = gpt.cfg.vocab;
  s.loss = [V](const Tensor& logits, const Tensor& targets) {
    return F::cross_entropy(logits.view({-1, V}), targets.reshape({-1}));
  };
  return s;
}

LayerStack sequential_stack(nn::Sequential& seq) {
  LayerStack s;
  for (size_t i = 0; i < seq.size(); ++i) {
    s.layers.push_back(seq[i]);
    s.names.push_back(str(i, " ", seq[i]->repr()));
  }
  s.loss = [](const Tensor& logits, const Tensor& labels) { return F::cross_entropy(logits, labels); };
  return s;
}

}  // namespace snug::parallel

// SPDX-License-Identifier: MIT
// The strategies, one at a time, each against the same baseline: the same
// initial weights, the same batches, the same number of steps. Only the one
// thing a strategy changes differs from baseline, so its row of the table
// says what that one thing buys (docs/memory_tour.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/memory/stats.h>
#include <snug/nn/accumulate.h>
#include <snug/nn/optim/adamw8bit.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/prune/compact.h>
#include <snug/prune/prune.h>
#include <snug/quant/convert.h>

#include "memory_tour/tour.h"

namespace memory_tour {

using namespace snug;
using memory::Tag;
using nn::models::GPT;

namespace {

// splitmix64: a seeded stream of window offsets that is the same on every
// platform (std::uniform_int_distribution is not).
uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<Batch> draw(const std::vector<int64_t>& tokens, int64_t n, int64_t B, int64_t T, uint64_t seed) {
  SNUG_CHECK(int64_t(tokens.size()) > T + 1, ValueError, "memory_tour: a split of ", tokens.size(),
             " characters is too short for --block ", T);
  const uint64_t span = tokens.size() - uint64_t(T) - 1;
  std::vector<Batch> out(static_cast<size_t>(n));
  for (Batch& b : out)
    for (int64_t r = 0; r < B; ++r) {
      const size_t off = size_t(splitmix(seed) % span);
      b.x.insert(b.x.end(), tokens.begin() + off, tokens.begin() + off + T);
      b.y.insert(b.y.end(), tokens.begin() + off + 1, tokens.begin() + off + T + 1);
    }
  return out;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Weights to_plain(const nn::Module& m) {
  Weights w;
  for (auto& [n, t] : m.named_parameters()) w[n] = t.to_vector<float>();
  return w;
}

// A GPT holding `w` on `device`: its parameters tagged `parameter` (the timeline's colour for them).
std::unique_ptr<GPT> make_model(const Tour& t, const Weights& w, Device device) {
  memory::TagScope tag(Tag::parameter);
  auto m = std::make_unique<GPT>(t.cfg);
  autograd::NoGradGuard ng;
  for (auto& [n, p] : m->named_parameters()) p.copy_(from_vector(w.at(n), p.shape()));
  if (device != kCPU) m->to(device);
  return m;
}

Device device_of(const nn::Module& m) { return m.parameters().front().device(); }

// Batch b on `device`.
std::pair<Tensor, Tensor> tensors(const Tour& t, const Batch& b, Device device) {
  memory::TagScope tag(Tag::data);
  const int64_t B = int64_t(b.x.size()) / t.f.block;
  return {from_vector(b.x, {B, t.f.block}).to(device), from_vector(b.y, {B, t.f.block}).to(device)};
}

// The measured window on `device`: what the previous strategy left in the cache
// is given back to the system (so reserved starts from what is live) and the peaks restart.
void begin_measure(Device device) {
  memory::empty_cache(device);
  memory::reset_peak(device);
}

void end_measure(Result& r, const nn::Module& m) {
  const memory::DeviceStats st = memory::stats(device_of(m));
  r.peak_allocated = st.allocated_bytes.peak;
  r.peak_reserved = st.reserved_bytes.peak;
  for (int k = 0; k < memory::kNumTags; ++k) r.tag_peak[size_t(k)] = st.tag_bytes[size_t(k)].peak;
  r.params = 0;
  for (const Tensor& p : m.parameters()) r.params += p.numel();
  r.model_bytes = int64_t(quant::model_bytes(m));
}

// With --snapshot-steps N the history skips each strategy's steps after the
// N-th (and the validation after training) but keeps its set-up and its
// tear-down, so the timeline shows every strategy and stays small enough to open.
void recording(const Tour& t, bool on) {
  if (!t.f.snapshot.empty() && t.f.snapshot_steps > 0) memory::record_history(on, kHistoryEntries);
}

// Mean loss over the validation batches, under no_grad; `ms` gets each pass's time.
double evaluate(GPT& m, const Tour& t, std::vector<double>* ms = nullptr) {
  autograd::NoGradGuard ng;
  m.eval();
  double sum = 0;
  for (const Batch& b : t.val) {
    if (ms && int64_t(ms->size()) == t.f.snapshot_steps) recording(t, false);
    auto [x, y] = tensors(t, b, device_of(m));
    const double t0 = now_ms();
    memory::TagScope tag(Tag::activation);
    sum += m.loss(x, y).item();
    if (ms) ms->push_back(now_ms() - t0);
  }
  m.train();
  return sum / double(std::max<size_t>(t.val.size(), 1));
}

// How a training strategy differs from baseline.
struct Variant {
  int64_t accum = 1;            // micro-batches per step (GradAccumulator)
  bool amp = false;             // bf16 autocast
  bool checkpointing = false;   // GPT::checkpointing: every block its own segment
  bool adamw8bit = false;       // nn::optim::AdamW8bit instead of AdamW
  bool prune = false;           // heads and MLP channels pruned and compacted, from the trained weights
};

Result train(Tour& t, const std::string& name, const std::string& what, const Variant& v) {
  Result r;
  r.name = name, r.what = what, r.steps = t.f.steps;
  auto m = make_model(t, v.prune ? t.trained : t.init, Device(t.f.device));
  if (v.checkpointing) m->checkpointing = nn::balanced_plan(t.cfg.layers, t.cfg.layers);
  std::unique_ptr<nn::optim::Optimizer> opt;
  if (v.adamw8bit)
    opt = std::make_unique<nn::optim::AdamW8bit>(m->parameters(), nn::optim::AdamW8bitOptions{.lr = t.f.lr});
  else
    opt = std::make_unique<nn::optim::AdamW>(m->parameters(), nn::optim::AdamWOptions{.lr = t.f.lr});
  if (v.prune) {
    for (size_t i = 0; i < m->blocks->size(); ++i) {
      auto blk = m->blocks->at<nn::TransformerBlock>(i);
      prune::attention_heads(*blk->attn, t.f.prune);
      prune::output_channels(*blk->fc, t.f.prune);
    }
    memory::TagScope tag(Tag::parameter);
    const prune::CompactReport rep = prune::compact(*m, opt.get());
    prune::remove_all(*m);  // the masks are all ones now: drop them
    if (!t.f.json)
      std::fprintf(stderr, "pruned: %zu layers compacted, parameters %.2f -> %.2f MiB\n", rep.layers.size(),
                   double(rep.param_bytes_before) / 1048576.0, double(rep.param_bytes_after) / 1048576.0);
  }
  begin_measure(device_of(*m));
  std::vector<double> ms;
  for (const Batch& b : t.train) {
    if (int64_t(ms.size()) == t.f.snapshot_steps) recording(t, false);
    auto [x, y] = tensors(t, b, device_of(*m));
    const double t0 = now_ms();
    opt->zero_grad();
    double loss = 0;
    {
      AutocastGuard ac(DType::bf16, v.amp);  // off unless v.amp; one scope per step
      const std::vector<Tensor> xs = nn::split_batch(x, v.accum), ys = nn::split_batch(y, v.accum);
      nn::GradAccumulator acc = nn::GradAccumulator::equal(v.accum);
      for (int64_t k = 0; k < v.accum; ++k) {
        Tensor l;
        {
          memory::TagScope tag(Tag::activation);  // what the forward keeps for backward
          l = m->loss(xs[size_t(k)], ys[size_t(k)]);
        }
        acc.backward(l);
      }
      loss = acc.loss();
    }
    opt->step();
    ms.push_back(now_ms() - t0);
    r.train_loss = loss;
  }
  end_measure(r, *m);
  // The first step allocates the optimizer's state and fills the cache: past it when there is more than one.
  r.step_ms = median(ms.size() > 1 ? std::vector<double>(ms.begin() + 1, ms.end()) : ms);
  recording(t, false);
  r.loss = evaluate(*m, t);
  if (name == "baseline") t.trained = to_plain(*m);
  recording(t, true);  // the tear-down: the model and the optimizer state freed
  return r;
}

// An evaluation strategy: the trained weights, forward passes only, under no_grad.
Result eval_only(Tour& t, const std::string& name, const std::string& what, bool int8) {
  Result r;
  r.name = name, r.what = what, r.steps = int64_t(t.val.size());
  auto m = make_model(t, t.trained, int8 ? kCPU : Device(t.f.device));  // int8 kernels are CPU kernels
  if (int8) {
    memory::TagScope tag(Tag::parameter);
    quant::quantize_dynamic(*m);  // says on stderr which layers stay in float, and why
  }
  begin_measure(device_of(*m));
  std::vector<double> ms;
  r.loss = evaluate(*m, t, &ms);
  end_measure(r, *m);
  r.step_ms = median(ms);
  recording(t, true);
  return r;
}

}  // namespace

Tour make_tour(const Flags& f) {
  std::ifstream in(f.data, std::ios::binary);
  SNUG_CHECK(in.good(), IOError, "memory_tour: cannot open data file \"", f.data, "\" (pass --data FILE)");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  SNUG_CHECK(text.size() > 1000, IOError, "memory_tour: data file \"", f.data, "\" has only ", text.size(),
             " bytes; need a text of at least 1000 characters");
  const std::set<char> chars(text.begin(), text.end());
  std::map<char, int64_t> stoi;
  for (char c : chars) stoi.emplace(c, int64_t(stoi.size()));
  std::vector<int64_t> train, val;
  const size_t n_train = text.size() * 9 / 10;
  for (size_t i = 0; i < text.size(); ++i) (i < n_train ? train : val).push_back(stoi[text[i]]);

  Tour t;
  t.f = f;
  t.cfg.vocab = int64_t(chars.size()), t.cfg.block = f.block, t.cfg.layers = f.layers;
  t.cfg.heads = f.heads, t.cfg.embd = f.embd;
  t.cfg.validate();
  t.train = draw(train, f.steps, f.batch, f.block, uint64_t(f.seed));
  t.val = draw(val, f.eval_batches, f.batch, f.block, uint64_t(f.seed) ^ 0x5eedULL);
  manual_seed(uint64_t(f.seed));
  t.init = to_plain(GPT(t.cfg));
  return t;
}

std::vector<Result> run_all(Tour& t) {
  std::vector<Result> out;
  out.push_back(train(t, "baseline", "f32, AdamW, every activation kept", {}));
  out.push_back(eval_only(t, "no_grad", "the trained model evaluated under NoGradGuard", false));
  out.push_back(train(t, "accum", "the batch as --accum micro-batches (GradAccumulator)", {.accum = t.f.accum}));
  out.push_back(train(t, "amp", "bf16 autocast (AutocastGuard)", {.amp = true}));
  out.push_back(train(t, "checkpoint", "GPT::checkpointing = balanced_plan(layers, layers)", {.checkpointing = true}));
  out.push_back(train(t, "adamw8bit", "AdamW8bit: 8-bit optimizer state", {.adamw8bit = true}));
  out.push_back(train(t, "pruned", "heads and MLP channels pruned, compacted, fine-tuned", {.prune = true}));
  out.push_back(eval_only(t, "int8", "the trained model's Linears as int8 (quantize_dynamic)", true));
  return out;
}

}  // namespace memory_tour

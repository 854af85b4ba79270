// SPDX-License-Identifier: MIT
#include <snug/prune/channel_groups.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_ops.h>
#include <snug/nn/conv.h>
#include <snug/nn/layers.h>
#include <snug/nn/models/resnet.h>
#include <snug/prune/prune.h>

namespace snug::prune {

namespace {

// A Linear, or a Conv2d whose channels are not grouped; null otherwise.
Tensor* weight_of(nn::Module* m) {
  if (auto* l = dynamic_cast<nn::Linear*>(m)) return &l->weight;
  if (auto* c = dynamic_cast<nn::Conv2d*>(m); c && c->groups == 1) return &c->weight;
  return nullptr;
}
Tensor* bias_of(nn::Module* m) {
  if (auto* l = dynamic_cast<nn::Linear*>(m)) return &l->bias;
  return &dynamic_cast<nn::Conv2d*>(m)->bias;
}

std::vector<float> floats(const Tensor& t) { return raw::contiguous(raw::to_dtype(t, DType::f32)).to_vector<float>(); }

Tensor index_tensor(const std::vector<int64_t>& idx) { return from_vector(idx, {int64_t(idx.size())}, DType::i64); }

// Per channel: does this source emit exactly zero there?
std::vector<bool> source_zero(const ChannelSource& s, int64_t C) {
  std::vector<bool> zero(size_t(C), false);
  if (s.norm) {
    // Normalized and then scaled by 0 and shifted by 0: zero whatever came in.
    // A norm without affine parameters emits -mean/std in eval mode: never zero.
    if (!s.norm->weight.defined()) return zero;
    const std::vector<float> w = floats(s.norm->weight), b = floats(s.norm->bias);
    for (int64_t c = 0; c < C; ++c) zero[size_t(c)] = w[size_t(c)] == 0.0f && b[size_t(c)] == 0.0f;
    return zero;
  }
  const Tensor& W = *weight_of(s.layer);
  const int64_t rest = W.numel() / C;
  const std::vector<float> w = floats(W);
  const Tensor& B = *bias_of(s.layer);
  const std::vector<float> b = B.defined() ? floats(B) : std::vector<float>(size_t(C), 0.0f);
  for (int64_t c = 0; c < C; ++c) {
    bool z = b[size_t(c)] == 0.0f;
    for (int64_t j = 0; j < rest && z; ++j) z = w[size_t(c * rest + j)] == 0.0f;
    zero[size_t(c)] = z;
  }
  return zero;
}

// A source's own importance per channel (see prune_group).
std::vector<double> source_score(const ChannelSource& s, int64_t C, double n) {
  std::vector<double> score(size_t(C), 0.0);
  if (s.norm && s.norm->weight.defined()) {
    const std::vector<float> w = floats(s.norm->weight);
    for (int64_t c = 0; c < C; ++c) score[size_t(c)] = std::fabs(double(w[size_t(c)]));
    return score;
  }
  const Tensor& W = *weight_of(s.layer);
  const int64_t rest = W.numel() / C;
  const std::vector<float> w = floats(W);
  for (int64_t c = 0; c < C; ++c) {
    double acc = 0;
    for (int64_t j = 0; j < rest; ++j) {
      const double v = std::fabs(double(w[size_t(c * rest + j)]));
      acc = std::isinf(n) ? std::max(acc, v) : acc + std::pow(v, n);
    }
    score[size_t(c)] = std::isinf(n) ? acc : std::pow(acc, 1.0 / n);
  }
  return score;
}

// Masks `rows` (0/1 per channel) along dim 0 of parameter `name` of m.
void mask_rows(nn::Module& m, const std::string& name, const Tensor& p, const std::vector<float>& rows) {
  const int64_t C = p.size(0), rest = p.numel() / C;
  std::vector<float> mk(size_t(p.numel()));
  for (int64_t i = 0; i < p.numel(); ++i) mk[size_t(i)] = rows[size_t(i / rest)];
  custom_from_mask(m, name, from_vector(mk, p.shape()));
}

}  // namespace

int64_t group_channels(const ChannelGroup& g) {
  SNUG_CHECK(!g.sources.empty(), ValueError, "prune: channel group \"", g.name, "\" has no sources");
  int64_t C = -1;
  for (const ChannelSource& s : g.sources) {
    Tensor* W = s.layer ? weight_of(s.layer) : nullptr;
    SNUG_CHECK(W != nullptr, ValueError, "prune: source \"", s.name, "\" of channel group \"", g.name,
               "\" is ", s.layer ? s.layer->repr() : std::string("null"),
               "; a source must be a Linear or a Conv2d with groups == 1");
    if (C < 0) C = W->size(0);
    SNUG_CHECK(W->size(0) == C, ShapeError, "prune: channel group \"", g.name, "\": source \"", s.name,
               "\" has weight ", shape_str(W->shape()), " with ", W->size(0), " output channels, the group has ", C);
    const Tensor& B = *bias_of(s.layer);
    SNUG_CHECK(!B.defined() || (B.dim() == 1 && B.size(0) == C), ShapeError, "prune: channel group \"", g.name,
               "\": source \"", s.name, "\" has bias ", shape_str(B.shape()), ", expected (", C, ")");
    SNUG_CHECK(!s.norm || (s.norm->num_features == C && s.norm->running_mean.numel() == C), ShapeError,
               "prune: channel group \"", g.name, "\": the norm after \"", s.name, "\" has ",
               s.norm ? s.norm->num_features : 0, " channels, the group has ", C);
  }
  for (const ChannelSink& k : g.sinks) {
    Tensor* W = k.layer ? weight_of(k.layer) : nullptr;
    SNUG_CHECK(W != nullptr, ValueError, "prune: sink \"", k.name, "\" of channel group \"", g.name, "\" is ",
               k.layer ? k.layer->repr() : std::string("null"),
               "; a sink must be a Linear or a Conv2d with groups == 1");
    SNUG_CHECK(k.block >= 1 && W->size(1) == C * k.block, ShapeError, "prune: channel group \"", g.name,
               "\": sink \"", k.name, "\" has weight ", shape_str(W->shape()), ", expected ", C, " x ", k.block,
               " = ", C * k.block, " input columns in dim 1");
  }
  return C;
}

std::vector<int64_t> dead_channels(const ChannelGroup& g) {
  const int64_t C = group_channels(g);
  std::vector<bool> dead(size_t(C), true);
  for (const ChannelSource& s : g.sources) {
    const std::vector<bool> z = source_zero(s, C);
    for (int64_t c = 0; c < C; ++c) dead[size_t(c)] = dead[size_t(c)] && z[size_t(c)];
  }
  std::vector<int64_t> out;
  for (int64_t c = 0; c < C; ++c)
    if (dead[size_t(c)]) out.push_back(c);
  return out;
}

void prune_group(const ChannelGroup& g, double amount, double n) {
  SNUG_CHECK(amount >= 0 && amount <= 1, ValueError, "prune::prune_group: amount must be in [0, 1], got ", amount);
  SNUG_CHECK(n >= 1, ValueError, "prune::prune_group: the norm order n must be >= 1 (or INFINITY), got ", n);
  const int64_t C = group_channels(g);
  std::vector<double> score(size_t(C), 0.0);
  for (const ChannelSource& s : g.sources) {
    const std::vector<double> v = source_score(s, C, n);
    for (int64_t c = 0; c < C; ++c)
      score[size_t(c)] = std::isinf(n) ? std::max(score[size_t(c)], v[size_t(c)])
                                       : score[size_t(c)] + std::pow(v[size_t(c)], n);
  }
  std::vector<bool> dead(size_t(C), false);
  for (int64_t c : dead_channels(g)) dead[size_t(c)] = true;
  std::vector<int64_t> alive;
  for (int64_t c = 0; c < C; ++c)
    if (!dead[size_t(c)]) alive.push_back(c);
  const auto k = std::min<int64_t>(std::llround(amount * double(alive.size())), int64_t(alive.size()));
  if (k == 0) return;
  // The k lowest scores (the root of the sum of powers is monotone: not taken); ties: lower index first.
  std::stable_sort(alive.begin(), alive.end(), [&](int64_t a, int64_t b) { return score[size_t(a)] < score[size_t(b)]; });
  std::vector<float> rows(size_t(C), 1.0f);
  for (int64_t i = 0; i < k; ++i) rows[size_t(alive[size_t(i)])] = 0.0f;
  for (const ChannelSource& s : g.sources) {
    mask_rows(*s.layer, "weight", *weight_of(s.layer), rows);
    if (bias_of(s.layer)->defined()) mask_rows(*s.layer, "bias", *bias_of(s.layer), rows);
    if (s.norm && s.norm->weight.defined()) {
      mask_rows(*s.norm, "weight", s.norm->weight, rows);
      mask_rows(*s.norm, "bias", s.norm->bias, rows);
    }
  }
}

std::vector<ChannelGroup> resnet_channel_groups(nn::models::ResNet& net, const std::string& prefix) {
  auto path = [&](const std::string& n) { return prefix.empty() ? n : prefix + "." + n; };
  std::vector<ChannelGroup> groups;
  // The run of blocks joined by identity skips that the current tensor flows through.
  ChannelGroup skip{"skip:" + path("conv1"), {{path("conv1"), net.conv1.get(), net.bn1.get()}}, {}};
  for (size_t s = 0; s < net.layers.size(); ++s)
    for (size_t b = 0; b < net.layers[s]->size(); ++b) {
      const std::string bp = path(str("layer", s + 1, ".", b));
      auto blk = std::dynamic_pointer_cast<nn::models::BasicBlock>((*net.layers[s])[b]);
      SNUG_CHECK(blk, ValueError, "prune::resnet_channel_groups: \"", bp, "\" is ", (*net.layers[s])[b]->repr(),
                 ", not a BasicBlock");
      groups.push_back({bp + ".conv1", {{bp + ".conv1", blk->conv1.get(), blk->bn1.get()}},
                        {{bp + ".conv2", blk->conv2.get(), 1}}});
      skip.sinks.push_back({bp + ".conv1", blk->conv1.get(), 1});
      if (blk->downsample) {
        // The block reads the old tensor through its downsample and starts a new one.
        const std::string dp = bp + ".downsample.0";
        auto* dconv = blk->downsample->size() == 2 ? dynamic_cast<nn::Conv2d*>((*blk->downsample)[0].get()) : nullptr;
        auto* dbn = blk->downsample->size() == 2 ? dynamic_cast<nn::BatchNorm2d*>((*blk->downsample)[1].get()) : nullptr;
        SNUG_CHECK(dconv && dbn, ValueError, "prune::resnet_channel_groups: \"", bp,
                   ".downsample\" is not Conv2d + BatchNorm2d");
        skip.sinks.push_back({dp, dconv, 1});
        groups.push_back(std::move(skip));
        skip = ChannelGroup{"skip:" + dp, {{dp, dconv, dbn}}, {}};
      }
      skip.sources.push_back({bp + ".conv2", blk->conv2.get(), blk->bn2.get()});
    }
  skip.sinks.push_back({path("fc"), net.fc.get(), 1});  // through global average pooling: one column a channel
  groups.push_back(std::move(skip));
  return groups;
}

std::vector<ChannelGroup> channel_groups(nn::Module& model) {
  std::vector<ChannelGroup> out;
  for (auto& [path, mod] : model.named_modules())
    if (auto* r = dynamic_cast<nn::models::ResNet*>(mod.get())) {
      auto g = resnet_channel_groups(*r, path);
      out.insert(out.end(), std::make_move_iterator(g.begin()), std::make_move_iterator(g.end()));
    }
  return out;
}

CompactReport compact_groups(nn::Module& model, const std::vector<ChannelGroup>& groups,
                             nn::optim::Optimizer* optimizer) {
  CompactReport rep;
  rep.param_bytes_before = parameter_bytes(model);
  // Everything is checked, and every group's dead channels found, before anything changes.
  std::map<const void*, std::string> as_source, as_sink;
  auto claim = [](std::map<const void*, std::string>& seen, const void* m, const std::string& group,
                  const std::string& name, const char* role) {
    auto [it, fresh] = seen.emplace(m, group);
    SNUG_CHECK(fresh, ValueError, "prune::compact_groups: \"", name, "\" is a ", role, " of both \"", it->second,
               "\" and \"", group, "\"; its channels can follow one group only");
  };
  std::vector<std::vector<int64_t>> dead;
  std::vector<int64_t> channels;
  for (const ChannelGroup& g : groups) {
    channels.push_back(group_channels(g));
    for (const ChannelSource& s : g.sources) {
      claim(as_source, s.layer, g.name, s.name, "source");
      if (s.norm) claim(as_source, s.norm, g.name, s.name + " (its norm)", "source");
    }
    for (const ChannelSink& k : g.sinks) claim(as_sink, k.layer, g.name, k.name, "sink");
    dead.push_back(dead_channels(g));
  }
  NoGradGuard ng;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const ChannelGroup& g = groups[gi];
    const int64_t C = channels[gi];
    std::vector<int64_t> drop = dead[gi], keep;
    if (drop.empty()) continue;
    for (int64_t c = 0, d = 0; c < C; ++c) {
      if (d < int64_t(drop.size()) && drop[size_t(d)] == c)
        ++d;
      else
        keep.push_back(c);
    }
    if (keep.empty()) keep.push_back(drop.front());  // zero-size tensors help nobody
    const Tensor idx = index_tensor(keep);
    const auto K = int64_t(keep.size());
    for (const ChannelSource& s : g.sources) {
      select_in_place(*weight_of(s.layer), 0, idx, optimizer);
      if (bias_of(s.layer)->defined()) select_in_place(*bias_of(s.layer), 0, idx, optimizer);
      if (auto* l = dynamic_cast<nn::Linear*>(s.layer)) l->out_features = K;
      if (auto* cv = dynamic_cast<nn::Conv2d*>(s.layer)) cv->out_channels = K;
      if (nn::BatchNorm2d* bn = s.norm) {
        for (Tensor* t : {&bn->weight, &bn->bias, &bn->running_mean, &bn->running_var})
          if (t->defined()) select_in_place(*t, 0, idx, optimizer);
        bn->num_features = K;
      }
    }
    for (const ChannelSink& k : g.sinks) {
      std::vector<int64_t> cols;
      for (int64_t c : keep)
        for (int64_t j = 0; j < k.block; ++j) cols.push_back(c * k.block + j);
      select_in_place(*weight_of(k.layer), 1, index_tensor(cols), optimizer);
      if (auto* l = dynamic_cast<nn::Linear*>(k.layer)) l->in_features = int64_t(cols.size());
      if (auto* cv = dynamic_cast<nn::Conv2d*>(k.layer)) cv->in_channels = int64_t(cols.size());
    }
    rep.layers.push_back({g.name, C, K});
  }
  rep.param_bytes_after = parameter_bytes(model);
  return rep;
}

}  // namespace snug::prune

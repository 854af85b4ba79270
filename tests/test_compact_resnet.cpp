// SPDX-License-Identifier: MIT
// Channel groups (prune/channel_groups.h) on a ResNet: the groups found,
// pruning by group (every source of a tied group masked on the same
// channels), and compaction that removes them from every source and sink
// with the outputs unchanged (identity and downsample skips, eval and train
// mode), the optimizer state shrunk along, and the errors for bad groups.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/resnet.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/prune/channel_groups.h>
#include <snug/prune/compact.h>
#include <snug/prune/prune.h>
#include "test_util.h"

using namespace snug;
using snug::testing::max_abs_diff;
namespace F = snug::nn::functional;

namespace {

// Running statistics and affine parameters away from their defaults, so that
// a dropped channel that was not exactly zero would show in the outputs.
void randomize_norms(nn::Module& m) {
  NoGradGuard ng;
  for (auto& [name, mod] : m.named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(mod.get())) {
      const int64_t C = bn->num_features;
      bn->running_mean.copy_(randn({C}) * 0.2);
      bn->running_var.copy_(rand({C}) + 0.5);
      bn->weight.copy_(randn({C}));
      bn->bias.copy_(randn({C}) * 0.2);
    }
}

Tensor run_eval(nn::Module& m, const Tensor& x) {
  NoGradGuard ng;
  m.eval();
  Tensor y = m.forward(x);
  m.train();
  return y;
}

const prune::ChannelGroup& find(const std::vector<prune::ChannelGroup>& gs, const std::string& name) {
  auto it = std::find_if(gs.begin(), gs.end(), [&](auto& g) { return g.name == name; });
  REQUIRE(it != gs.end());
  return *it;
}

std::vector<std::string> names_of(const prune::ChannelGroup& g, bool sources) {
  std::vector<std::string> out;
  if (sources)
    for (auto& s : g.sources) out.push_back(s.name);
  else
    for (auto& k : g.sinks) out.push_back(k.name);
  return out;
}

}  // namespace

TEST_CASE("resnet_channel_groups: one group per block's conv1, one per run of identity skips") {
  auto m = nn::models::make_resnet();  // {16, 32, 64} x {2, 2, 2}
  const auto gs = prune::channel_groups(*m);
  CHECK(gs.size() == 6 + 3);
  const auto& inner = find(gs, "layer2.1.conv1");
  CHECK(names_of(inner, true) == std::vector<std::string>{"layer2.1.conv1"});
  CHECK(names_of(inner, false) == std::vector<std::string>{"layer2.1.conv2"});
  const auto& s1 = find(gs, "skip:conv1");
  CHECK(names_of(s1, true) == std::vector<std::string>{"conv1", "layer1.0.conv2", "layer1.1.conv2"});
  CHECK(names_of(s1, false) ==
        std::vector<std::string>{"layer1.0.conv1", "layer1.1.conv1", "layer2.0.conv1", "layer2.0.downsample.0"});
  CHECK(prune::group_channels(s1) == 16);
  const auto& s2 = find(gs, "skip:layer2.0.downsample.0");
  CHECK(names_of(s2, true) == std::vector<std::string>{"layer2.0.downsample.0", "layer2.0.conv2", "layer2.1.conv2"});
  const auto& s3 = find(gs, "skip:layer3.0.downsample.0");
  CHECK(names_of(s3, false) == std::vector<std::string>{"layer3.1.conv1", "fc"});
  CHECK(prune::group_channels(s3) == 64);
  // Every layer writes into one group and is read by one group.
  for (auto& g : gs) CHECK(prune::dead_channels(g).empty());

  // Nested in another module: the paths say where.
  auto outer = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{m});
  CHECK(find(prune::channel_groups(*outer), "skip:0.conv1").sources[1].name == "0.layer1.0.conv2");
  CHECK(prune::channel_groups(*std::make_shared<nn::Linear>(3, 4)).empty());
}

TEST_CASE("prune_group: a tied group is masked on the same channels in every source, by one shared score") {
  manual_seed(41);
  auto m = nn::models::make_resnet({.widths = {8, 16}, .blocks = {2, 1}});
  randomize_norms(*m);
  const auto gs = prune::channel_groups(*m);
  const auto& skip = find(gs, "skip:conv1");
  prune::prune_group(skip, 0.5);
  const auto dead = prune::dead_channels(skip);
  CHECK(dead.size() == 4);
  for (auto& s : skip.sources) {
    INFO(s.name);
    const auto g = s.norm->weight.contiguous().to_vector<float>(), b = s.norm->bias.contiguous().to_vector<float>();
    const auto w = prune::mask(dynamic_cast<nn::Conv2d*>(s.layer)->weight).contiguous().to_vector<float>();
    const int64_t rest = int64_t(w.size()) / 8;
    for (int64_t c = 0; c < 8; ++c) {
      const bool pruned = std::find(dead.begin(), dead.end(), c) != dead.end();
      CHECK((g[size_t(c)] == 0.0f && b[size_t(c)] == 0.0f) == pruned);
      CHECK(w[size_t(c * rest)] == (pruned ? 0.0f : 1.0f));
    }
  }
  // The block-internal groups and the other skip group are untouched.
  for (auto& g : gs)
    if (g.name != "skip:conv1") CHECK(prune::dead_channels(g).empty());
  // Again: half of what is still alive.
  prune::prune_group(skip, 0.5);
  CHECK(prune::dead_channels(skip).size() == 6);
  CHECK_THROWS_AS(prune::prune_group(skip, 1.5), ValueError);
}

TEST_CASE("compact: a pruned ResNet (identity and downsample skips) computes the same outputs, smaller") {
  manual_seed(42);
  auto m = nn::models::make_resnet({.widths = {8, 16, 16}, .blocks = {2, 1, 1}});
  nn::optim::SGD opt(m->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({3, 1, 12, 12});
  Tensor y = randint(0, 10, {3}, DType::i64);
  F::cross_entropy(m->forward(x), y).backward();
  opt.step();  // momentum buffers of every parameter
  randomize_norms(*m);
  for (auto& g : prune::channel_groups(*m)) prune::prune_group(g, 0.5);
  // A few steps of fine-tuning: the masks keep the pruned channels at zero.
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    F::cross_entropy(m->forward(x), y).backward();
    opt.step();
  }
  for (auto& g : prune::channel_groups(*m)) CHECK(prune::dead_channels(g).size() == size_t(prune::group_channels(g) / 2));
  Tensor train_before;
  {
    NoGradGuard ng;  // batch statistics (it updates the running ones: before the eval pass)
    train_before = m->forward(x);
  }
  const Tensor before = run_eval(*m, x);
  const int64_t params_before = m->num_parameters();

  auto rep = prune::compact(*m, &opt);
  CHECK(rep.layers.size() == 4 + 3);  // four blocks' conv1, three skip runs
  CHECK(rep.param_bytes_after < rep.param_bytes_before);
  CHECK(m->num_parameters() < params_before / 2);
  CHECK(opt.state_bytes() == rep.param_bytes_after);  // one momentum buffer per parameter, shrunk along
  CHECK(max_abs_diff(run_eval(*m, x), before) <= 1e-5);
  {
    NoGradGuard ng;  // a removed channel touched no other channel's batch statistics either
    CHECK(max_abs_diff(m->forward(x), train_before) <= 1e-5);
  }

  // The tied channels went everywhere at once: stem, bn2s, block inputs, downsample inputs.
  CHECK(m->conv1->weight.shape() == Shape{4, 1, 3, 3});
  CHECK(m->bn1->num_features == 4);
  auto blk = [&](size_t s, size_t b) { return std::dynamic_pointer_cast<nn::models::BasicBlock>((*m->layers[s])[b]); };
  for (size_t b = 0; b < 2; ++b) {
    CHECK(blk(0, b)->conv1->weight.shape() == Shape{4, 4, 3, 3});  // 8 -> 4 inner, 8 -> 4 skip channels in
    CHECK(blk(0, b)->conv2->weight.shape() == Shape{4, 4, 3, 3});
    CHECK(blk(0, b)->bn2->running_var.shape() == Shape{4});
  }
  auto ds = std::dynamic_pointer_cast<nn::Conv2d>((*blk(1, 0)->downsample)[0]);
  CHECK(ds->weight.shape() == Shape{8, 4, 1, 1});
  CHECK(ds->in_channels == 4);
  CHECK(blk(1, 0)->conv1->in_channels == 4);
  CHECK(m->fc->weight.shape() == Shape{10, 8});
  CHECK(m->fc->in_features == 8);
  CHECK(prune::mask(m->conv1->weight).shape() == Shape{4, 1, 3, 3});
  CHECK(m->conv1->weight.grad().shape() == Shape{4, 1, 3, 3});

  // Training goes on with the smaller tensors and the shrunk momentum.
  opt.zero_grad();
  F::cross_entropy(m->forward(x), y).backward();
  opt.step();
  CHECK(m->fc->weight.grad().shape() == Shape{10, 8});
  // Nothing left to remove: a second compaction changes nothing.
  CHECK(prune::compact(*m, &opt).layers.empty());
}

TEST_CASE("compact: a tied channel zero in only some of its sources stays; an inner group shrinks alone") {
  manual_seed(43);
  auto m = nn::models::make_resnet({.widths = {8}, .blocks = {2}});
  randomize_norms(*m);
  {
    NoGradGuard ng;  // channel 3 is zero out of the stem and block 0, but block 1's bn2 still writes it
    for (nn::BatchNorm2d* bn : {m->bn1.get(),
                                std::dynamic_pointer_cast<nn::models::BasicBlock>((*m->layers[0])[0])->bn2.get()}) {
      bn->weight.narrow(0, 3, 1).zero_();
      bn->bias.narrow(0, 3, 1).zero_();
    }
  }
  const auto gs = prune::channel_groups(*m);
  CHECK(prune::dead_channels(find(gs, "skip:conv1")).empty());
  prune::prune_group(find(gs, "layer1.1.conv1"), 0.25);
  Tensor x = randn({2, 1, 9, 9});
  const Tensor before = run_eval(*m, x);
  auto rep = prune::compact(*m);
  REQUIRE(rep.layers.size() == 1);
  CHECK(rep.layers[0].name == "layer1.1.conv1");
  CHECK(rep.layers[0].channels_before == 8);
  CHECK(rep.layers[0].channels_after == 6);
  CHECK(m->conv1->out_channels == 8);
  auto b1 = std::dynamic_pointer_cast<nn::models::BasicBlock>((*m->layers[0])[1]);
  CHECK(b1->conv1->weight.shape() == Shape{6, 8, 3, 3});
  CHECK(b1->conv2->weight.shape() == Shape{8, 6, 3, 3});
  CHECK(max_abs_diff(run_eval(*m, x), before) <= 1e-5);
}

TEST_CASE("compact_groups: groups that do not fit are refused before anything changes") {
  auto m = nn::models::make_resnet({.widths = {4, 8}, .blocks = {1, 1}});
  auto gs = prune::channel_groups(*m);
  for (auto& g : gs) prune::prune_group(g, 0.5);
  const Shape stem = m->conv1->weight.shape();
  // A layer claimed by two groups.
  auto twice = gs;
  twice.push_back(gs.front());
  CHECK_THROWS_WITH_AS(prune::compact_groups(*m, twice), doctest::Contains("is a source of both"), ValueError);
  CHECK(m->conv1->weight.shape() == stem);
  // A sink that does not read the group's channels.
  auto wrong = gs;
  wrong.front().sinks.push_back({"fc", m->fc.get(), 1});
  CHECK_THROWS_WITH_AS(prune::compact_groups(*m, wrong), doctest::Contains("sink \"fc\""), ShapeError);
  // A depthwise convolution cannot be a source.
  nn::Conv2d dw(4, 4, 3, 1, 1, 1, /*groups=*/4);
  prune::ChannelGroup bad{"dw", {{"dw", &dw, nullptr}}, {}};
  CHECK_THROWS_WITH_AS(prune::group_channels(bad), doctest::Contains("groups == 1"), ValueError);
  CHECK_THROWS_AS(prune::group_channels(prune::ChannelGroup{"empty", {}, {}}), ValueError);
  CHECK(m->conv1->weight.shape() == stem);
  // The groups as found compact.
  CHECK(prune::compact_groups(*m, gs).layers.size() == gs.size());
  CHECK(m->conv1->weight.shape() == Shape{2, 1, 3, 3});
}

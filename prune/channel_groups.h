// SPDX-License-Identifier: MIT
// Channel groups: structured pruning and compaction of channels that several
// layers share, such as those a residual connection carries
// (docs/compression.md, "Residual networks").
//
// prune::compact (prune/compact.h) pairs one producer with one consumer along
// a chain. A skip connection breaks that picture: in a ResNet stage the stem's
// output, every block's bn2 and the block inputs are added together, so
// channel c of all of them is one channel. A ChannelGroup names such a set:
//
//   sources  the layers whose outputs are summed into the group's tensor: a
//            Conv2d (groups == 1) or Linear, whose output channel c is row c of
//            its weight, each optionally followed by a BatchNorm2d
//   sinks    the layers that read the tensor: a Conv2d (groups == 1) or
//            Linear, whose input channel c is the columns
//            [c * block, (c + 1) * block) of dim 1 of its weight (block > 1
//            for a Linear after a Flatten of (C, H, W))
//
// Between the sum and the sinks only modules that map a zero channel to
// zero may sit (ReLU, pooling, Flatten, the identity of a skip). Then a
// channel every source emits as exactly zero is zero wherever it goes, and
// removing it from every source and every sink changes no output, padded
// convolutions included.
//
//   auto groups = prune::channel_groups(*resnet);   // the block-internal and the skip-tied groups
//   for (auto& g : groups) prune::prune_group(g, 0.5);
//   ... fine-tune ...
//   prune::compact(*resnet, &opt);                  // finds the same groups and removes the channels
//
// A source emits zero on channel c when (with a BatchNorm2d) the norm's weight
// and bias are zero there, whatever the convolution computes, or (without one)
// its weight row and bias entry are zero. prune_group masks both the layer's
// row (and bias) and the norm's weight and bias, so the channel stays zero
// through training.
#pragma once
#include <string>
#include <vector>

#include <snug/nn/batch_norm.h>
#include <snug/nn/module.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/prune/compact.h>

namespace snug::nn::models {
class ResNet;
}

namespace snug::prune {

struct ChannelSource {
  std::string name;                // the layer's path in the model, for reports and errors
  nn::Module* layer = nullptr;     // Conv2d (groups == 1) or Linear
  nn::BatchNorm2d* norm = nullptr;  // applied to the layer's output, or null
};
struct ChannelSink {
  std::string name;
  nn::Module* layer = nullptr;  // Conv2d (groups == 1) or Linear
  int64_t block = 1;            // input columns per channel
};
struct ChannelGroup {
  std::string name;
  std::vector<ChannelSource> sources;
  std::vector<ChannelSink> sinks;
};

// Checks the group (layer types, one channel count across sources, norms and
// sinks; ValueError or ShapeError naming the group and the layer) and returns
// its channel count.
int64_t group_channels(const ChannelGroup& g);

// Channels of g that every source emits as exactly zero (ascending).
std::vector<int64_t> dead_channels(const ChannelGroup& g);

// Masks round(amount * alive) more of g's alive channels in every source: the
// layer's weight rows (and bias), the norm's weight and bias. The score of a
// channel is shared by the whole group: the L`n` norm, across the sources, of
// each source's own score, which is |norm weight| for a source with a norm (the
// scale of its normalized output, as in network slimming) and the L`n` norm of
// the weight row for one without. amount in [0, 1]; ties prune the lower index.
void prune_group(const ChannelGroup& g, double amount, double n = 2);

// The groups of every model that prune/ knows the structure of, found in the
// tree (today nn::models::ResNet, at any depth), with paths from `model`.
// Empty when there is none.
std::vector<ChannelGroup> channel_groups(nn::Module& model);
// A ResNet's groups: for each block, conv1 + bn1 -> conv2 ("layer1.0.conv1");
// for each run of blocks joined by identity skips, one skip-tied group
// ("skip:conv1", "skip:layer2.0.downsample.0"): the stem (or the block's
// downsample) and every bn2 of the run as sources, every conv1 and
// downsample that reads the sum, and fc at the end, as sinks.
std::vector<ChannelGroup> resnet_channel_groups(nn::models::ResNet& net, const std::string& prefix = "");

// Removes every group's dead channels from its sources (weights, biases,
// norms' weight, bias and running statistics) and sinks (input columns),
// with optimizer state and masks (select_in_place). A layer may be a source of
// one group and a sink of one group (ValueError otherwise, before anything
// changes). At least one channel of a group stays. One report entry per group
// that lost channels; the bytes are `model`'s parameters.
CompactReport compact_groups(nn::Module& model, const std::vector<ChannelGroup>& groups,
                             nn::optim::Optimizer* optimizer = nullptr);

}  // namespace snug::prune

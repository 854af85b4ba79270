// SPDX-License-Identifier: MIT
// Compaction: physically removes pruned output channels (rows) of a layer
// together with the matching inputs of the next layer, so memory and time
// really fall (docs/compression.md).
//
//   prune::output_channels(*conv, 0.5);      // half the channels -> exactly zero
//   auto r = prune::compact(*model, &opt);   // smaller tensors; opt's state shrinks too
//
// The model is read as a chain: Sequentials are walked in order (nested ones
// too). A producer (Linear, or Conv2d with groups == 1) is paired with the
// next consumer (Linear or Conv2d with groups == 1) when everything between
// them keeps channels apart: ReLU, GELU, SiLU, Dropout, pooling, BatchNorm2d
// (whose channels are selected along), and Flatten (a channel is then a block
// of consecutive input columns of the Linear after it). Any other module ends
// the chain there; the last producer (the model's output) is never shrunk.
//
// A producer channel is dropped when its weight slice is exactly zero. What
// it still emitted (its bias, through the activation and, in eval mode, the
// BatchNorm) is a constant; it is folded into the consumer's bias, which is
// exact for Linear consumers and for Conv2d consumers without padding. So
// with pruned channels exactly zero (prune::output_channels masks the bias
// too) the compacted model computes the same outputs.
//
// Residual networks (nn::models::ResNet anywhere in the tree) are compacted
// by channel groups (prune/channel_groups.h): the channels a skip connection
// carries are removed from every layer that writes or reads them, and only
// when all the writers emit zero there.
//
// Each shrunk tensor keeps its TensorImpl (the data, shape and gradient are
// replaced in place), so modules, optimizers and hooks keep their handles;
// the optimizer's per-parameter state is shrunk with
// Optimizer::select_param_state, masks with it.
#pragma once
#include <string>
#include <vector>

#include <snug/nn/module.h>
#include <snug/nn/optim/optimizer.h>

namespace snug::prune {

struct CompactedLayer {
  std::string name;  // the producer's path in the model, e.g. "2"
  int64_t channels_before = 0, channels_after = 0;
};
struct CompactReport {
  std::vector<CompactedLayer> layers;  // producers that lost channels
  std::size_t param_bytes_before = 0, param_bytes_after = 0;
};

CompactReport compact(nn::Module& model, nn::optim::Optimizer* optimizer = nullptr);

// Replaces `t`'s data by index_select(t, dim, index), in place (the same
// TensorImpl): its gradient (if any), its pruning mask and the optimizer's
// state for it (if given) are selected the same way.
void select_in_place(const Tensor& t, int64_t dim, const Tensor& index, nn::optim::Optimizer* optimizer = nullptr);

// Bytes of the model's parameters (tied ones once), and of its buffers.
std::size_t parameter_bytes(const nn::Module& model);
std::size_t buffer_bytes(const nn::Module& model);

}  // namespace snug::prune

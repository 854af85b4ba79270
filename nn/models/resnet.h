// SPDX-License-Identifier: MIT
// A ResNet for small images (MNIST's 1x28x28, CIFAR-10's 3x32x32): a 3x3 stem
// (Conv + BN + ReLU), stages of BasicBlocks, global average pooling and a
// Linear classifier. The names follow torchvision's (conv1, bn1, layer1.0.conv2,
// layer2.0.downsample.0, fc), so state_dict keys read the same.
//
// Structured pruning of a ResNet has to keep the channels that a skip
// connection carries tied across the blocks it joins: prune/channel_groups.h.
#pragma once
#include <memory>
#include <vector>

#include <snug/nn/batch_norm.h>
#include <snug/nn/conv.h>
#include <snug/nn/layers.h>
#include <snug/nn/module.h>
#include <snug/nn/pool.h>

namespace snug::nn::models {

// conv3x3(stride) - BN - ReLU - conv3x3 - BN, plus the skip connection: the
// input itself, or, when the channels or the resolution change, a 1x1
// conv(stride) + BN (`downsample`); ReLU after the add. The convolutions have
// no bias (the BN after each has one).
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride = 1);
  // x (N, in, H, W) -> (N, out, H / stride, W / stride) (rounded up)
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Sequential> downsample;  // Conv2d(in, out, 1, stride) + BatchNorm2d(out); null: identity
  int64_t stride;
};

struct ResNetConfig {
  int64_t in_channels = 1;               // 1 for MNIST, 3 for CIFAR-10
  int64_t classes = 10;
  std::vector<int64_t> widths{16, 32, 64};  // channels of each stage; the stem has widths[0]
  std::vector<int64_t> blocks{2, 2, 2};     // BasicBlocks per stage (the same count as widths)
};

// Stage s (layer{s+1}) starts with stride 1 for s = 0, else 2: feature maps
// 28 -> 28 -> 14 -> 7 for MNIST, 32 -> 32 -> 16 -> 8 for CIFAR.
class ResNet : public Module {
 public:
  explicit ResNet(ResNetConfig c = {});
  // x (N, in_channels, H, W) -> logits (N, classes)
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  ResNetConfig cfg;
  std::shared_ptr<Conv2d> conv1;  // the stem
  std::shared_ptr<BatchNorm2d> bn1;
  std::vector<std::shared_ptr<Sequential>> layers;  // "layer1", "layer2", ...: BasicBlocks
  std::shared_ptr<AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<Linear> fc;
};

std::shared_ptr<ResNet> make_resnet(ResNetConfig c = {});

}  // namespace snug::nn::models

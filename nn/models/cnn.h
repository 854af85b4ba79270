// SPDX-License-Identifier: MIT
// The reference image models of docs/workloads.md (W-CNN, W-MLP) and a small
// MobileNet-style network, all for MNIST-shaped input (N, 1, 28, 28) and
// 10 classes, built from nn/layers.h and nn/conv.h.
#pragma once
#include <memory>

#include <snug/nn/module.h>

namespace snug::nn::models {

// W-CNN: Conv2d(1, 32, 3) + ReLU, Conv2d(32, 64, 3) + ReLU, MaxPool2d(2),
// Flatten (9,216), Linear(9216, 128) + ReLU, Linear(128, 10). 1,199,882 parameters.
std::shared_ptr<Sequential> make_wcnn();

// W-MLP: Flatten, 784-1024-1024-10 with ReLU. 1,863,690 parameters.
// Takes (N, 1, 28, 28) or (N, 784).
std::shared_ptr<Sequential> make_wmlp();

// MobileNet-style: a 3x3 stem (Conv + BN + ReLU), then depthwise-separable
// blocks (depthwise 3x3 Conv2d(groups = C) + BN + ReLU, pointwise 1x1 + BN
// + ReLU), global average pooling, Flatten, Linear. Convs before a BN have
// no bias. Feature maps: 32@28 -> 64@14 -> 128@14 -> 128@7 -> 256@7.
std::shared_ptr<Sequential> make_mobilenet(int64_t in_channels = 1, int64_t num_classes = 10);

}  // namespace snug::nn::models

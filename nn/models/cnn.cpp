// SPDX-License-Identifier: MIT
#include <snug/nn/models/cnn.h>

#include <snug/nn/batch_norm.h>
#include <snug/nn/conv.h>
#include <snug/nn/layers.h>
#include <snug/nn/pool.h>

namespace snug::nn::models {

std::shared_ptr<Sequential> make_wcnn() {
  auto m = std::make_shared<Sequential>();
  m->push_back(std::make_shared<Conv2d>(1, 32, 3));  // (N, 32, 26, 26)
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<Conv2d>(32, 64, 3));  // (N, 64, 24, 24)
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<MaxPool2d>(2));  // (N, 64, 12, 12)
  m->push_back(std::make_shared<Flatten>());     // (N, 9216)
  m->push_back(std::make_shared<Linear>(9216, 128));
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<Linear>(128, 10));
  return m;
}

std::shared_ptr<Sequential> make_wmlp() {
  auto m = std::make_shared<Sequential>();
  m->push_back(std::make_shared<Flatten>());  // (N, 784)
  m->push_back(std::make_shared<Linear>(784, 1024));
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<Linear>(1024, 1024));
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<Linear>(1024, 10));
  return m;
}

namespace {
// Conv (no bias) + BatchNorm + ReLU.
std::shared_ptr<Sequential> conv_bn_relu(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups) {
  auto s = std::make_shared<Sequential>();
  s->push_back(std::make_shared<Conv2d>(in, out, kernel, stride, kernel / 2, 1, groups, false));
  s->push_back(std::make_shared<BatchNorm2d>(out));
  s->push_back(std::make_shared<ReLU>());
  return s;
}
// Depthwise 3x3 (carries the stride), then pointwise 1x1 mixing channels.
std::shared_ptr<Sequential> separable(int64_t in, int64_t out, int64_t stride) {
  auto s = std::make_shared<Sequential>();
  s->push_back(conv_bn_relu(in, in, 3, stride, in));
  s->push_back(conv_bn_relu(in, out, 1, 1, 1));
  return s;
}
}  // namespace

std::shared_ptr<Sequential> make_mobilenet(int64_t in_channels, int64_t num_classes) {
  auto m = std::make_shared<Sequential>();
  m->push_back(conv_bn_relu(in_channels, 32, 3, 1, 1));  // (N, 32, 28, 28)
  m->push_back(separable(32, 64, 2));                    // (N, 64, 14, 14)
  m->push_back(separable(64, 128, 1));                   // (N, 128, 14, 14)
  m->push_back(separable(128, 128, 2));                  // (N, 128, 7, 7)
  m->push_back(separable(128, 256, 1));                  // (N, 256, 7, 7)
  m->push_back(std::make_shared<AdaptiveAvgPool2d>(1));  // (N, 256, 1, 1)
  m->push_back(std::make_shared<Flatten>());             // (N, 256)
  m->push_back(std::make_shared<Linear>(256, num_classes));
  return m;
}

}  // namespace snug::nn::models

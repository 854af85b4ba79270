// SPDX-License-Identifier: MIT
#include <snug/nn/models/resnet.h>

#include <snug/autograd/ops.h>

namespace snug::nn::models {

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t s) : Module("BasicBlock"), stride(s) {
  SNUG_CHECK(in > 0 && out > 0 && s > 0, ValueError, "BasicBlock: channels and stride must be positive, got in ", in,
             ", out ", out, ", stride ", s);
  register_module("conv1", conv1, std::make_shared<Conv2d>(in, out, 3, s, 1, 1, 1, /*bias=*/false));
  register_module("bn1", bn1, std::make_shared<BatchNorm2d>(out));
  register_module("conv2", conv2, std::make_shared<Conv2d>(out, out, 3, 1, 1, 1, 1, /*bias=*/false));
  register_module("bn2", bn2, std::make_shared<BatchNorm2d>(out));
  if (in != out || s != 1) {
    auto d = std::make_shared<Sequential>();
    d->push_back(std::make_shared<Conv2d>(in, out, 1, s, 0, 1, 1, /*bias=*/false));
    d->push_back(std::make_shared<BatchNorm2d>(out));
    register_module("downsample", downsample, d);
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  // conv1->in_channels, not the constructor's `in`: compaction may have shrunk it.
  SNUG_CHECK(x.dim() == 4 && x.size(1) == conv1->in_channels, ShapeError, "BasicBlock: expected input (N, ",
             conv1->in_channels, ", H, W), got ", shape_str(x.shape()));
  Tensor h = relu(bn1->forward(conv1->forward(x)));  // (N, out, H/s, W/s)
  h = bn2->forward(conv2->forward(h));
  Tensor skip = downsample ? downsample->forward(x) : x;  // (N, out, H/s, W/s)
  SNUG_CHECK(skip.shape() == h.shape(), ShapeError, "BasicBlock: the skip connection has shape ",
             shape_str(skip.shape()), " but the residual branch ", shape_str(h.shape()),
             " (a block without downsample needs in == out and stride 1)");
  return relu(h + skip);
}

std::string BasicBlock::repr() const {
  return str("BasicBlock(in=", conv1->in_channels, ", mid=", conv1->out_channels, ", out=", conv2->out_channels,
             ", stride=", stride, downsample ? ", downsample" : "", ")");
}

ResNet::ResNet(ResNetConfig c) : Module("ResNet"), cfg(std::move(c)) {
  SNUG_CHECK(cfg.in_channels > 0 && cfg.classes > 0, ValueError, "ResNet: in_channels and classes must be positive, got ",
             cfg.in_channels, " and ", cfg.classes);
  SNUG_CHECK(!cfg.widths.empty() && cfg.widths.size() == cfg.blocks.size(), ValueError,
             "ResNet: widths and blocks need one entry per stage, got ", cfg.widths.size(), " widths and ",
             cfg.blocks.size(), " block counts");
  for (size_t s = 0; s < cfg.widths.size(); ++s)
    SNUG_CHECK(cfg.widths[s] > 0 && cfg.blocks[s] > 0, ValueError, "ResNet: stage ", s + 1,
               " needs a positive width and block count, got width ", cfg.widths[s], ", ", cfg.blocks[s], " blocks");
  register_module("conv1", conv1, std::make_shared<Conv2d>(cfg.in_channels, cfg.widths[0], 3, 1, 1, 1, 1, false));
  register_module("bn1", bn1, std::make_shared<BatchNorm2d>(cfg.widths[0]));
  // Sized first: register_module binds each element by reference.
  layers.resize(cfg.widths.size());
  int64_t in = cfg.widths[0];
  for (size_t s = 0; s < cfg.widths.size(); ++s) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < cfg.blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      stage->push_back(std::make_shared<BasicBlock>(in, cfg.widths[s], stride));
      in = cfg.widths[s];
    }
    register_module(str("layer", s + 1), layers[s], stage);
  }
  register_module("avgpool", avgpool, std::make_shared<AdaptiveAvgPool2d>(1));
  register_module("fc", fc, std::make_shared<Linear>(in, cfg.classes));
}

Tensor ResNet::forward(const Tensor& x) {
  SNUG_CHECK(x.dim() == 4 && x.size(1) == cfg.in_channels, ShapeError, "ResNet: expected input (N, ", cfg.in_channels,
             ", H, W), got ", shape_str(x.shape()));
  Tensor h = relu(bn1->forward(conv1->forward(x)));  // (N, widths[0], H, W)
  for (auto& stage : layers) h = stage->forward(h);
  return fc->forward(avgpool->forward(h).flatten(1));  // (N, C, 1, 1) -> (N, C) -> (N, classes)
}

std::string ResNet::repr() const {
  std::string w, b;
  for (size_t s = 0; s < cfg.widths.size(); ++s) {
    w += str(s ? ", " : "", cfg.widths[s]);
    b += str(s ? ", " : "", cfg.blocks[s]);
  }
  return str("ResNet(in=", cfg.in_channels, ", widths={", w, "}, blocks={", b, "}, classes=", cfg.classes, ")");
}

std::shared_ptr<ResNet> make_resnet(ResNetConfig c) { return std::make_shared<ResNet>(std::move(c)); }

}  // namespace snug::nn::models

// SPDX-License-Identifier: MIT
// A small vision transformer for MNIST-shaped input: non-overlapping patches
// embedded by a Conv2d (kernel = stride = patch), a learned class token and
// learned positions, pre-LayerNorm encoder blocks (nn/attention.h's
// TransformerBlock, not causal), a final LayerNorm and a Linear head on the
// class token. Every size is a ViTConfig field (examples/vit sets them from
// flags); the defaults are the MNIST model of docs/compression.md.
#pragma once
#include <memory>
#include <vector>

#include <snug/nn/attention.h>
#include <snug/nn/checkpoint_sequential.h>
#include <snug/nn/conv.h>
#include <snug/nn/layers.h>
#include <snug/nn/module.h>

namespace snug::nn::models {

struct ViTConfig {
  int64_t image = 28, channels = 1, patch = 7;  // 16 patches of 7x7; patch must divide image
  int64_t dim = 64, depth = 4, heads = 4, mlp_ratio = 2;  // dim a multiple of heads
  int64_t classes = 10;
};

class VisionTransformer : public Module {
 public:
  explicit VisionTransformer(ViTConfig c = {});
  // x (N, channels, image, image) -> logits (N, classes)
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  // The encoder blocks as a chain, for checkpointing and the planner.
  std::vector<std::shared_ptr<Module>> block_chain() const;
  ViTConfig cfg;
  // How forward runs the blocks: empty (default) keeps every activation;
  // balanced_plan(cfg.depth, cfg.depth) recomputes each block but the last in
  // backward (nn/checkpoint_sequential.h).
  ChainPlan checkpointing;
  std::shared_ptr<Conv2d> patch_embed;  // (N, C, H, W) -> (N, dim, H/p, W/p)
  Tensor cls_token;                     // (1, 1, dim)
  Tensor pos_embed;                     // (1, 1 + patches, dim)
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> head;
};

std::shared_ptr<VisionTransformer> make_vit(ViTConfig c = {});

}  // namespace snug::nn::models

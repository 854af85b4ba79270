// SPDX-License-Identifier: MIT
#include <snug/nn/models/vit.h>

#include <snug/nn/init.h>

namespace snug::nn::models {

VisionTransformer::VisionTransformer(ViTConfig c) : Module("VisionTransformer"), cfg(c) {
  SNUG_CHECK(c.patch > 0 && c.image % c.patch == 0, ValueError, "VisionTransformer: patch ", c.patch,
             " must divide the image size ", c.image);
  SNUG_CHECK(c.channels >= 1 && c.dim >= 1 && c.heads >= 1 && c.dim % c.heads == 0 && c.depth >= 1 &&
                 c.mlp_ratio >= 1 && c.classes >= 1,
             ValueError, "VisionTransformer: need channels, depth, mlp_ratio, classes >= 1 and dim a positive multiple "
             "of heads; got channels ", c.channels, ", dim ", c.dim, ", heads ", c.heads, ", depth ", c.depth,
             ", mlp_ratio ", c.mlp_ratio, ", classes ", c.classes);
  const int64_t side = c.image / c.patch, tokens = 1 + side * side;
  register_module("patch_embed", patch_embed, std::make_shared<Conv2d>(c.channels, c.dim, c.patch, c.patch));
  cls_token = register_parameter("cls_token", zeros({1, 1, c.dim}));
  pos_embed = register_parameter("pos_embed", zeros({1, tokens, c.dim}));
  init::normal_(cls_token, 0, 0.02);
  init::normal_(pos_embed, 0, 0.02);
  register_module("blocks", blocks, std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.depth; ++i)
    blocks->push_back(std::make_shared<TransformerBlock>(c.dim, c.heads, /*causal=*/false, 0.0, c.mlp_ratio));
  register_module("ln_f", ln_f, std::make_shared<LayerNorm>(c.dim));
  register_module("head", head, std::make_shared<Linear>(c.dim, c.classes));
}

Tensor VisionTransformer::forward(const Tensor& x) {
  SNUG_CHECK(x.dim() == 4 && x.size(1) == cfg.channels && x.size(2) == cfg.image && x.size(3) == cfg.image, ShapeError,
             "VisionTransformer: expected input (N, ", cfg.channels, ", ", cfg.image, ", ", cfg.image, "), got ",
             shape_str(x.shape()));
  const int64_t N = x.size(0);
  Tensor p = patch_embed->forward(x).flatten(2).transpose(1, 2);          // (N, patches, dim)
  Tensor h = cat({cls_token.expand({N, 1, cfg.dim}), p}, 1) + pos_embed;  // (N, 1 + patches, dim)
  h = run_chain(block_chain(), checkpointing, h);                         // (N, 1 + patches, dim)
  return head->forward(ln_f->forward(h).select(1, 0));  // the class token -> (N, classes)
}

std::vector<std::shared_ptr<Module>> VisionTransformer::block_chain() const { return {blocks->begin(), blocks->end()}; }

std::string VisionTransformer::repr() const {
  return str("VisionTransformer(image=", cfg.image, ", patch=", cfg.patch, ", dim=", cfg.dim, ", depth=", cfg.depth,
             ", heads=", cfg.heads, ", mlp_ratio=", cfg.mlp_ratio, ")");
}

std::shared_ptr<VisionTransformer> make_vit(ViTConfig c) { return std::make_shared<VisionTransformer>(c); }

}  // namespace snug::nn::models

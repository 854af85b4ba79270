// SPDX-License-Identifier: MIT
#include <snug/nn/layers.h>

#include <cmath>

#include <snug/nn/init.h>

namespace snug::nn {

namespace F = functional;

Linear::Linear(int64_t in, int64_t out, bool has_bias, TensorOptions opt)
    : Module("Linear"), in_features(in), out_features(out) {
  SNUG_CHECK(in > 0 && out > 0, ValueError, "Linear: in and out must be positive, got ", in, " and ", out);
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", empty({out, in}, opt.with_requires_grad(false)));
  init::uniform_(weight, -bound, bound);
  if (has_bias) {
    bias = register_parameter("bias", empty({out}, opt.with_requires_grad(false)));
    init::uniform_(bias, -bound, bound);
  }
}
Linear::Linear(std::string name, const Linear& like)
    : Module(std::move(name)), in_features(like.in_features), out_features(like.out_features) {}
Tensor Linear::forward(const Tensor& x) { return F::linear(x, weight, bias); }
std::string Linear::repr() const {
  return str("Linear(in=", in_features, ", out=", out_features, ", bias=", bias.defined() ? "true" : "false", ")");
}

Embedding::Embedding(int64_t num, int64_t dim, TensorOptions opt)
    : Module("Embedding"), num_embeddings(num), embedding_dim(dim) {
  SNUG_CHECK(num > 0 && dim > 0, ValueError, "Embedding: sizes must be positive, got ", num, " and ", dim);
  weight = register_parameter("weight", empty({num, dim}, opt.with_requires_grad(false)));
  init::normal_(weight, 0, 1);
}
Tensor Embedding::forward(const Tensor& idx) { return F::embedding(idx, weight); }
std::string Embedding::repr() const { return str("Embedding(", num_embeddings, ", ", embedding_dim, ")"); }

LayerNorm::LayerNorm(int64_t d, double e, bool affine, TensorOptions opt) : Module("LayerNorm"), dim(d), eps(e) {
  SNUG_CHECK(d > 0, ValueError, "LayerNorm: dim must be positive, got ", d);
  if (affine) {
    weight = register_parameter("weight", ones({d}, opt.with_requires_grad(false)));
    bias = register_parameter("bias", zeros({d}, opt.with_requires_grad(false)));
  }
}
Tensor LayerNorm::forward(const Tensor& x) {
  SNUG_CHECK(x.dim() >= 1 && x.size(-1) == dim, ShapeError, "LayerNorm(", dim, "): input of shape ",
             shape_str(x.shape()), " does not end in ", dim);
  return F::layer_norm(x, weight, bias, eps);
}
std::string LayerNorm::repr() const { return str("LayerNorm(", dim, ", eps=", eps, ")"); }

Dropout::Dropout(double prob) : Module("Dropout"), p(prob) {
  SNUG_CHECK(p >= 0 && p <= 1, ValueError, "Dropout: p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }
std::string Dropout::repr() const { return str("Dropout(p=", p, ")"); }

}  // namespace snug::nn

// SPDX-License-Identifier: MIT
// The basic layers: Linear, Embedding, LayerNorm, Dropout, activations, Flatten.
// Convolution, pooling and batch norm are in nn/conv.h; attention in nn/attention.h.
#pragma once
#include <snug/nn/functional.h>
#include <snug/nn/module.h>

namespace snug::nn {

// y = x W^T + b. x (..., in) -> (..., out). Init as PyTorch: U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true, TensorOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  Tensor weight, bias;  // (out, in), (out) or undefined
  int64_t in_features, out_features;

 protected:
  // For layers that stand in for a Linear (NOTE [ Replacing a child ] in
  // nn/module.h): like's sizes, and no tensors; the subclass registers what it holds.
  Linear(std::string name, const Linear& like);
};

// indices (...) -> (..., dim). Init N(0, 1).
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, TensorOptions opt = {});
  Tensor forward(const Tensor& indices) override;
  std::string repr() const override;
  Tensor weight;  // (num, dim)
  int64_t num_embeddings, embedding_dim;
};

// Over the last dim of size `dim`. weight = 1, bias = 0.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true, TensorOptions opt = {});
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  Tensor weight, bias;
  int64_t dim;
  double eps;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  double p;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};
class GELU : public Module {
 public:
  explicit GELU(GeluApprox a = GeluApprox::none) : Module("GELU"), approximate(a) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  GeluApprox approximate;
};
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override { return silu(x); }
};
// (N, d1, d2, ...) -> (N, d1*d2*...) for the default dims.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start = 1, int64_t end = -1) : Module("Flatten"), start_dim(start), end_dim(end) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  int64_t start_dim, end_dim;
};

}  // namespace snug::nn

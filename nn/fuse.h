// SPDX-License-Identifier: MIT
// nn::fuse: the explicit pass that rewrites a module tree into fused layers,
// and the fused layers it makes.
//
//   auto net = nn::models::make_wmlp();  // Flatten, Linear, ReLU, Linear, ReLU, Linear
//   nn::FuseReport r = nn::fuse(*net);   // Flatten, LinearAct, Folded, FusedMLP, Folded, Folded
//   std::cout << r.str();
//
// NOTE [ What nn::fuse rewrites ]
// Inside every nn::Sequential of the tree (nested ones too), left to right:
//   Conv2d, ReLU                -> Conv2dReLU, Folded
//   Linear, ReLU|GELU, Linear   -> FusedMLP, Folded, Folded   unless that last Linear
//                                  is itself followed by ReLU|GELU: then it starts a
//                                  pair or triple of its own (W-MLP's Linear, ReLU,
//                                  Linear, ReLU, Linear is a pair, then a triple)
//   Linear, ReLU|GELU           -> LinearAct, Folded
// Exact types only, so that a subclass with a forward of its own (quant/'s
// layers, a user's Linear) keeps it; containers other than Sequential call
// their children in an order fuse cannot see, and are only searched.
// The fused layer takes the first layer's place and holds the same tensors
// (not copies); each layer it absorbed becomes a Folded, which passes its
// input through and keeps the absorbed layer's parameters under their names.
// So the model's state_dict keys, its parameter order, an optimizer built
// before fuse and a checkpoint of the unfused model all carry over, and the
// values and gradients are bit for bit those of the unfused layers
// (nn/fused.h; tests/test_fuse.cpp). Fuse after quantizing or pruning: those
// look for plain Linear and Conv2d layers.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include <snug/nn/conv.h>
#include <snug/nn/layers.h>
#include <snug/nn/module.h>

namespace snug::nn {

// The activation a fused layer applies.
enum class Activation { relu, gelu, gelu_tanh };
const char* activation_name(Activation a);  // "relu", "gelu", "gelu_tanh"

// act(linear(x)): functional::linear_relu / linear_gelu with a Linear's weight and bias.
class LinearAct : public Module {
 public:
  LinearAct(const Linear& linear, Activation act);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  Tensor weight, bias;  // the Linear's tensors: (out, in), (out) or undefined
  int64_t in_features, out_features;
  Activation act;
};

// fc2(act(fc1(x))): functional::relu_mlp / gelu_mlp. fc1's weight and bias are
// registered here; fc2's are registered by the Folded in fc2's place (NOTE
// [ What nn::fuse rewrites ]) and only used here, so parameters() of this
// module alone lists fc1's.
class FusedMLP : public Module {
 public:
  FusedMLP(const Linear& fc1, Activation act, const Linear& fc2);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  Tensor weight, bias;    // fc1's: (hidden, in), (hidden) or undefined
  Tensor weight2, bias2;  // fc2's: (out, hidden), (out) or undefined
  int64_t in_features, hidden_features, out_features;
  Activation act;
};

// relu(conv(x)): functional::conv2d_relu with a Conv2d's tensors and geometry.
class Conv2dReLU : public Module {
 public:
  explicit Conv2dReLU(const Conv2d& conv);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  Tensor weight, bias;  // the Conv2d's tensors
  int64_t in_channels, out_channels, groups;
  std::array<int64_t, 2> kernel_size, stride, padding, dilation;
};

// A layer whose work the fused layer before it now does: forward returns its
// input. It registers the folded layer's parameters and buffers (the same
// tensors) under their names, so state_dict keys stay those of the unfused model.
class Folded : public Module {
 public:
  // into: the fused layer's name in the same Sequential ("0").
  Folded(const Module& layer, std::string into);
  Tensor forward(const Tensor& x) override { return x; }
  std::string repr() const override;  // "Folded(ReLU into 0)"
  std::string layer, into;            // the folded layer's repr, and where its work went
};

// What fuse did: one entry per fused layer, in tree order.
struct FuseReport {
  struct Entry {
    std::string path;    // the fused layer's name in the tree ("features.0")
    std::string layers;  // what it replaced ("Linear, ReLU, Linear")
    std::string fused;   // the fused layer's repr
  };
  std::vector<Entry> fused;
  size_t size() const { return fused.size(); }
  std::string str() const;  // one line per entry, or "nothing to fuse"
};

// Rewrites model's Sequentials in place (NOTE [ What nn::fuse rewrites ]); a
// second call finds nothing more. Train/eval mode carries over.
FuseReport fuse(Module& model);

}  // namespace snug::nn

// SPDX-License-Identifier: MIT
// nn::fuse and the fused layers (NOTE [ What nn::fuse rewrites ] in nn/fuse.h).
#include <snug/nn/fuse.h>

#include <optional>
#include <typeinfo>
#include <utility>

#include <snug/nn/fused.h>

namespace snug::nn {

namespace F = functional;

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::gelu_tanh:
      return "gelu_tanh";
  }
  return "?";
}

namespace {
GeluApprox approx_of(Activation a) { return a == Activation::gelu_tanh ? GeluApprox::tanh : GeluApprox::none; }

// Registers t under name with its own requires_grad (a frozen weight stays frozen).
void adopt(Module& m, const std::string& name, const Tensor& t) {
  if (t.defined()) m.register_parameter(name, t, t.requires_grad());
}
}  // namespace

// ---- the fused layers ------------------------------------------------------------------

LinearAct::LinearAct(const Linear& l, Activation a)
    : Module("LinearAct"),
      weight(l.weight),
      bias(l.bias),
      in_features(l.in_features),
      out_features(l.out_features),
      act(a) {
  adopt(*this, "weight", weight);
  adopt(*this, "bias", bias);
}

Tensor LinearAct::forward(const Tensor& x) {
  return act == Activation::relu ? F::linear_relu(x, weight, bias) : F::linear_gelu(x, weight, bias, approx_of(act));
}

std::string LinearAct::repr() const {
  return str("LinearAct(in=", in_features, ", out=", out_features, ", bias=", bias.defined() ? "true" : "false",
             ", act=", activation_name(act), ")");
}

FusedMLP::FusedMLP(const Linear& fc1, Activation a, const Linear& fc2)
    : Module("FusedMLP"),
      weight(fc1.weight),
      bias(fc1.bias),
      weight2(fc2.weight),
      bias2(fc2.bias),
      in_features(fc1.in_features),
      hidden_features(fc1.out_features),
      out_features(fc2.out_features),
      act(a) {
  SNUG_CHECK(fc2.in_features == fc1.out_features, ShapeError, "FusedMLP: ", fc2.repr(), " does not take the ",
             fc1.out_features, " outputs of ", fc1.repr());
  adopt(*this, "weight", weight);
  adopt(*this, "bias", bias);
}

Tensor FusedMLP::forward(const Tensor& x) {
  return act == Activation::relu ? F::relu_mlp(x, weight, bias, weight2, bias2)
                                 : F::gelu_mlp(x, weight, bias, weight2, bias2, approx_of(act));
}

std::string FusedMLP::repr() const {
  return str("FusedMLP(in=", in_features, ", hidden=", hidden_features, ", out=", out_features,
             ", act=", activation_name(act), ")");
}

Conv2dReLU::Conv2dReLU(const Conv2d& c)
    : Module("Conv2dReLU"),
      weight(c.weight),
      bias(c.bias),
      in_channels(c.in_channels),
      out_channels(c.out_channels),
      groups(c.groups),
      kernel_size(c.kernel_size),
      stride(c.stride),
      padding(c.padding),
      dilation(c.dilation) {
  adopt(*this, "weight", weight);
  adopt(*this, "bias", bias);
}

Tensor Conv2dReLU::forward(const Tensor& x) {
  return F::conv2d_relu(x, weight, bias, stride, padding, dilation, groups);
}

std::string Conv2dReLU::repr() const {
  auto pair = [](std::array<int64_t, 2> a) { return str("(", a[0], ", ", a[1], ")"); };
  std::string s = str("Conv2dReLU(", in_channels, ", ", out_channels, ", kernel_size=", pair(kernel_size));
  if (stride != std::array<int64_t, 2>{1, 1}) s += str(", stride=", pair(stride));
  if (padding != std::array<int64_t, 2>{0, 0}) s += str(", padding=", pair(padding));
  if (dilation != std::array<int64_t, 2>{1, 1}) s += str(", dilation=", pair(dilation));
  if (groups != 1) s += str(", groups=", groups);
  if (!bias.defined()) s += ", bias=false";
  return s + ")";
}

Folded::Folded(const Module& l, std::string where) : Module("Folded"), layer(l.repr()), into(std::move(where)) {
  for (const auto& [name, t] : l.named_parameters(false)) adopt(*this, name, t);
  for (const auto& [name, t] : l.named_buffers(false)) register_buffer(name, t);
}

std::string Folded::repr() const { return str("Folded(", layer, " into ", into, ")"); }

// ---- the pass ---------------------------------------------------------------------------

std::string FuseReport::str() const {
  if (fused.empty()) return "nn::fuse: nothing to fuse\n";
  std::string s = snug::str("nn::fuse: ", fused.size(), " fused layer", fused.size() == 1 ? "" : "s", "\n");
  for (const Entry& e : fused) s += snug::str("  ", e.path, ": ", e.layers, " -> ", e.fused, "\n");
  return s;
}

namespace {

bool is_exactly(const Module* m, const std::type_info& t) { return m != nullptr && typeid(*m) == t; }

// ReLU or GELU (exact types), as the Activation a fused layer applies.
std::optional<Activation> activation_of(const Module* m) {
  if (is_exactly(m, typeid(ReLU))) return Activation::relu;
  if (is_exactly(m, typeid(GELU)))
    return static_cast<const GELU&>(*m).approximate == GeluApprox::tanh ? Activation::gelu_tanh : Activation::gelu;
  return std::nullopt;
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// One Sequential's children, left to right (NOTE [ What nn::fuse rewrites ]).
void fuse_sequential(Sequential& seq, const std::string& path, FuseReport& report) {
  const auto kids = seq.named_children();  // ("0", layer), ("1", layer), ...: a copy, replaced below
  auto at = [&](size_t i) -> const Module* { return i < kids.size() ? kids[i].second.get() : nullptr; };
  // Puts `fused` in place of kids[i] and a Folded in place of each of the next `absorbed`.
  auto rewrite = [&](size_t i, size_t absorbed, std::shared_ptr<Module> fused) {
    std::string layers = kids[i].second->name();
    for (size_t k = 1; k <= absorbed; ++k) layers += ", " + kids[i + k].second->name();
    report.fused.push_back({join(path, kids[i].first), layers, fused->repr()});
    for (size_t k = 1; k <= absorbed; ++k) {
      auto folded = std::make_shared<Folded>(*kids[i + k].second, kids[i].first);
      folded->train(kids[i + k].second->is_training());
      seq.replace_module(kids[i + k].first, folded);
    }
    fused->train(kids[i].second->is_training());
    seq.replace_module(kids[i].first, std::move(fused));
  };
  for (size_t i = 0; i < kids.size();) {
    const Module* m = at(i);
    if (is_exactly(m, typeid(Conv2d)) && is_exactly(at(i + 1), typeid(ReLU))) {
      rewrite(i, 1, std::make_shared<Conv2dReLU>(static_cast<const Conv2d&>(*m)));
      i += 2;
      continue;
    }
    const std::optional<Activation> act = activation_of(at(i + 1));
    if (is_exactly(m, typeid(Linear)) && act) {
      const auto& fc1 = static_cast<const Linear&>(*m);
      const bool triple = is_exactly(at(i + 2), typeid(Linear)) && !activation_of(at(i + 3));
      if (triple) {
        rewrite(i, 2, std::make_shared<FusedMLP>(fc1, *act, static_cast<const Linear&>(*at(i + 2))));
        i += 3;
      } else {
        rewrite(i, 1, std::make_shared<LinearAct>(fc1, *act));
        i += 2;
      }
      continue;
    }
    ++i;
  }
}

// Children first, so a nested Sequential is rewritten before its parent looks at it.
void walk(Module& m, const std::string& path, FuseReport& report) {
  for (const auto& [name, child] : m.named_children()) walk(*child, join(path, name), report);
  if (typeid(m) == typeid(Sequential)) fuse_sequential(static_cast<Sequential&>(m), path, report);
}

}  // namespace

FuseReport fuse(Module& model) {
  FuseReport report;
  walk(model, "", report);
  return report;
}

}  // namespace snug::nn

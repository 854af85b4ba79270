// SPDX-License-Identifier: MIT
// Quantization of whole module trees (quant/convert.h): every Linear and
// Conv2d at any depth (custom modules, Sequentials inside modules,
// ModuleLists, the GPT's blocks, the ViT) is replaced, also in the typed
// members the parents' forwards call; what stays float comes back in the
// Report with its reason.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/nn/conv.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/models/vit.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/quant/convert.h>
#include <snug/quant/modules.h>
#include "test_util.h"

using namespace snug;
using snug::testing::max_abs;
using snug::testing::max_abs_diff;
using namespace snug::quant;
using snug::testing::error_of;
namespace F = snug::nn::functional;

namespace {

// (N, 16) -> (N, 16): a bound Linear member, then a Sequential member holding
// a Linear, a ReLU and a nested Sequential with another Linear.
struct Inner : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::Sequential> seq;
  Inner() : nn::Module("Inner") {
    register_module("fc", fc, std::make_shared<nn::Linear>(16, 16));
    auto deep = std::make_shared<nn::Sequential>(
        std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(16, 16)});
    register_module("seq", seq,
                    std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                        std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::ReLU>(), deep}));
  }
  Tensor forward(const Tensor& x) override { return x + seq->forward(relu(fc->forward(x))); }
};

// x (N, 2, 6, 6) -> (N, 3). Linear/Conv2d at depths 1 to 4, plus what must
// stay float: a depthwise conv, a LayerNorm and a parameter of its own.
struct Net : nn::Module {
  std::shared_ptr<nn::Conv2d> stem, depthwise;
  std::shared_ptr<nn::Sequential> features;  // Sequential(Sequential(Conv2d, ReLU))
  std::shared_ptr<nn::Linear> proj, head;
  std::shared_ptr<nn::ModuleList> stages;  // two Inner
  std::shared_ptr<nn::LayerNorm> norm;
  Tensor scale;
  Net() : nn::Module("Net") {
    register_module("stem", stem, std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1));
    register_module("depthwise", depthwise, std::make_shared<nn::Conv2d>(4, 4, 3, 1, 1, 1, /*groups=*/4));
    register_module("features", features,
                    std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                        std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                            std::make_shared<nn::Conv2d>(4, 4, 3, 1, 1), std::make_shared<nn::ReLU>()})}));
    register_module("proj", proj, std::make_shared<nn::Linear>(4 * 36, 16));
    register_module("stages", stages, std::make_shared<nn::ModuleList>());
    stages->push_back(std::make_shared<Inner>());
    stages->push_back(std::make_shared<Inner>());
    register_module("norm", norm, std::make_shared<nn::LayerNorm>(16));
    register_module("head", head, std::make_shared<nn::Linear>(16, 3));
    scale = register_parameter("scale", ones({1}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = features->forward(depthwise->forward(relu(stem->forward(x))));  // (N, 4, 6, 6)
    h = proj->forward(h.flatten(1));                                           // (N, 16)
    for (const auto& s : *stages) h = s->forward(h);
    return head->forward(norm->forward(h)) * scale;
  }
};

// The qualified names of every Linear and Conv2d (any subclass) in the tree.
std::vector<std::string> layer_names(nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, sub] : m.named_modules())
    if (dynamic_cast<nn::Linear*>(sub.get()) || dynamic_cast<nn::Conv2d*>(sub.get())) out.push_back(n);
  return out;
}
// Modules of type T, by name.
template <class T>
std::set<std::string> names_of(nn::Module& m) {
  std::set<std::string> out;
  for (auto& [n, sub] : m.named_modules())
    if (dynamic_cast<T*>(sub.get())) out.insert(n);
  return out;
}

const std::vector<std::string> kNetLayers = {
    "stem",           "features.0.0",     "proj", "stages.0.fc", "stages.0.seq.0", "stages.0.seq.2.0", "stages.1.fc",
    "stages.1.seq.0", "stages.1.seq.2.0", "head"};

// The members each forward calls hold the replacements.
template <class L, class C>
void check_net_members(Net& net) {
  CHECK(std::dynamic_pointer_cast<C>(net.stem));
  CHECK(std::dynamic_pointer_cast<L>(net.proj));
  CHECK(std::dynamic_pointer_cast<L>(net.head));
  CHECK(std::dynamic_pointer_cast<nn::Conv2d>(net.depthwise));  // left float
  CHECK_FALSE(std::dynamic_pointer_cast<C>(net.depthwise));
  for (size_t i = 0; i < 2; ++i) {
    auto in = net.stages->at<Inner>(i);
    CHECK(std::dynamic_pointer_cast<L>(in->fc));
    CHECK(std::dynamic_pointer_cast<L>((*in->seq)[0]));
    CHECK(std::dynamic_pointer_cast<L>((*std::dynamic_pointer_cast<nn::Sequential>((*in->seq)[2]))[0]));
  }
  CHECK(std::dynamic_pointer_cast<C>((*std::dynamic_pointer_cast<nn::Sequential>((*net.features)[0]))[0]));
}

void check_net_report(const Report& r) {
  CHECK(r.converted == kNetLayers);
  CHECK(r.left_float.size() == 3);
  CHECK(r.reason("depthwise").find("grouped convolution (groups=4)") != std::string::npos);
  CHECK(r.reason("norm").find("normalization") != std::string::npos);
  CHECK(r.reason("").find("parameters (scale)") != std::string::npos);
  CHECK(r.str().find("left in float (3)") != std::string::npos);
}

std::shared_ptr<Net> make_net(uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<Net>();
  net->eval();
  return net;
}

}  // namespace

TEST_CASE("quantize_dynamic reaches every Linear and Conv2d of a nested custom tree, members included") {
  auto net = make_net(1);
  Generator g(2);
  Tensor x = randn({8, 2, 6, 6}, {}, &g);
  Tensor yf = net->forward(x).detach();
  Report r = quantize_dynamic(*net);
  check_net_report(r);
  CHECK(names_of<QuantizedLinear>(*net).size() == 8);
  CHECK(names_of<QuantizedConv2d>(*net).size() == 2);
  check_net_members<QuantizedLinear, QuantizedConv2d>(*net);
  // Nothing float is left among the layers besides the depthwise conv.
  for (const std::string& n : layer_names(*net))
    if (n != "depthwise") CHECK_MESSAGE(names_of<QuantizedWeights>(*net).count(n), n);
  Tensor yq = net->forward(x);
  CHECK(max_abs_diff(yq, yf) <= 0.05 * max_abs(yf));
  CHECK(max_abs_diff(yq, yf) > 0);  // it really runs the int8 layers
}

TEST_CASE("prepare_static + calibrate + convert on the nested tree") {
  auto net = make_net(3);
  Generator g(4);
  Tensor x = randn({16, 2, 6, 6}, {}, &g);
  Tensor yf = net->forward(x).detach();
  check_net_report(prepare_static(*net));
  check_net_members<ObservedLinear, ObservedConv2d>(*net);
  {
    NoGradGuard ng;
    net->forward(x);  // calibration: the observers sit in the members forward calls
  }
  check_net_report(convert(*net));
  check_net_members<QuantizedLinear, QuantizedConv2d>(*net);
  for (auto& [n, m] : net->named_modules())
    if (auto* q = dynamic_cast<QuantizedWeights*>(m.get())) CHECK_FALSE_MESSAGE(q->is_dynamic(), n);
  CHECK(max_abs_diff(net->forward(x), yf) <= 0.05 * max_abs(yf));
}

TEST_CASE("prepare_qat + train + convert on the nested tree") {
  auto net = make_net(5);
  net->train();
  Generator g(6);
  Tensor x = randn({32, 2, 6, 6}, {}, &g);
  Tensor y = randint(0, 3, {32}, DType::i64, &g);
  nn::optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});  // on the float model
  check_net_report(prepare_qat(*net));
  check_net_members<QATLinear, QATConv2d>(*net);
  double first = 0, last = 0;
  for (int s = 0; s < 20; ++s) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    (s == 0 ? first : last) = loss.item();
  }
  CHECK(last < first);
  net->eval();
  Tensor fq = net->forward(x).detach();
  check_net_report(convert(*net));
  check_net_members<QuantizedLinear, QuantizedConv2d>(*net);
  CHECK_FALSE(net->is_training());
  CHECK(max_abs_diff(net->forward(x), fq) <= 0.02 * max_abs(fq));
}

namespace {

enum class Mode { dynamic, static_, qat };
const char* mode_name(Mode m) { return m == Mode::dynamic ? "dynamic" : m == Mode::static_ ? "static" : "qat"; }

// Quantizes `model` the given way; `step` runs one forward (calibration) or
// one training step (QAT). Returns the final Report.
Report quantize_as(nn::Module& model, Mode mode, const std::function<void(bool train)>& step) {
  if (mode == Mode::dynamic) return quantize_dynamic(model);
  if (mode == Mode::static_) {
    prepare_static(model);
    NoGradGuard ng;
    for (int i = 0; i < 2; ++i) step(false);
  } else {
    prepare_qat(model);
    model.train();
    for (int i = 0; i < 3; ++i) step(true);
    model.eval();
  }
  return convert(model);
}

}  // namespace

TEST_CASE("the GPT: every block's qkv, proj, fc and fc_proj quantized, three ways; embeddings and norms reported") {
  for (Mode mode : {Mode::dynamic, Mode::static_, Mode::qat}) {
    CAPTURE(mode_name(mode));
    manual_seed(7);
    nn::models::GPT gpt({.vocab = 65, .block = 16, .layers = 2, .heads = 2, .embd = 32});
    gpt.eval();
    Generator g(8);
    Tensor tok = randint(0, 65, {4, 16}, DType::i64, &g), tgt = randint(0, 65, {4, 16}, DType::i64, &g);
    Tensor lf = gpt.forward(tok).detach();
    const double loss_f = gpt.loss(tok, tgt).item();
    nn::optim::SGD opt(gpt.parameters(), {.lr = 1e-4});
    Report r = quantize_as(gpt, mode, [&](bool train) {
      if (!train) {
        gpt.forward(tok);
        return;
      }
      opt.zero_grad();
      gpt.loss(tok, tgt).backward();
      opt.step();
    });
    std::vector<std::string> want;
    for (int b = 0; b < 2; ++b)
      for (const char* l : {"attn.qkv", "attn.proj", "fc", "fc_proj"}) want.push_back(str("blocks.", b, ".", l));
    CHECK(r.converted == want);
    CHECK(names_of<QuantizedLinear>(gpt).size() == 8);
    for (const std::string& n : layer_names(gpt)) CHECK_MESSAGE(names_of<QuantizedLinear>(gpt).count(n), n);
    for (const auto& b : *gpt.blocks) {
      auto blk = std::dynamic_pointer_cast<nn::TransformerBlock>(b);
      CHECK(std::dynamic_pointer_cast<QuantizedLinear>(blk->attn->qkv));
      CHECK(std::dynamic_pointer_cast<QuantizedLinear>(blk->fc_proj));
    }
    std::set<std::string> left;
    for (auto& l : r.left_float) left.insert(l.name);
    CHECK(left == std::set<std::string>{"wte", "wpe", "blocks.0.ln_1", "blocks.0.ln_2", "blocks.1.ln_1",
                                        "blocks.1.ln_2", "ln_f"});
    CHECK(r.reason("wte").find("embedding: not quantizable") != std::string::npos);
    CHECK(r.reason("ln_f").find("normalization") != std::string::npos);
    Tensor lq = gpt.forward(tok);
    CHECK(max_abs_diff(lq, lf) <= 0.1 * max_abs(lf));
    CHECK(std::fabs(gpt.loss(tok, tgt).item() - loss_f) <= 0.02 * loss_f);
  }
}

TEST_CASE("the ViT: patch embedding, every block's Linears and the head quantized, three ways") {
  for (Mode mode : {Mode::dynamic, Mode::static_, Mode::qat}) {
    CAPTURE(mode_name(mode));
    manual_seed(9);
    auto vit = nn::models::make_vit(
        {.image = 8, .channels = 1, .patch = 4, .dim = 16, .depth = 2, .heads = 2, .mlp_ratio = 2, .classes = 3});
    vit->eval();
    Generator g(10);
    Tensor x = randn({8, 1, 8, 8}, {}, &g);
    Tensor y = randint(0, 3, {8}, DType::i64, &g);
    Tensor yf = vit->forward(x).detach();
    nn::optim::SGD opt(vit->parameters(), {.lr = 1e-3});
    Report r = quantize_as(*vit, mode, [&](bool train) {
      if (!train) {
        vit->forward(x);
        return;
      }
      opt.zero_grad();
      F::cross_entropy(vit->forward(x), y).backward();
      opt.step();
    });
    CHECK(r.converted.size() == 10);
    CHECK(std::dynamic_pointer_cast<QuantizedConv2d>(vit->patch_embed));
    CHECK(std::dynamic_pointer_cast<QuantizedLinear>(vit->head));
    for (const std::string& n : layer_names(*vit)) CHECK_MESSAGE(names_of<QuantizedWeights>(*vit).count(n), n);
    CHECK(r.reason("").find("parameters (cls_token, pos_embed)") != std::string::npos);
    CHECK(r.reason("blocks.1.ln_2").find("normalization") != std::string::npos);
    CHECK(r.left_float.size() == 6);  // the model's own parameters and five LayerNorms
    CHECK(max_abs_diff(vit->forward(x), yf) <= 0.1 * max_abs(yf));
  }
}

namespace {
// The LibTorch pattern `fc = register_module("fc", ...)`: the member is not
// bound, so replacing the registry entry would not reach forward.
struct Unbound : nn::Module {
  std::shared_ptr<nn::Linear> fc, other;
  Unbound() : nn::Module("Unbound") {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 4));
    register_module("other", other, std::make_shared<nn::Linear>(4, 4));
  }
  Tensor forward(const Tensor& x) override { return other->forward(fc->forward(x)); }
};
// Two Linears sharing one weight (an autoencoder's tied decoder).
struct Tied : nn::Module {
  std::shared_ptr<nn::Linear> enc, dec;
  Tied() : nn::Module("Tied") {
    register_module("enc", enc, std::make_shared<nn::Linear>(4, 4, false));
    register_module("dec", dec, std::make_shared<nn::Linear>(4, 4, false));
    dec->weight = enc->weight;
    dec->replace_parameter("weight", enc->weight);
  }
};
struct MyLinear : nn::Linear {
  MyLinear() : nn::Linear(4, 4) {}
  Tensor forward(const Tensor& x) override { return nn::Linear::forward(x) * 2.0; }
};
}  // namespace

TEST_CASE("what cannot be replaced is left float with its reason, and nothing lies about it") {
  Unbound u;
  Generator g(11);
  Tensor x = randn({3, 4}, {}, &g);
  Report r = quantize_dynamic(u);
  CHECK(r.converted == std::vector<std::string>{"other"});
  CHECK(r.reason("fc").find("held outside the module tree") != std::string::npos);
  CHECK(typeid(*u.fc) == typeid(nn::Linear));  // the registry still agrees with the member
  CHECK(typeid(*u.named_children()[0].second) == typeid(nn::Linear));
  CHECK(std::dynamic_pointer_cast<QuantizedLinear>(u.other));

  Tied t;
  r = quantize_dynamic(t);
  CHECK(r.converted.empty());
  CHECK(r.reason("enc").find("weight tied to another parameter (weight is also dec.weight") != std::string::npos);
  CHECK(r.reason("dec").find("weight is also enc.weight") != std::string::npos);

  nn::Sequential s({std::make_shared<MyLinear>(), std::make_shared<nn::Embedding>(5, 4)});
  r = quantize_dynamic(s);
  CHECK(r.reason("0").find("a subclass of Linear with its own forward") != std::string::npos);
  CHECK(r.reason("1").find("embedding: not quantizable") != std::string::npos);

  auto lone = std::make_shared<nn::Linear>(4, 4);
  r = quantize_dynamic(*lone);
  CHECK(r.reason("").find("the model itself is the layer") != std::string::npos);

  // convert: a Linear that prepare never saw stays float, and says so.
  nn::Sequential s2({std::make_shared<nn::Linear>(4, 4)});
  prepare_static(s2);
  s2.push_back(std::make_shared<nn::Linear>(4, 4));
  {
    NoGradGuard ng;
    s2.forward(x);
  }
  r = convert(s2);
  CHECK(r.converted == std::vector<std::string>{"0"});
  CHECK(r.reason("1").find("not prepared") != std::string::npos);
}

TEST_CASE("replace_module: the registry and the bound member move together; a misfit changes nothing") {
  Unbound u;
  auto q = std::make_shared<QuantizedLinear>(*u.other);
  u.replace_module("other", q);
  CHECK(u.other == q);
  CHECK(u.named_children()[1].second == q);
  CHECK(u.holds(*q) == 2);
  CHECK(error_of([&] {
          u.replace_module("other", std::make_shared<nn::ReLU>());
        }).find("does not fit the member bound to \"other\"") != std::string::npos);
  CHECK(u.other == q);
  CHECK(u.named_children()[1].second == q);
  CHECK(error_of([&] { u.replace_module("nope", q); }).find("no submodule named \"nope\"") != std::string::npos);
  nn::Sequential s({std::make_shared<nn::ReLU>()});
  auto l = std::make_shared<nn::Linear>(4, 4);
  s.replace_module("0", l);
  CHECK(s[0] == l);
  CHECK(s.holds(*l) == 2);
}

// SPDX-License-Identifier: MIT
// nn::fuse (nn/fuse.h): which layers it fuses and which it leaves, bit-equal
// values and gradients, nested trees, state_dict keys and checkpoints that
// carry over, optimizers built before it, and Sequential running its layers
// and nothing else.
#include <doctest/doctest.h>

#include <memory>
#include <set>
#include <string>
#include <typeinfo>
#include <vector>

#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/profiler.h>
#include <snug/nn/batch_norm.h>
#include <snug/nn/conv.h>
#include <snug/nn/fuse.h>
#include <snug/nn/layers.h>
#include <snug/nn/models/cnn.h>
#include <snug/nn/optim/optimizer.h>
#include "test_util.h"

using namespace snug;

namespace {

std::vector<std::string> kinds(const nn::Sequential& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size(); ++i) out.push_back(s[i]->name());
  return out;
}

std::vector<std::string> keys(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [k, t] : m.state_dict()) out.push_back(k);
  return out;
}

void check_same(const Tensor& a, const Tensor& b, const std::string& what) {
  CAPTURE(what);
  REQUIRE(a.defined() == b.defined());
  if (!a.defined()) return;
  REQUIRE(a.shape() == b.shape());
  CHECK(a.to_vector<double>() == b.to_vector<double>());
}

// Two models from the same seed: one stays unfused, the other is fused; the
// loss sum(model(x) * r) and every parameter's gradient must agree bit for bit.
template <class Make>
void check_fused_equals_unfused(Make make, const Tensor& x, size_t want_fused) {
  manual_seed(77);
  auto plain = make();
  manual_seed(77);
  auto fused = make();
  const std::vector<std::string> before = keys(*fused);
  const nn::FuseReport rep = nn::fuse(*fused);
  CHECK(rep.size() == want_fused);
  CHECK(keys(*fused) == before);
  const Tensor yp = plain->forward(x), yf = fused->forward(x);
  check_same(yf, yp, "output");
  const Tensor r = randn(yp.shape());
  (yp * r).sum().backward();
  (yf * r).sum().backward();
  const auto pp = plain->named_parameters(), pf = fused->named_parameters();
  REQUIRE(pp.size() == pf.size());
  for (size_t i = 0; i < pp.size(); ++i) {
    CHECK(pp[i].first == pf[i].first);
    check_same(pf[i].second.grad(), pp[i].second.grad(), "grad of " + pp[i].first);
  }
}

}  // namespace

TEST_CASE("fuse: W-MLP becomes a LinearAct and a FusedMLP, the absorbed layers Folded") {
  auto net = nn::models::make_wmlp();  // Flatten, Linear, ReLU, Linear, ReLU, Linear
  const nn::FuseReport r = nn::fuse(*net);
  CHECK(kinds(*net) == std::vector<std::string>{"Flatten", "LinearAct", "Folded", "FusedMLP", "Folded", "Folded"});
  REQUIRE(r.size() == 2);
  CHECK(r.fused[0].path == "1");
  CHECK(r.fused[0].layers == "Linear, ReLU");
  CHECK(r.fused[0].fused == "LinearAct(in=784, out=1024, bias=true, act=relu)");
  CHECK(r.fused[1].path == "3");
  CHECK(r.fused[1].layers == "Linear, ReLU, Linear");
  CHECK(r.fused[1].fused == "FusedMLP(in=1024, hidden=1024, out=10, act=relu)");
  CHECK(r.str().find("3: Linear, ReLU, Linear -> FusedMLP") != std::string::npos);
  CHECK((*net)[5]->repr() == "Folded(Linear(in=1024, out=10, bias=true) into 3)");
  // The fused layers hold the model's tensors, not copies.
  const auto mlp = std::dynamic_pointer_cast<nn::FusedMLP>((*net)[3]);
  REQUIRE(mlp);
  CHECK(mlp->weight2.is_same((*net)[5]->named_parameters(false)[0].second));
  // A second pass finds nothing more.
  const nn::FuseReport again = nn::fuse(*net);
  CHECK(again.size() == 0);
  CHECK(again.str() == "nn::fuse: nothing to fuse\n");
}

TEST_CASE("fuse: W-MLP and W-CNN give the unfused values and gradients, bit for bit") {
  check_fused_equals_unfused([] { return nn::models::make_wmlp(); }, randn({16, 784}), 2);
  check_fused_equals_unfused([] { return nn::models::make_wcnn(); }, randn({3, 1, 28, 28}), 3);
}

TEST_CASE("fuse: GELU in both forms, a Linear without bias, a triple at the end, f64") {
  auto make = [] {
    auto s = std::make_shared<nn::Sequential>();
    s->push_back(std::make_shared<nn::Linear>(6, 8, /*bias=*/false));
    s->push_back(std::make_shared<nn::GELU>(GeluApprox::tanh));
    s->push_back(std::make_shared<nn::Linear>(8, 8));
    s->push_back(std::make_shared<nn::GELU>());
    s->push_back(std::make_shared<nn::Linear>(8, 5));
    s->push_back(std::make_shared<nn::GELU>(GeluApprox::tanh));
    s->push_back(std::make_shared<nn::Linear>(5, 3));
    return s;
  };
  auto s = make();
  nn::fuse(*s);
  // Linear, GELU, (Linear, GELU, ...): a pair while the next Linear starts its own; the last three a triple.
  CHECK(kinds(*s) ==
        std::vector<std::string>{"LinearAct", "Folded", "LinearAct", "Folded", "FusedMLP", "Folded", "Folded"});
  CHECK((*s)[0]->repr() == "LinearAct(in=6, out=8, bias=false, act=gelu_tanh)");
  CHECK((*s)[2]->repr() == "LinearAct(in=8, out=8, bias=true, act=gelu)");
  check_fused_equals_unfused(make, randn({4, 6}), 3);
  auto make64 = [&] {
    auto m = make();
    m->to(DType::f64);
    return m;
  };
  check_fused_equals_unfused(make64, randn({4, 6}, DType::f64), 3);
}

TEST_CASE("fuse: leaves what it does not know, subclasses and non-Sequential containers alone") {
  struct MyLinear : nn::Linear {  // a subclass: its forward must keep running
    MyLinear() : nn::Linear(4, 4) {}
    Tensor forward(const Tensor& x) override { return nn::Linear::forward(x) + 1.0; }
  };
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Linear>(4, 4));
  s->push_back(std::make_shared<nn::SiLU>());  // not an activation fuse knows
  s->push_back(std::make_shared<nn::Linear>(4, 4));
  s->push_back(std::make_shared<nn::Dropout>(0.0));  // between the Linear and the ReLU
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<MyLinear>());
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::Conv2d>(1, 1, 1));
  s->push_back(std::make_shared<nn::BatchNorm2d>(1));  // conv, norm, relu: no Conv2d + ReLU pair
  s->push_back(std::make_shared<nn::ReLU>());
  const std::vector<std::string> before = kinds(*s);
  CHECK(nn::fuse(*s).size() == 0);
  CHECK(kinds(*s) == before);
  // A ModuleList's children are not chained by it: not fused, but searched.
  nn::ModuleList list;
  list.push_back(std::make_shared<nn::Linear>(4, 4));
  list.push_back(std::make_shared<nn::ReLU>());
  auto inner = std::make_shared<nn::Sequential>();
  inner->push_back(std::make_shared<nn::Linear>(4, 4));
  inner->push_back(std::make_shared<nn::ReLU>());
  list.push_back(inner);
  const nn::FuseReport r = nn::fuse(list);
  REQUIRE(r.size() == 1);
  CHECK(r.fused[0].path == "2.0");
  CHECK(list[0]->name() == "Linear");
  CHECK(kinds(*inner) == std::vector<std::string>{"LinearAct", "Folded"});
}

namespace {
// A model with a nested tree: a bound Sequential member holding a Sequential.
struct Tower : nn::Module {
  Tower() : Module("Tower") {
    auto block = std::make_shared<nn::Sequential>();
    block->push_back(std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1));
    block->push_back(std::make_shared<nn::ReLU>());
    auto mlp = std::make_shared<nn::Sequential>();
    mlp->push_back(std::make_shared<nn::Linear>(4 * 5 * 5, 12));
    mlp->push_back(std::make_shared<nn::GELU>());
    mlp->push_back(std::make_shared<nn::Linear>(12, 3));
    auto b = std::make_shared<nn::Sequential>();
    b->push_back(block);
    b->push_back(std::make_shared<nn::Flatten>());
    b->push_back(mlp);
    register_module("body", body, b);
    register_module("head", head, std::make_shared<nn::Linear>(3, 2));
  }
  Tensor forward(const Tensor& x) override { return head->forward(relu(body->forward(x))); }
  std::shared_ptr<nn::Sequential> body;
  std::shared_ptr<nn::Linear> head;
};
}  // namespace

TEST_CASE("fuse: a nested tree is rewritten at every depth, the rest of the model untouched") {
  Tower t;
  const nn::FuseReport r = nn::fuse(t);
  REQUIRE(r.size() == 2);
  CHECK(r.fused[0].path == "body.0.0");
  CHECK(r.fused[0].layers == "Conv2d, ReLU");
  CHECK(r.fused[0].fused == "Conv2dReLU(2, 4, kernel_size=(3, 3), padding=(1, 1))");
  CHECK(r.fused[1].path == "body.2.0");
  CHECK(r.fused[1].layers == "Linear, GELU, Linear");
  CHECK(t.head->name() == "Linear");
  check_fused_equals_unfused([] { return std::make_shared<Tower>(); }, randn({2, 2, 5, 5}), 2);
}

TEST_CASE("fuse: state_dict keys and order stay; an unfused checkpoint loads strictly, and back") {
  manual_seed(3);
  auto plain = nn::models::make_wcnn();
  manual_seed(4);
  auto fused = nn::models::make_wcnn();
  const auto params_before = fused->named_parameters();
  nn::fuse(*fused);
  const auto params_after = fused->named_parameters();
  REQUIRE(params_after.size() == params_before.size());
  for (size_t i = 0; i < params_after.size(); ++i) {
    CHECK(params_after[i].first == params_before[i].first);
    CHECK(params_after[i].second.is_same(params_before[i].second));  // the same tensors
  }
  CHECK(keys(*fused) == keys(*plain));
  CHECK(fused->load_state_dict(plain->state_dict(), /*strict=*/true).empty());  // an unfused checkpoint
  const Tensor x = randn({2, 1, 28, 28});
  check_same(fused->forward(x), plain->forward(x), "after loading the unfused weights");
  auto back = nn::models::make_wcnn();
  CHECK(back->load_state_dict(fused->state_dict(), /*strict=*/true).empty());  // and the other way
  check_same(back->forward(x), plain->forward(x), "unfused model from the fused one's state");
}

TEST_CASE("fuse: an optimizer built before fuse keeps training the same tensors; mode carries over") {
  auto run = [](bool fuse_it) {
    manual_seed(8);
    auto net = nn::models::make_wmlp();
    nn::optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
    net->eval();
    if (fuse_it) nn::fuse(*net);
    for (size_t i = 0; i < net->size(); ++i) CHECK_FALSE((*net)[i]->is_training());
    net->train();
    Generator g(9);
    const Tensor x = randn({8, 784}, {}, &g), r = randn({8, 10}, {}, &g);
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      (net->forward(x) * r).sum().backward();
      opt.step();
    }
    return net->forward(x);
  };
  check_same(run(true), run(false), "after two SGD steps");
}

TEST_CASE("Sequential::forward runs its layers and nothing else: no fusion without nn::fuse") {
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Linear>(8, 8));
  s->push_back(std::make_shared<nn::ReLU>());
  const Tensor x = randn({4, 8}, TensorOptions().with_requires_grad(true));
  auto ops = [&] {
    profiler::Profile prof;
    const Tensor y = s->forward(x);
    prof.stop();
    std::set<std::string> names;
    for (const auto& e : prof.events()) names.insert(e.name);
    return std::make_pair(names, std::string(y.grad_fn()->name()));
  };
  const auto [plain_ops, plain_node] = ops();
  CHECK(plain_ops.count("relu") == 1);
  CHECK(plain_node == "relu");
  nn::fuse(*s);
  const auto [fused_ops, fused_node] = ops();
  CHECK(fused_ops.count("relu") == 0);
  CHECK(fused_node == "linear_relu");
}

TEST_CASE("fuse: the fused layers print in the tree") {
  auto net = nn::models::make_wcnn();
  nn::fuse(*net);
  const std::string tree = net->pretty();
  CHECK(tree.find("Conv2dReLU(1, 32, kernel_size=(3, 3))") != std::string::npos);
  CHECK(tree.find("Folded(ReLU into 0)") != std::string::npos);
  CHECK(tree.find("FusedMLP(in=9216, hidden=128, out=10, act=relu)") != std::string::npos);
}

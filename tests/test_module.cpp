// SPDX-License-Identifier: MIT
// nn::Module: registration, traversal order and prefixes, tied weights,
// train/eval, zero_grad, apply, in-place dtype/device conversion,
// state_dict / load_state_dict (strict and not), containers, bad names.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>
#include <snug/nn/layers.h>
#include <snug/nn/module.h>
#include <snug/nn/optim/optimizer.h>

using namespace snug;
using namespace snug::nn;

namespace {

Tensor vals(const std::vector<double>& v, const Shape& s) { return from_vector<double>(v, s, TensorOptions(kFloat32)); }

// A leaf module with one weight (2x3), one bias (3) and a buffer.
struct Leaf : Module {
  Tensor w, b, buf;
  Leaf() : Module("Leaf") {
    w = register_parameter("w", vals({1, 2, 3, 4, 5, 6}, {2, 3}));
    b = register_parameter("b", vals({0.5, -0.5, 1}, {3}));
    buf = register_buffer("count", from_vector<int64_t>({7}, {1}, TensorOptions(kInt64)));
  }
  Tensor forward(const Tensor& x) override { return matmul(x, w) + b; }
};

// Two leaves and a direct parameter; registered in the order a, scale, b.
struct Tree : Module {
  std::shared_ptr<Leaf> a, c;
  Tensor scale;
  Tree() : Module("Tree") {
    a = register_module("a", std::make_shared<Leaf>());
    scale = register_parameter("scale", vals({2}, {1}));
    c = register_module("c", std::make_shared<Leaf>());
  }
};

std::vector<std::string> names(const NamedTensors& nt) {
  std::vector<std::string> out;
  for (auto& [n, t] : nt) out.push_back(n);
  return out;
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return "";
}

}  // namespace

TEST_CASE("named_parameters: registration order, own params before children, dotted prefixes") {
  Tree t;
  // Own parameters come first (PyTorch order), then each child's in registration order.
  std::vector<std::string> want = {"scale", "a.w", "a.b", "c.w", "c.b"};
  CHECK(names(t.named_parameters()) == want);
  CHECK(names(t.named_parameters(/*recurse=*/false)) == std::vector<std::string>{"scale"});
  CHECK(names(t.named_buffers()) == std::vector<std::string>{"a.count", "c.count"});
  CHECK(t.parameters().size() == 5);
  CHECK(t.parameters()[1].is_same(t.a->w));
  // Parameters are leaves that require grad; buffers do not.
  for (auto& p : t.parameters()) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  CHECK_FALSE(t.a->buf.requires_grad());
  CHECK(t.num_parameters() == 1 + 2 * (6 + 3));
  auto mods = t.named_modules();
  REQUIRE(mods.size() == 3);
  CHECK(mods[0].first == "");
  CHECK(mods[1].first == "a");
  CHECK(mods[2].first == "c");
  CHECK(mods[2].second.get() == t.c.get());
}

TEST_CASE("register_parameter with requires_grad=false and undefined parameters") {
  struct M : Module {
    M() : Module("M") {
      register_parameter("frozen", vals({1, 2}, {2}), false);
      register_parameter("absent", Tensor());
    }
  } m;
  auto np = m.named_parameters();
  REQUIRE(np.size() == 1);  // undefined ones are not listed
  CHECK(np[0].first == "frozen");
  CHECK_FALSE(np[0].second.requires_grad());
  CHECK(m.num_parameters() == 2);
}

TEST_CASE("tied weights are listed once, under the first name, and counted once") {
  struct Tied : Module {
    std::shared_ptr<Linear> enc, dec;
    Tied() : Module("Tied") {
      enc = register_module("enc", std::make_shared<Linear>(4, 4, false));
      dec = register_module("dec", std::make_shared<Linear>(4, 4, true));
      dec->weight = enc->weight;
      dec->replace_parameter("weight", enc->weight);
    }
  } m;
  CHECK(names(m.named_parameters()) == std::vector<std::string>{"enc.weight", "dec.bias"});
  CHECK(m.num_parameters() == 16 + 4);
  // state_dict keeps both names (each loadable), sharing storage.
  auto sd = m.state_dict();
  CHECK(names(sd) == std::vector<std::string>{"enc.weight", "dec.weight", "dec.bias"});
  CHECK(sd[0].second.data_ptr() == sd[1].second.data_ptr());
  CHECK_THROWS_AS(m.dec->replace_parameter("nope", m.enc->weight), ValueError);
}

TEST_CASE("train/eval propagate to every descendant") {
  Tree t;
  CHECK(t.is_training());
  CHECK(t.a->is_training());
  t.eval();
  CHECK_FALSE(t.is_training());
  CHECK_FALSE(t.a->is_training());
  CHECK_FALSE(t.c->is_training());
  t.c->train();
  CHECK(t.c->is_training());
  CHECK_FALSE(t.a->is_training());
  t.train();
  CHECK(t.a->is_training());
}

TEST_CASE("zero_grad: set_to_none drops the gradient, otherwise zeroes it in place") {
  Leaf m;
  Tensor x = vals({1, 1}, {1, 2});
  sum(m.forward(x)).backward();
  REQUIRE(m.w.grad().defined());
  // d/dw sum(x @ w + b) = x^T broadcast: every entry 1.
  for (double g : m.w.grad().to_vector<double>()) CHECK(g == 1.0);
  Tensor g_before = m.w.grad();
  m.zero_grad(false);
  REQUIRE(m.w.grad().defined());
  CHECK(m.w.grad().data_ptr() == g_before.data_ptr());  // same buffer
  for (double g : m.w.grad().to_vector<double>()) CHECK(g == 0.0);
  m.zero_grad();  // default: none
  CHECK_FALSE(m.w.grad().defined());
  CHECK_FALSE(m.b.grad().defined());
  m.zero_grad(false);  // with no grad it stays none
  CHECK_FALSE(m.w.grad().defined());
}

TEST_CASE("apply visits this module and every descendant in pre-order") {
  Tree t;
  std::vector<std::string> seen;
  t.apply([&](Module& m) { seen.push_back(m.name()); });
  CHECK(seen == std::vector<std::string>{"Tree", "Leaf", "Leaf"});
  int n = 0;
  t.apply([&](Module& m) {
    if (auto* l = dynamic_cast<Leaf*>(&m)) {
      NoGradGuard ng;
      l->b.fill_(++n);
    }
  });
  CHECK(t.a->b.to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(t.c->b.to_vector<double>() == std::vector<double>{2, 2, 2});
}

TEST_CASE("to(kFloat64) converts in place: same handles, values kept, an earlier optimizer still updates them") {
  Tree t;
  Tensor w = t.a->w;
  auto* impl = w.impl();
  optim::SGD sgd(t.parameters(), {.lr = 0.5});
  t.to(kFloat64);
  CHECK(w.impl() == impl);
  CHECK(t.a->w.dtype() == kFloat64);
  CHECK(t.scale.dtype() == kFloat64);
  CHECK(t.a->buf.dtype() == kInt64);  // integer buffers are left alone
  CHECK(t.a->w.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(t.a->w.requires_grad());
  // The optimizer's handles see the f64 tensors.
  CHECK(sgd.param_groups()[0].params[1].dtype() == kFloat64);
  Tensor x = from_vector<double>({1, 2}, {1, 2}, TensorOptions(kFloat64));
  Tensor y = t.a->forward(x);
  CHECK(y.dtype() == kFloat64);
  sum(y).backward();
  // d/dw = x^T (1 x 3 ones): rows 1 and 2.
  sgd.step();
  CHECK(t.a->w.to_vector<double>() == std::vector<double>{1 - 0.5, 2 - 0.5, 3 - 0.5, 4 - 1, 5 - 1, 6 - 1});
  CHECK(t.a->b.to_vector<double>() == std::vector<double>{0.5 - 0.5, -0.5 - 0.5, 1 - 0.5});
  // An existing gradient is converted too.
  t.to(kFloat32);
  CHECK(t.a->w.grad().dtype() == kFloat32);
  CHECK_THROWS_AS(t.to(kInt64), DTypeError);
}

TEST_CASE("to(\"cpu:1\") moves parameters and buffers in place onto the virtual device") {
  Tree t;
  Tensor w = t.c->w;
  auto* impl = w.impl();
  size_t before = memory::allocated(Device("cpu:1"));
  t.to("cpu:1");
  CHECK(w.impl() == impl);
  for (auto& p : t.parameters()) CHECK(p.device() == Device("cpu:1"));
  for (auto& [n, b] : t.named_buffers()) CHECK(b.device() == Device("cpu:1"));
  CHECK(memory::allocated(Device("cpu:1")) > before);
  CHECK(t.c->w.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(t.c->buf.to_vector<int64_t>() == std::vector<int64_t>{7});
  t.to(kCPU);
  CHECK(t.c->w.device() == kCPU);
  CHECK(w.impl() == impl);
}

TEST_CASE("state_dict / load_state_dict round trip") {
  Tree src, dst;
  {
    NoGradGuard ng;
    src.a->w.fill_(3);
    src.c->b.fill_(-2);
    src.scale.fill_(9);
    src.c->buf.fill_(42);
  }
  auto sd = src.state_dict();
  CHECK(names(sd) == std::vector<std::string>{"scale", "a.w", "a.b", "c.w", "c.b", "a.count", "c.count"});
  for (auto& [n, tns] : sd) CHECK_FALSE(tns.requires_grad());  // detached
  // Shares storage with the module.
  CHECK(sd[1].second.data_ptr() == src.a->w.data_ptr());
  Tensor dst_w = dst.a->w;
  CHECK(dst.load_state_dict(sd) == "");
  CHECK(dst.a->w.is_same(dst_w));  // copied into, not replaced
  CHECK(dst.a->w.to_vector<double>() == std::vector<double>(6, 3));
  CHECK(dst.c->b.to_vector<double>() == std::vector<double>(3, -2));
  CHECK(dst.scale.item() == 9);
  CHECK(dst.c->buf.to_vector<int64_t>() == std::vector<int64_t>{42});
  CHECK(dst.a->buf.to_vector<int64_t>() == std::vector<int64_t>{7});
  // A copy, not an alias.
  {
    NoGradGuard ng;
    src.a->w.fill_(0);
  }
  CHECK(dst.a->w.to_vector<double>() == std::vector<double>(6, 3));
}

TEST_CASE("strict load_state_dict lists missing, unexpected and mis-shaped keys and modifies nothing") {
  Tree src, dst;
  {
    NoGradGuard ng;
    for (auto& p : src.parameters()) p.fill_(5);
  }
  NamedTensors sd;
  for (auto& [n, t] : src.state_dict())
    if (n != "c.b" && n != "a.count") sd.emplace_back(n, t);
  sd.emplace_back("extra.thing", zeros({1}));
  for (auto& [n, t] : sd)
    if (n == "a.w") t = zeros({3, 2});
  std::string msg = error_of<ValueError>([&] { dst.load_state_dict(sd); });
  CHECK(msg.find("missing keys: c.b, a.count") != std::string::npos);
  CHECK(msg.find("unexpected keys: extra.thing") != std::string::npos);
  CHECK(msg.find("a.w") != std::string::npos);
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("[3, 2]") != std::string::npos);
  // Nothing was loaded, not even the keys that matched.
  CHECK(dst.scale.item() == 2);
  CHECK(dst.c->w.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});

  // Non-strict: loads what matches and reports the rest.
  std::string problems = dst.load_state_dict(sd, /*strict=*/false);
  CHECK(problems.find("missing keys: c.b, a.count") != std::string::npos);
  CHECK(problems.find("unexpected keys: extra.thing") != std::string::npos);
  CHECK(problems.find("shape mismatches: a.w") != std::string::npos);
  CHECK(dst.scale.item() == 5);
  CHECK(dst.c->w.to_vector<double>() == std::vector<double>(6, 5));
  CHECK(dst.a->w.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});  // mis-shaped: untouched
  CHECK(dst.c->b.to_vector<double>() == std::vector<double>{0.5, -0.5, 1});      // missing: untouched
}

TEST_CASE("load_state_dict converts dtype (f64 source into f32 parameters)") {
  Leaf m;
  NamedTensors sd = {{"w", from_vector<double>({6, 5, 4, 3, 2, 1}, {2, 3}, TensorOptions(kFloat64))},
                     {"b", from_vector<double>({1, 2, 3}, {3}, TensorOptions(kFloat64))},
                     {"count", from_vector<int64_t>({3}, {1}, TensorOptions(kInt64))}};
  CHECK(m.load_state_dict(sd) == "");
  CHECK(m.w.dtype() == kFloat32);
  CHECK(m.w.to_vector<double>() == std::vector<double>{6, 5, 4, 3, 2, 1});
}

TEST_CASE("Sequential chains modules; ModuleList registers \"0\", \"1\", ...") {
  auto l1 = std::make_shared<Linear>(3, 2, false), l2 = std::make_shared<Linear>(2, 1, true);
  {
    NoGradGuard ng;
    l1->weight.copy_(vals({1, 0, -1, 2, 1, 0}, {2, 3}));
    l2->weight.copy_(vals({1, -1}, {1, 2}));
    l2->bias.fill_(0.5);
  }
  Sequential seq({l1, std::make_shared<ReLU>(), l2});
  CHECK(seq.size() == 3);
  CHECK(names(seq.named_parameters()) == std::vector<std::string>{"0.weight", "2.weight", "2.bias"});
  // x = (1, 2, 3): l1 -> (1 - 3, 2 + 2) = (-2, 4); relu -> (0, 4); l2 -> 0 - 4 + 0.5
  Tensor y = seq.forward(vals({1, 2, 3}, {1, 3}));
  CHECK(y.shape() == Shape{1, 1});
  CHECK(y.item() == doctest::Approx(-3.5));
  CHECK(seq[2].get() == l2.get());
  CHECK_THROWS_AS(seq[3], IndexError);

  ModuleList list;
  list.push_back(std::make_shared<Leaf>()).push_back(std::make_shared<Linear>(2, 2));
  CHECK(list.size() == 2);
  CHECK(names(list.named_parameters()) == std::vector<std::string>{"0.w", "0.b", "1.weight", "1.bias"});
  CHECK(list.at<Linear>(1) != nullptr);
  CHECK(list.at<Linear>(0) == nullptr);
  CHECK_THROWS_AS(list[2], IndexError);
  int n = 0;
  for (auto& m : list) n += m != nullptr;
  CHECK(n == 2);
  // No single-tensor forward of its own.
  std::string msg = error_of<ValueError>([&] { list.forward(zeros({1})); });
  CHECK(msg.find("ModuleList") != std::string::npos);
}

TEST_CASE("bad names are rejected") {
  struct M : Module {
    M() : Module("M") { register_parameter("p", zeros({1})); }
    void reg_param(const std::string& n) { register_parameter(n, zeros({1})); }
    void reg_buf(const std::string& n) { register_buffer(n, zeros({1})); }
    void reg_mod(const std::string& n, std::shared_ptr<Module> m) { register_module(n, std::move(m)); }
  } m;
  CHECK_THROWS_AS(m.reg_param(""), ValueError);
  CHECK_THROWS_AS(m.reg_param("a.b"), ValueError);
  CHECK_THROWS_AS(m.reg_param("p"), ValueError);
  CHECK_THROWS_AS(m.reg_buf(""), ValueError);
  CHECK_THROWS_AS(m.reg_buf("x.y"), ValueError);
  CHECK_THROWS_AS(m.reg_mod("", std::make_shared<Leaf>()), ValueError);
  CHECK_THROWS_AS(m.reg_mod("a.b", std::make_shared<Leaf>()), ValueError);
  CHECK_THROWS_AS(m.reg_mod("null", nullptr), ValueError);
  m.reg_mod("child", std::make_shared<Leaf>());
  CHECK_THROWS_AS(m.reg_mod("child", std::make_shared<Leaf>()), ValueError);
  // A name may not be reused across parameters, buffers and submodules: the
  // state_dict keys would collide.
  CHECK_THROWS_AS(m.reg_buf("p"), ValueError);
  CHECK_THROWS_AS(m.reg_param("child"), ValueError);
  CHECK_THROWS_AS(m.reg_mod("p", std::make_shared<Leaf>()), ValueError);
  std::string msg = error_of<ValueError>([&] { m.reg_param("a.b"); });
  CHECK(msg.find("a.b") != std::string::npos);
}

TEST_CASE("the base forward throws naming the module; repr and pretty") {
  Tree t;
  std::string msg = error_of<ValueError>([&] { t.forward(zeros({1})); });
  CHECK(msg.find("Tree") != std::string::npos);
  Linear l(3, 4);
  CHECK(l.repr() == "Linear(in=3, out=4, bias=true)");
  std::string p = t.pretty();
  CHECK(p.find("(a): Leaf") != std::string::npos);
  CHECK(p.find("(c): Leaf") != std::string::npos);
}

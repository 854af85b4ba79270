// SPDX-License-Identifier: MIT
// Optimizer defaults and parameter-group options (NOTE [ Parameter group
// options ] in nn/optim/optimizer.h): every optimizer's defaults are
// PyTorch's (bitsandbytes' for AdamW8bit) and one step with them gives the
// numbers PyTorch's algorithm gives (worked out in double arithmetic, printed
// to 17 digits); a group takes the optimizer's value for every option it does
// not set, and overrides only the ones it sets.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <snug/nn/optim/adamw8bit.h>
#include <snug/nn/optim/optimizer.h>
#include "test_util.h"

using namespace snug;
using snug::testing::error_of;
using namespace snug::nn;
using namespace snug::nn::optim;

namespace {

using Vec = std::vector<double>;

Tensor param(const Vec& v, DType dt = kFloat64) {
  Tensor t = from_vector<double>(v, {int64_t(v.size())}, TensorOptions(dt));
  t.requires_grad_(true);
  return t;
}
void set_grad(const Tensor& p, const Vec& g) {
  p.set_grad(from_vector<double>(g, {int64_t(g.size())}, TensorOptions(p.dtype())));
}
void check_close(const Tensor& t, const Vec& want, double tol = 1e-12) {
  auto got = t.to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], " want ", want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])));
  }
}
double option(const Optimizer& opt, size_t group, const std::string& key) {
  const auto& o = opt.param_groups().at(group).options;
  auto it = o.find(key);
  REQUIRE_MESSAGE(it != o.end(), "group ", group, " has no option ", key);
  return it->second;
}
bool has_key(const NamedTensors& sd, const std::string& key) {
  for (auto& [k, t] : sd)
    if (k == key) return true;
  return false;
}

// Two steps from p = (1, -2) with gradients (0.5, -0.25) then (-1, 0.125).
const Vec kInit = {1.0, -2.0};
const Vec kGrad1 = {0.5, -0.25}, kGrad2 = {-1.0, 0.125};

}  // namespace

TEST_CASE("SGD defaults are PyTorch's: lr 1e-3, momentum 0, dampening 0, weight_decay 0, nesterov false") {
  Tensor p = param(kInit);
  SGD opt({p}, {});
  CHECK(opt.defaults.lr == 1e-3);
  CHECK(opt.defaults.momentum == 0.0);
  CHECK(opt.defaults.dampening == 0.0);
  CHECK(opt.defaults.weight_decay == 0.0);
  CHECK_FALSE(opt.defaults.nesterov);
  // The group reads back resolved, as PyTorch's param_groups.
  CHECK(opt.param_groups()[0].lr == 1e-3);
  CHECK(opt.param_groups()[0].weight_decay == 0.0);
  CHECK(option(opt, 0, "momentum") == 0.0);
  CHECK(option(opt, 0, "dampening") == 0.0);
  CHECK(option(opt, 0, "nesterov") == 0.0);
  // p -= 1e-3 g
  set_grad(p, kGrad1);
  opt.step();
  check_close(p, {0.99950000000000006, -1.9997499999999999});
}

TEST_CASE("Adam defaults are PyTorch's: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0") {
  Tensor p = param(kInit);
  Adam opt({p}, {});
  CHECK(opt.name() == "Adam");
  CHECK(opt.defaults.lr == 1e-3);
  CHECK(opt.defaults.beta1 == 0.9);
  CHECK(opt.defaults.beta2 == 0.999);
  CHECK(opt.defaults.eps == 1e-8);
  CHECK(opt.defaults.weight_decay == 0.0);
  CHECK(opt.param_groups()[0].lr == 1e-3);
  CHECK(opt.param_groups()[0].weight_decay == 0.0);
  CHECK(option(opt, 0, "beta1") == 0.9);
  CHECK(option(opt, 0, "beta2") == 0.999);
  CHECK(option(opt, 0, "eps") == 1e-8);
  set_grad(p, kGrad1);
  opt.step();
  set_grad(p, kGrad2);
  opt.step();
  check_close(p, {0.99936610354240563, -1.9987336630138173});
}

TEST_CASE("AdamW defaults are PyTorch's: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01") {
  Tensor p = param(kInit);
  AdamW opt({p}, {});
  CHECK(opt.name() == "AdamW");
  CHECK(opt.defaults.lr == 1e-3);
  CHECK(opt.defaults.beta1 == 0.9);
  CHECK(opt.defaults.beta2 == 0.999);
  CHECK(opt.defaults.eps == 1e-8);
  CHECK(opt.defaults.weight_decay == 0.01);
  CHECK(opt.param_groups()[0].lr == 1e-3);
  CHECK(opt.param_groups()[0].weight_decay == 0.01);
  CHECK(option(opt, 0, "beta1") == 0.9);
  CHECK(option(opt, 0, "beta2") == 0.999);
  CHECK(option(opt, 0, "eps") == 1e-8);
  // Each step first decays p by (1 - 1e-3 * 0.01), then takes Adam's step.
  set_grad(p, kGrad1);
  opt.step();
  set_grad(p, kGrad2);
  opt.step();
  check_close(p, {0.99934611364240555, -1.998693673213817});
}

TEST_CASE(
    "AdamW8bit defaults are bitsandbytes': lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01, "
    "min_8bit_size 4096, blocks of 256") {
  Tensor p = param(kInit, kFloat32);
  AdamW8bit opt({p}, {});
  CHECK(opt.defaults.lr == 1e-3);
  CHECK(opt.defaults.beta1 == 0.9);
  CHECK(opt.defaults.beta2 == 0.999);
  CHECK(opt.defaults.eps == 1e-8);
  CHECK(opt.defaults.weight_decay == 0.01);
  CHECK(opt.defaults.min_8bit_size == 4096);
  CHECK(opt.defaults.block_size == 256);
  CHECK(opt.param_groups()[0].lr == 1e-3);
  CHECK(opt.param_groups()[0].weight_decay == 0.01);
  CHECK(option(opt, 0, "beta1") == 0.9);
  CHECK(option(opt, 0, "beta2") == 0.999);
  CHECK(option(opt, 0, "eps") == 1e-8);
  // A small tensor keeps f32 moments: AdamW's two steps, in f32.
  set_grad(p, kGrad1);
  opt.step();
  set_grad(p, kGrad2);
  opt.step();
  check_close(p, {0.99934611364240555, -1.998693673213817}, 1e-6);
  // A tensor of 4096 elements gets 8-bit moments; its first step uses the
  // exact new moments, so it is AdamW's first step: p (1 - 1e-5) - 1e-3 sign(g).
  Tensor q = param(Vec(4096, 1.0), kFloat32);
  AdamW8bit opt8({q}, {});
  Vec g(4096);
  for (size_t i = 0; i < g.size(); ++i) g[i] = (i % 2 ? -1.0 : 1.0) * (0.5 + double(i % 7));
  set_grad(q, g);
  opt8.step();
  CHECK(has_key(opt8.state_dict(), "state.0.0.exp_avg_q"));
  Vec want(4096);
  for (size_t i = 0; i < want.size(); ++i) want[i] = (1 - 1e-5) - 1e-3 * (g[i] > 0 ? 1 : -1);
  check_close(q, want, 1e-6);
}

TEST_CASE("parameter groups take the optimizer's value for every option they do not set") {
  // Group 0 sets nothing, group 1 only lr, group 2 only momentum.
  Tensor a = param({1.0}), b = param({1.0}), c = param({1.0});
  ParamGroup g0{{a}}, g1{{b}}, g2{{c}};
  g1.lr = 0.01;
  g2.options["momentum"] = 0.0;
  SGD opt(std::vector<ParamGroup>{g0, g1, g2}, {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.25});
  const auto& groups = opt.param_groups();
  CHECK(groups[0].lr == 0.1);
  CHECK(groups[1].lr == 0.01);
  CHECK(groups[2].lr == 0.1);
  for (size_t i = 0; i < 3; ++i) CHECK(groups[i].weight_decay == 0.25);
  CHECK(option(opt, 0, "momentum") == 0.5);
  CHECK(option(opt, 1, "momentum") == 0.5);
  CHECK(option(opt, 2, "momentum") == 0.0);
  for (int s = 0; s < 2; ++s) {
    for (auto& t : {a, b, c}) set_grad(t, {1.0});
    opt.step();
  }
  // d = g + 0.25 p.  Momentum 0.5: buf1 = d1, buf2 = 0.5 buf1 + d2.
  //   a: d1 = 1.25, p1 = 1 - 0.125 = 0.875;  d2 = 1.21875, buf2 = 1.84375, p2 = 0.875 - 0.184375
  //   b: p1 = 1 - 0.0125 = 0.9875;  d2 = 1.246875, buf2 = 1.871875, p2 = 0.9875 - 0.01871875
  //   c (no momentum): p1 = 0.875;  p2 = 0.875 - 0.1 * 1.21875
  check_close(a, {0.875 - 0.184375});
  check_close(b, {0.9875 - 0.01871875});
  check_close(c, {0.875 - 0.121875});
  // A group added later resolves the same way.
  Tensor d = param({1.0});
  ParamGroup g3{{d}};
  g3.weight_decay = 0.0;
  opt.add_param_group(g3);
  CHECK(opt.param_groups()[3].lr == 0.1);
  CHECK(opt.param_groups()[3].weight_decay == 0.0);
  CHECK(option(opt, 3, "momentum") == 0.5);
}

TEST_CASE("parameter groups of Adam, AdamW and AdamW8bit override only what they set") {
  Tensor a = param({1.0}), b = param({1.0});
  ParamGroup g0{{a}}, g1{{b}};
  g1.options["beta1"] = 0.5;
  AdamW opt(std::vector<ParamGroup>{g0, g1}, {.lr = 0.1, .eps = 1e-12});
  CHECK(opt.param_groups()[0].lr == 0.1);
  CHECK(opt.param_groups()[1].lr == 0.1);
  CHECK(opt.param_groups()[1].weight_decay == 0.01);  // AdamW's default
  CHECK(option(opt, 0, "beta1") == 0.9);
  CHECK(option(opt, 1, "beta1") == 0.5);
  CHECK(option(opt, 1, "beta2") == 0.999);
  CHECK(option(opt, 1, "eps") == 1e-12);
  // The first step moves by lr sign(g) after the decay, whatever beta1.
  set_grad(a, {2.0});
  set_grad(b, {-3.0});
  opt.step();
  check_close(a, {1 - 0.1 * 0.01 - 0.1}, 1e-9);
  check_close(b, {1 - 0.1 * 0.01 + 0.1}, 1e-9);

  Tensor c = param({1.0}, kFloat32);
  ParamGroup g2{{c}};
  g2.options["eps"] = 1e-6;
  AdamW8bit opt8(std::vector<ParamGroup>{g2}, {.lr = 0.05});
  CHECK(opt8.param_groups()[0].lr == 0.05);
  CHECK(opt8.param_groups()[0].weight_decay == 0.01);
  CHECK(option(opt8, 0, "beta1") == 0.9);
  CHECK(option(opt8, 0, "eps") == 1e-6);
}

TEST_CASE("schedulers scale the lr a group resolved to") {
  Tensor a = param({1.0}), b = param({1.0});
  ParamGroup g0{{a}}, g1{{b}};
  g1.lr = 0.01;
  SGD opt(std::vector<ParamGroup>{g0, g1}, {.lr = 0.1});
  StepLR sched(opt, 1, 0.5);
  sched.step();
  CHECK(opt.param_groups()[0].lr == doctest::Approx(0.05));
  CHECK(opt.param_groups()[1].lr == doctest::Approx(0.005));
  Tensor c = param({1.0});
  ParamGroup g2{{c}};
  AdamW w(std::vector<ParamGroup>{g2}, {.lr = 0.2});
  WarmupCosine wc(w, 4, 10);
  CHECK(w.param_groups()[0].lr == doctest::Approx(0.2 / 4));  // step 0 of 4 warmup steps
}

TEST_CASE("parameter group options: unknown names and bad values are errors naming them") {
  Tensor a = param({1.0}), b = param({1.0});
  ParamGroup typo{{a}};
  typo.options["momentun"] = 0.9;
  std::string m = error_of<ValueError>([&] { SGD(std::vector<ParamGroup>{typo}, {}); });
  CHECK(m.find("momentun") != std::string::npos);
  CHECK(m.find("momentum") != std::string::npos);  // lists what SGD takes
  ParamGroup other{{a}};
  other.options["momentum"] = 0.9;  // an SGD option given to Adam
  CHECK(error_of<ValueError>([&] { Adam(std::vector<ParamGroup>{other}, {}); }).find("momentum") != std::string::npos);
  // A bad value in a group names the group.
  ParamGroup ok{{a}}, bad{{b}};
  bad.options["momentum"] = -1;
  m = error_of<ValueError>([&] { SGD(std::vector<ParamGroup>{ok, bad}, {}); });
  CHECK(m.find("momentum") != std::string::npos);
  CHECK(m.find("group 1") != std::string::npos);
  ParamGroup nesterov{{b}};
  nesterov.options["nesterov"] = 1;  // with the default momentum 0
  CHECK(error_of<ValueError>([&] { SGD(std::vector<ParamGroup>{nesterov}, {}); }).find("Nesterov") !=
        std::string::npos);
  ParamGroup betas{{b}};
  betas.options["beta2"] = 1.0;
  CHECK(error_of<ValueError>([&] { AdamW(std::vector<ParamGroup>{betas}, {}); }).find("betas") != std::string::npos);
  ParamGroup neg{{b}};
  neg.lr = -0.5;
  CHECK(error_of<ValueError>([&] { AdamW(std::vector<ParamGroup>{neg}, {}); }).find("-0.5") != std::string::npos);
}

TEST_CASE("state_dict holds every group's resolved options; an older state without them still loads") {
  Tensor a = param({1.0, 2.0});
  ParamGroup g0{{a}};
  SGD opt(std::vector<ParamGroup>{g0}, {.lr = 0.1, .momentum = 0.9});
  NamedTensors sd = opt.state_dict();
  for (const char* k :
       {"group.0.lr", "group.0.weight_decay", "group.0.opt.momentum", "group.0.opt.dampening", "group.0.opt.nesterov"})
    CHECK_MESSAGE(has_key(sd, k), k);
  // Another optimizer with other values takes the saved ones.
  Tensor b = param({1.0, 2.0});
  SGD other({b}, {.lr = 0.5, .momentum = 0.1});
  other.load_state_dict(sd);
  CHECK(other.param_groups()[0].lr == 0.1);
  CHECK(option(other, 0, "momentum") == 0.9);
  // A state written before every option was saved (no "opt." keys): the
  // options keep their values.
  NamedTensors old;
  for (auto& [k, t] : sd)
    if (k.find(".opt.") == std::string::npos) old.emplace_back(k, t);
  SGD third({b}, {.lr = 0.5, .momentum = 0.3});
  third.load_state_dict(old);
  CHECK(third.param_groups()[0].lr == 0.1);
  CHECK(option(third, 0, "momentum") == 0.3);
  // An option this optimizer does not have is an error, and nothing changes.
  NamedTensors foreign = sd;
  foreign.emplace_back("group.0.opt.beta1", full({}, 0.5, DType::f64));
  CHECK(error_of<ValueError>([&] { third.load_state_dict(foreign); }).find("beta1") != std::string::npos);
  CHECK(option(third, 0, "momentum") == 0.3);
}

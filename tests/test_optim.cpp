// SPDX-License-Identifier: MIT
// Optimizers (SGD with momentum/dampening/Nesterov/weight decay, Adam, AdamW),
// parameter groups, state_dict round trips, errors, LR schedulers and
// clip_grad_norm_, each against plain double arithmetic written here.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/nn/optim/optimizer.h>
#include "test_util.h"

using namespace snug;
using snug::testing::error_of;
using namespace snug::nn;
using namespace snug::nn::optim;

namespace {

using Vec = std::vector<double>;

Tensor param(const Vec& v) {
  Tensor t = from_vector<double>(v, {int64_t(v.size())}, TensorOptions(kFloat64));
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
// The gradient fed at step s (0-based) to element i.
double grad_at(int s, size_t i) { return (s == 1 ? -0.5 : 1.0) * (double(i) + 1) + 0.25 * s; }
Vec grads(int s, size_t n) {
  Vec g(n);
  for (size_t i = 0; i < n; ++i) g[i] = grad_at(s, i);
  return g;
}

// Reference SGD, one element at a time (PyTorch's algorithm).
struct RefSGD {
  double lr, mom, damp, wd;
  bool nesterov;
  Vec buf;
  bool first = true;
  void step(Vec& p, const Vec& g) {
    if (buf.empty()) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      if (mom != 0) {
        buf[i] = first ? d : mom * buf[i] + (1 - damp) * d;
        d = nesterov ? d + mom * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
    first = false;
  }
};

struct RefAdam {
  double lr, b1, b2, eps, wd;
  bool decoupled;
  Vec m, v;
  int t = 0;
  void step(Vec& p, const Vec& g0) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = g0[i];
      if (decoupled)
        p[i] -= lr * wd * p[i];
      else
        g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
};

}  // namespace

TEST_CASE("SGD: plain, momentum, dampening, Nesterov, weight decay against reference steps") {
  struct Case {
    const char* name;
    SGDOptions o;
  };
  std::vector<Case> cases = {
      {"plain", {.lr = 0.1}},
      {"momentum", {.lr = 0.1, .momentum = 0.9}},
      {"dampening", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3}},
      {"nesterov", {.lr = 0.1, .momentum = 0.9, .nesterov = true}},
      {"weight decay", {.lr = 0.1, .weight_decay = 0.01}},
      {"all", {.lr = 0.2, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true}},
  };
  for (auto& c : cases) {
    INFO(c.name);
    Vec init = {1.0, -2.0, 0.5};
    Tensor p = param(init);
    SGD opt({p}, c.o);
    RefSGD ref{c.o.lr, c.o.momentum, c.o.dampening, c.o.weight_decay, c.o.nesterov};
    Vec want = init;
    for (int s = 0; s < 3; ++s) {
      set_grad(p, grads(s, 3));
      opt.step();
      ref.step(want, grads(s, 3));
      check_close(p, want);
    }
    CHECK(opt.step_count() == 3);
  }
  // A hand-computed case: lr 0.1, momentum 0.9, grads 1 then -0.5 on p = 1:
  // step 1: buf = 1, p = 0.9; step 2: buf = 0.9 - 0.5 = 0.4, p = 0.86.
  Tensor p = param({1.0});
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, {1});
  opt.step();
  check_close(p, {0.9});
  set_grad(p, {-0.5});
  opt.step();
  check_close(p, {0.86});
}

TEST_CASE("SGD: parameters without a gradient are skipped; the update is in place") {
  Tensor a = param({1, 2}), b = param({3});
  Tensor a_handle = a;
  const void* data = a.data_ptr();
  SGD opt({a, b}, {.lr = 0.5, .momentum = 0.9});
  set_grad(a, {1, 1});
  opt.step();
  check_close(a, {0.5, 1.5});
  check_close(b, {3});
  CHECK(a.data_ptr() == data);
  CHECK(a_handle.is_same(a));
  // No momentum buffer exists for b.
  for (auto& [k, t] : opt.state_dict()) CHECK(k.find("state.0.1.") == std::string::npos);
}

TEST_CASE("Adam and AdamW against reference steps (3 iterations)") {
  struct Case {
    const char* name;
    AdamOptions o;
    bool decoupled;
  };
  std::vector<Case> cases = {
      {"adam", {.lr = 0.1}, false},
      {"adam betas", {.lr = 0.05, .beta1 = 0.5, .beta2 = 0.7, .eps = 1e-3}, false},
      {"adam L2", {.lr = 0.1, .weight_decay = 0.1}, false},
      {"adamw", {.lr = 0.1, .weight_decay = 0.1}, true},
      {"adamw no decay", {.lr = 0.01}, true},
  };
  for (auto& c : cases) {
    INFO(c.name);
    Vec init = {0.3, -1.2, 2.0, 0.0};
    Tensor p = param(init);
    std::unique_ptr<Optimizer> opt;
    if (c.decoupled)
      opt = std::make_unique<AdamW>(std::vector<Tensor>{p},
                                    AdamWOptions{c.o.lr, c.o.beta1, c.o.beta2, c.o.eps, c.o.weight_decay});
    else
      opt = std::make_unique<Adam>(std::vector<Tensor>{p}, c.o);
    CHECK(opt->name() == (c.decoupled ? "AdamW" : "Adam"));
    RefAdam ref{c.o.lr, c.o.beta1, c.o.beta2, c.o.eps, c.o.weight_decay, c.decoupled};
    Vec want = init;
    for (int s = 0; s < 3; ++s) {
      set_grad(p, grads(s, 4));
      opt->step();
      ref.step(want, grads(s, 4));
      check_close(p, want);
    }
  }
  // Hand-computed first Adam step: m^ = g, v^ = g^2, so p -= lr * g / (|g| + eps) = lr * sign(g).
  Tensor p = param({1.0, 1.0});
  Adam opt({p}, {.lr = 0.1, .eps = 1e-12});
  set_grad(p, {3.0, -0.001});
  opt.step();
  check_close(p, {0.9, 1.1}, 1e-9);
  // AdamW decays before the update: p = 2 * (1 - 0.1 * 0.5) - 0.1 * sign(g)
  Tensor q = param({2.0});
  AdamW w({q}, {.lr = 0.1, .eps = 1e-12, .weight_decay = 0.5});
  set_grad(q, {4.0});
  w.step();
  check_close(q, {2 * 0.95 - 0.1}, 1e-9);
}

TEST_CASE("Adam on f32 parameters stays f32 and matches the reference") {
  Tensor p = from_vector<double>({0.5, -0.5}, {2}, TensorOptions(kFloat32));
  p.requires_grad_(true);
  AdamW opt({p}, {.lr = 0.01, .weight_decay = 0.01});
  RefAdam ref{0.01, 0.9, 0.999, 1e-8, 0.01, true};
  Vec want = {0.5, -0.5};
  for (int s = 0; s < 2; ++s) {
    set_grad(p, grads(s, 2));
    opt.step();
    ref.step(want, grads(s, 2));
  }
  CHECK(p.dtype() == kFloat32);
  check_close(p, want, 1e-6);
}

TEST_CASE("parameter groups: different lr, weight decay and per-group options") {
  Tensor a = param({1.0}), b = param({1.0}), c = param({1.0});
  ParamGroup g0{{a}, 0.1, 0.0, {}};
  ParamGroup g1{{b}, 0.01, 0.0, {{"momentum", 0.5}}};
  SGD opt(std::vector<ParamGroup>{g0, g1}, {.lr = 99});
  opt.add_param_group(ParamGroup{{c}, 1.0, 0.5, {}});
  CHECK(opt.param_groups().size() == 3);
  CHECK(opt.lr() == 0.1);
  for (int s = 0; s < 2; ++s) {
    for (auto& t : {a, b, c}) set_grad(t, {1.0});
    opt.step();
  }
  check_close(a, {1 - 0.1 - 0.1});
  // Momentum only in group 1: buf 1 then 0.5 + 1 = 1.5.
  check_close(b, {1 - 0.01 * 1 - 0.01 * 1.5});
  // Weight decay 0.5, lr 1: d = 1 + 0.5 p.  p1 = 1 - 1.5 = -0.5;  p2 = -0.5 - (1 - 0.25) = -1.25
  check_close(c, {-1.25});
  opt.set_lr(0.5);
  for (auto& g : opt.param_groups()) CHECK(g.lr == 0.5);
  // Optimizer::zero_grad
  opt.zero_grad(false);
  CHECK(a.grad().defined());
  CHECK(a.grad().item() == 0.0);
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("state_dict / load_state_dict: a resumed optimizer continues identically") {
  for (int kind = 0; kind < 2; ++kind) {
    INFO((kind == 0 ? "SGD" : "AdamW"));
    auto make = [&](std::vector<Tensor> ps) -> std::unique_ptr<Optimizer> {
      // Group 1 overrides one of the optimizer's own options.
      std::vector<ParamGroup> groups = {ParamGroup{{ps[0]}, 0.1, 0.01, {}},
                                        ParamGroup{{ps[1]}, 0.05, 0.0, {{kind == 0 ? "momentum" : "beta1", 0.8}}}};
      if (kind == 0) return std::make_unique<SGD>(groups, SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
      return std::make_unique<AdamW>(groups, AdamWOptions{.lr = 0.1});
    };
    Tensor a = param({1, 2}), b = param({-1});
    auto opt = make({a, b});
    for (int s = 0; s < 2; ++s) {
      set_grad(a, grads(s, 2));
      set_grad(b, grads(s, 1));
      opt->step();
    }
    auto sd = opt->state_dict();
    // Snapshot the parameters and the state, as a checkpoint would.
    Tensor a2 = param(a.to_vector<double>()), b2 = param(b.to_vector<double>());
    NamedTensors saved;
    for (auto& [k, t] : sd) saved.emplace_back(k, t.clone());
    auto opt2 = make({a2, b2});
    opt2->load_state_dict(saved);
    CHECK(opt2->step_count() == 2);
    for (int s = 2; s < 4; ++s) {
      for (auto [pa, pb, o] : {std::tuple{a, b, opt.get()}, std::tuple{a2, b2, opt2.get()}}) {
        set_grad(pa, grads(s, 2));
        set_grad(pb, grads(s, 1));
        o->step();
      }
    }
    CHECK(a.to_vector<double>() == a2.to_vector<double>());
    CHECK(b.to_vector<double>() == b2.to_vector<double>());
    // Keys name group and parameter.
    bool has = false;
    for (auto& [k, t] : sd) has = has || k == (kind == 0 ? "state.0.0.momentum_buffer" : "state.1.0.exp_avg_sq");
    CHECK(has);
  }
}

TEST_CASE("load_state_dict: layout mismatches are errors") {
  Tensor a = param({1, 2});
  SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, {1, 1});
  opt.step();
  auto sd = opt.state_dict();
  Tensor big = param({1, 2, 3});
  SGD other({big}, {.lr = 0.1, .momentum = 0.9});
  std::string m = error_of<ValueError>([&] { other.load_state_dict(sd); });
  CHECK(m.find("state.0.0.momentum_buffer") != std::string::npos);
  SGD two({param({1, 2}), param({3})}, {.lr = 0.1});
  m = error_of<ValueError>([&] { two.load_state_dict(sd); });
  CHECK(m.find("parameters") != std::string::npos);
  NamedTensors no_step;
  for (auto& [k, t] : sd)
    if (k != "step") no_step.emplace_back(k, t);
  m = error_of<ValueError>([&] { opt.load_state_dict(no_step); });
  CHECK(m.find("step") != std::string::npos);
  // Found by fuzzing (tests/fuzz/corpus/fuzz_checkpoint/regress_*): a NaN, negative,
  // fractional or huge count must be a clear error, not a conversion to an integer.
  for (double bad : {std::nan(""), -1.0, 2.5, 1e300, double(INFINITY)}) {
    CAPTURE(bad);
    NamedTensors bad_step;
    for (auto& [k, t] : sd) bad_step.emplace_back(k, k == "step" ? full({}, bad, DType::f64) : t);
    m = error_of<ValueError>([&] { opt.load_state_dict(bad_step); });
    CHECK(m.find("\"step\" must be a whole number") != std::string::npos);
    NamedTensors bad_count;
    for (auto& [k, t] : sd) bad_count.emplace_back(k, k == "group.0.num_params" ? full({}, bad, DType::f64) : t);
    CHECK_THROWS_AS(opt.load_state_dict(bad_count), ValueError);
  }
}

TEST_CASE("optimizer errors: bad betas, eps, lr < 0, weight decay < 0, duplicate parameters, Nesterov") {
  Tensor p = param({1});
  CHECK_THROWS_AS(Adam({p}, {.beta1 = 1.0}), ValueError);
  CHECK_THROWS_AS(Adam({p}, {.beta2 = -0.1}), ValueError);
  std::string m = error_of<ValueError>([&] { AdamW({p}, {.beta1 = 1.5}); });
  CHECK(m.find("AdamW") != std::string::npos);
  CHECK(m.find("betas") != std::string::npos);
  CHECK_THROWS_AS(Adam({p}, {.eps = 0}), ValueError);
  m = error_of<ValueError>([&] { SGD({p}, {.lr = -0.1}); });
  CHECK(m.find("-0.1") != std::string::npos);
  CHECK_THROWS_AS(Adam({p}, {.lr = -1}), ValueError);
  CHECK_THROWS_AS(SGD({p}, {.weight_decay = -1}), ValueError);
  CHECK_THROWS_AS(SGD({p}, {.momentum = -1}), ValueError);
  CHECK_THROWS_AS(SGD({p}, {.lr = 0.1, .nesterov = true}), ValueError);
  CHECK_THROWS_AS(SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}), ValueError);
  // The same parameter twice, within one group and across groups.
  CHECK_THROWS_AS(SGD({p, p}, {.lr = 0.1}), ValueError);
  SGD opt({p}, {.lr = 0.1});
  CHECK_THROWS_AS(opt.add_param_group(ParamGroup{{p}, 0.1, 0, {}}), ValueError);
  CHECK_THROWS_AS(opt.add_param_group(ParamGroup{{from_vector<int64_t>({1}, {1}, TensorOptions(kInt64))}, 0.1, 0, {}}),
                  ValueError);
  // Tied weights listed once by Module::parameters() are fine.
}

TEST_CASE("WarmupCosine: warmup, cosine middle, end and after") {
  Tensor p = param({1});
  SGD opt({p}, {.lr = 0.5});
  const int64_t W = 4, T = 14;
  const double mf = 0.1;
  WarmupCosine sch(opt, W, T, mf);
  // Constructing sets the lr of step 0.
  CHECK(opt.lr() == doctest::Approx(0.5 * 1 / 4.0));
  std::vector<double> lrs = {opt.lr()};
  for (int s = 1; s <= 20; ++s) {
    sch.step();
    CHECK(sch.last_step() == s);
    lrs.push_back(opt.lr());
  }
  // Warmup: (s + 1) / W of the base.
  for (int s = 0; s < W; ++s) CHECK(lrs[s] == doctest::Approx(0.5 * (s + 1) / W));
  CHECK(lrs[W] == doctest::Approx(0.5));  // start of the cosine
  // Middle of the cosine (s = W + (T - W) / 2): min + (1 - min) / 2.
  CHECK(lrs[9] == doctest::Approx(0.5 * (mf + (1 - mf) * 0.5)));
  CHECK(sch.lr_at(W) == doctest::Approx(1.0));
  CHECK(lrs[T] == doctest::Approx(0.5 * mf));
  CHECK(lrs[20] == doctest::Approx(0.5 * mf));
  // Monotone non-increasing after warmup.
  for (int s = W + 1; s <= 20; ++s) CHECK(lrs[s] <= lrs[s - 1] + 1e-15);
  // 3 of 10 cosine steps in: min + (1 - min) (1 + cos(0.3 pi)) / 2
  double quarter = mf + (1 - mf) * 0.5 * (1 + std::cos(M_PI * 0.3));
  CHECK(sch.lr_at(W + 3) == doctest::Approx(quarter));
  // Resuming sets the lr of that step.
  sch.set_last_step(2);
  CHECK(opt.lr() == doctest::Approx(0.5 * 3 / 4.0));
  CHECK_THROWS_AS(WarmupCosine(opt, 5, 4), ValueError);
  CHECK_THROWS_AS(WarmupCosine(opt, 0, 0), ValueError);
  CHECK_THROWS_AS(WarmupCosine(opt, 1, 4, 1.5), ValueError);
}

TEST_CASE("WarmupCosine scales each group's base lr; StepLR decays by gamma every step_size") {
  Tensor a = param({1}), b = param({1});
  SGD opt(std::vector<ParamGroup>{ParamGroup{{a}, 1.0, 0, {}}, ParamGroup{{b}, 0.1, 0, {}}}, {});
  StepLR sch(opt, 3, 0.5);
  std::vector<double> want = {1, 1, 1, 0.5, 0.5, 0.5, 0.25};
  for (size_t s = 0; s < want.size(); ++s) {
    INFO("step ", s);
    CHECK(opt.param_groups()[0].lr == doctest::Approx(want[s]));
    CHECK(opt.param_groups()[1].lr == doctest::Approx(0.1 * want[s]));
    sch.step();
  }
  CHECK_THROWS_AS(StepLR(opt, 0), ValueError);
}

TEST_CASE("clip_grad_norm_: returns the total norm and scales only when above max_norm") {
  Tensor a = param({0, 0}), b = param({0});
  set_grad(a, {3, 0});
  set_grad(b, {4});
  double n = clip_grad_norm_({a, b}, 10.0);
  CHECK(n == doctest::Approx(5.0));
  check_close(a.grad(), {3, 0});  // under the limit: untouched
  n = clip_grad_norm_({a, b}, 1.0);
  CHECK(n == doctest::Approx(5.0));
  const double coef = 1.0 / (5.0 + 1e-6);
  check_close(a.grad(), {3 * coef, 0}, 1e-12);
  check_close(b.grad(), {4 * coef}, 1e-12);
  // The clipped norm is (just under) max_norm.
  Tensor c = param({0});  // no grad: ignored
  CHECK(clip_grad_norm_({a, b, c}, 100.0) == doctest::Approx(1.0).epsilon(1e-6));
  CHECK_THROWS_AS(clip_grad_norm_({a}, 0.0), ValueError);
  // f32 gradients.
  Tensor f = from_vector<double>({6, 8}, {2}, TensorOptions(kFloat32));
  f.requires_grad_(true);
  f.set_grad(from_vector<double>({6, 8}, {2}, TensorOptions(kFloat32)));
  CHECK(clip_grad_norm_({f}, 5.0) == doctest::Approx(10.0));
  check_close(f.grad(), {3, 4}, 1e-6);
}

TEST_CASE("load_state_dict is all-or-nothing and replaces the per-parameter state") {
  Tensor a = param({1, 2}), b = param({3});
  SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, {1, 1});
  set_grad(b, {1});
  opt.step();
  // A state whose second buffer has the wrong shape: nothing changes.
  NamedTensors bad;
  for (auto& [k, t] : opt.state_dict()) {
    if (k == "step")
      bad.emplace_back(k, full({}, 7.0, kFloat64));
    else if (k == "group.0.lr")
      bad.emplace_back(k, full({}, 0.7, kFloat64));
    else if (k == "state.0.1.momentum_buffer")
      bad.emplace_back(k, zeros({2}, kFloat64));
    else
      bad.emplace_back(k, t);
  }
  CHECK_THROWS_AS(opt.load_state_dict(bad), ValueError);
  CHECK(opt.step_count() == 1);
  CHECK(opt.lr() == 0.1);
  // A malformed key is a ValueError too, not a std::invalid_argument.
  NamedTensors malformed = opt.state_dict();
  malformed.emplace_back("state.x.0.momentum_buffer", zeros({2}));
  CHECK_THROWS_AS(opt.load_state_dict(malformed), ValueError);
  // Loading a fresh optimizer's state drops the momentum buffers: the next
  // step is a first step again (buf = g).
  SGD fresh({param({0, 0}), param({0})}, {.lr = 0.1, .momentum = 0.9});
  opt.load_state_dict(fresh.state_dict());
  CHECK(opt.step_count() == 0);
  set_grad(a, {1, 1});
  set_grad(b, {1});
  Vec before = a.to_vector<double>();
  opt.step();
  check_close(a, {before[0] - 0.1, before[1] - 0.1});
}

// SPDX-License-Identifier: MIT
// Master weights (NOTE [ Master weights ], nn/optim/optimizer.cpp): f16/bf16
// parameters are updated through f32 masters; updates below half resolution
// accumulate instead of vanishing; the masters equal an f32 run's
// parameters; memory tags show parameters, masters and optimizer state; the
// masters go through state_dict.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/optimizer.h>
#include "test_util.h"

using namespace snug;
using namespace snug::nn;

namespace {

Tensor state_of(const optim::Optimizer& opt, const std::string& key) {
  for (auto& [k, v] : opt.state_dict())
    if (k == key) return v;
  return Tensor();
}

}  // namespace

TEST_CASE("master weights: SGD updates below f16 resolution accumulate in the master") {
  // At 1.0, f16's spacing is 2^-10 above and 2^-11 below: an update of 1e-4
  // applied to the f16 value rounds straight back to 1.0 every time.
  Tensor plain = ones({3}, kFloat16);
  for (int i = 0; i < 20; ++i) plain = (plain.to(kFloat32) - 1e-4).to(kFloat16);
  CHECK(plain.to_vector<double>()[0] == 1.0);  // lost, as expected without masters

  Tensor p = ones({3}, kFloat16), ref = ones({3}, kFloat32);
  p.requires_grad_(true);
  ref.requires_grad_(true);
  optim::SGD opt({p}, {.lr = 1e-4}), opt_ref({ref}, {.lr = 1e-4});
  for (int i = 0; i < 20; ++i) {
    p.set_grad(ones({3}, kFloat16));
    ref.set_grad(ones({3}, kFloat32));
    opt.step();
    opt_ref.step();
    if (i == 0) CHECK(p.to_vector<double>()[0] == 1.0);  // still rounds to 1 after one step
  }
  CHECK(p.dtype() == kFloat16);
  Tensor master = state_of(opt, "state.0.0.master");
  REQUIRE(master.defined());
  CHECK(master.dtype() == kFloat32);
  // The master is exactly the f32 run (same f32 operations), and the
  // parameter is that value rounded to f16.
  CHECK(master.to_vector<float>() == ref.to_vector<float>());
  CHECK(p.to_vector<double>() == ref.to(kFloat16).to_vector<double>());
  CHECK(std::fabs(master.to_vector<double>()[0] - (1 - 20e-4)) < 1e-6);
  CHECK(p.to_vector<double>()[0] < 1.0);  // 0.998 is several f16 steps below 1
}

TEST_CASE("master weights: AdamW and SGD with momentum on bf16 match an f32 run through their masters") {
  for (int kind = 0; kind < 2; ++kind) {
    CAPTURE(kind);
    Generator g(7);
    Tensor init = randn({5, 4}, kFloat32, &g).to(kBFloat16).to(kFloat32);  // representable in bf16
    Tensor p = init.to(kBFloat16), ref = init.clone();
    p.requires_grad_(true);
    ref.requires_grad_(true);
    std::unique_ptr<optim::Optimizer> opt, opt_ref;
    if (kind == 0) {
      opt =
          std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.1});
      opt_ref = std::make_unique<optim::AdamW>(std::vector<Tensor>{ref},
                                               optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.1});
    } else {
      opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p},
                                         optim::SGDOptions{.lr = 1e-3, .momentum = 0.9, .weight_decay = 1e-2});
      opt_ref = std::make_unique<optim::SGD>(std::vector<Tensor>{ref},
                                             optim::SGDOptions{.lr = 1e-3, .momentum = 0.9, .weight_decay = 1e-2});
    }
    for (int i = 0; i < 10; ++i) {
      Tensor gr = randn({5, 4}, kFloat32, &g).to(kBFloat16);  // a bf16 gradient, as backward gives
      p.set_grad(gr);
      ref.set_grad(gr.to(kFloat32));
      opt->step();
      opt_ref->step();
    }
    Tensor master = state_of(*opt, "state.0.0.master");
    REQUIRE(master.defined());
    CHECK(master.to_vector<float>() == ref.to_vector<float>());
    CHECK(p.to_vector<double>() == ref.to(kBFloat16).to_vector<double>());
    // All other state is f32.
    for (auto& [k, v] : opt->state_dict())
      if (k.rfind("state.", 0) == 0) CHECK(v.dtype() == kFloat32);
  }
}

TEST_CASE("master weights: memory tags show parameters, master weights and optimizer state") {
  const Device dev("cpu:7");
  auto tag_bytes = [&](memory::Tag t) { return memory::stats(dev).tag_bytes[int(t)].current; };
  const int64_t p0 = tag_bytes(memory::Tag::parameter), m0 = tag_bytes(memory::Tag::master_weights),
                s0 = tag_bytes(memory::Tag::optimizer_state);
  {
    Tensor p;
    {
      memory::TagScope tag(memory::Tag::parameter);
      p = zeros({1000}, TensorOptions(kFloat16, dev));
    }
    p.requires_grad_(true);
    optim::AdamW opt({p}, {.lr = 1e-3});
    p.set_grad(ones({1000}, TensorOptions(kFloat16, dev)));
    opt.step();
    // Sizes are rounded by the allocator: compare with ranges.
    const int64_t dp = tag_bytes(memory::Tag::parameter) - p0, dm = tag_bytes(memory::Tag::master_weights) - m0,
                  ds = tag_bytes(memory::Tag::optimizer_state) - s0;
    CHECK(dp >= 2000);
    CHECK(dp < 4000);  // half: 2 bytes each
    CHECK(dm >= 4000);
    CHECK(dm < 6000);  // one f32 master
    CHECK(ds >= 8000);
    CHECK(ds < 12000);  // two f32 moments
    CHECK(std::string(memory::tag_name(memory::Tag::master_weights)) == "master_weights");
  }
}

TEST_CASE("master weights: state_dict round trip keeps the f32 masters") {
  Tensor p = ones({4}, kFloat16);
  p.requires_grad_(true);
  optim::SGD opt({p}, {.lr = 1e-4});
  for (int i = 0; i < 3; ++i) {
    p.set_grad(ones({4}, kFloat16));
    opt.step();
  }
  NamedTensors sd = opt.state_dict();
  Tensor q = p.clone().detach();
  q.requires_grad_(true);
  optim::SGD opt2({q}, {.lr = 1e-4});
  opt2.load_state_dict(sd);
  for (int i = 0; i < 5; ++i) {
    p.set_grad(ones({4}, kFloat16));
    q.set_grad(ones({4}, kFloat16));
    opt.step();
    opt2.step();
  }
  CHECK(state_of(opt, "state.0.0.master").to_vector<float>() == state_of(opt2, "state.0.0.master").to_vector<float>());
  CHECK(p.to_vector<double>() == q.to_vector<double>());
  CHECK(std::fabs(state_of(opt, "state.0.0.master").to_vector<double>()[0] - (1 - 8e-4)) < 1e-6);
}

TEST_CASE("master weights: a half-precision module trains under autocast") {
  manual_seed(11);
  Linear lin(8, 1);
  lin.to(kFloat16);
  CHECK(lin.weight.dtype() == kFloat16);
  optim::SGD opt(lin.parameters(), {.lr = 0.05});
  Generator g(3);
  Tensor x = randn({64, 8}, kFloat32, &g), w_true = randn({8, 1}, kFloat32, &g);
  Tensor y = matmul(x, w_true);
  double first = 0, last = 0;
  for (int i = 0; i < 60; ++i) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard ac(kFloat16);
      loss = nn::functional::mse_loss(lin.forward(x), y);
    }
    loss.backward();
    CHECK(lin.weight.grad().dtype() == kFloat16);
    opt.step();
    (i == 0 ? first : last) = loss.item();
  }
  CHECK(lin.weight.dtype() == kFloat16);
  CHECK(last < 0.05 * first);
}

// SPDX-License-Identifier: MIT
// GradScaler (nn/amp/grad_scaler.h): an injected overflow skips the step
// (weights and optimizer state bit-identical), names the parameter and backs
// the scale off; growth after the interval; min/max clamps; unscale_ once per
// step; half gradients unscaled in f32; state through a training checkpoint.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/training_state.h>
#include "test_util.h"

using namespace snug;
using namespace snug::nn;
using snug::testing::error_of;

namespace {

// Bytes of every tensor, for bit-identity checks.
std::vector<std::vector<uint8_t>> bytes_of(const NamedTensors& ts) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [n, t] : ts) {
    Tensor c = t.contiguous();
    const uint8_t* p = static_cast<const uint8_t*>(c.data_ptr());
    out.emplace_back(p, p + c.nbytes());
  }
  return out;
}

struct Setup {
  std::shared_ptr<Linear> a = std::make_shared<Linear>(4, 3), b = std::make_shared<Linear>(3, 2);
  Sequential net{std::vector<std::shared_ptr<Module>>{a, b}};
  optim::AdamW opt{net.parameters(), {.lr = 1e-2, .weight_decay = 0.1}};
  double loss_step(amp::GradScaler& s) {
    opt.zero_grad();
    Generator g(5);
    Tensor loss = sum(net.forward(randn({8, 4}, kFloat32, &g)));
    s.scale(loss).backward();
    return loss.item();
  }
};

}  // namespace

TEST_CASE("GradScaler: defaults are PyTorch's") {
  amp::GradScaler s;
  CHECK(s.get_scale() == 65536.0);
  CHECK(s.options.growth_factor == 2.0);
  CHECK(s.options.backoff_factor == 0.5);
  CHECK(s.options.growth_interval == 2000);
  CHECK(s.scale(full({}, 1.5)).item() == 1.5 * 65536.0);
  amp::GradScaler off({.enabled = false});
  CHECK(off.get_scale() == 1.0);
  CHECK(off.scale(full({}, 1.5)).item() == 1.5);
}

TEST_CASE("GradScaler: an injected overflow skips the step, names the parameter and backs off") {
  manual_seed(1);
  Setup t;
  amp::GradScaler s;
  s.name_parameters(t.net.named_parameters());
  // One clean step first, so the optimizer has state that a skip must not touch.
  t.loss_step(s);
  CHECK(s.step(t.opt));
  s.update();
  CHECK(s.get_scale() == 65536.0);
  CHECK(s.growth_tracker() == 1);
  const auto params_before = bytes_of(t.net.named_parameters());
  const auto state_before = bytes_of(t.opt.state_dict());
  const int64_t opt_steps = t.opt.step_count();

  t.loss_step(s);
  // Inject: one gradient element becomes inf.
  {
    NoGradGuard ng;
    Tensor g = t.b->weight.grad();
    std::vector<float> v = g.to_vector<float>();
    v[1] = std::numeric_limits<float>::infinity();
    t.b->weight.set_grad(from_vector(v, g.shape()));
  }
  CHECK_FALSE(s.step(t.opt));
  CHECK(s.overflow_report().find("1.weight") != std::string::npos);
  CHECK(s.overflow_report().find("[2, 3]") != std::string::npos);
  s.update();
  CHECK(s.get_scale() == 32768.0);
  CHECK(s.growth_tracker() == 0);
  CHECK(s.skipped_steps() == 1);
  CHECK(t.opt.step_count() == opt_steps);
  CHECK(bytes_of(t.net.named_parameters()) == params_before);
  CHECK(bytes_of(t.opt.state_dict()) == state_before);

  // A NaN counts the same; the min clamp stops the backoff.
  amp::GradScaler c({.init_scale = 4.0, .min_scale = 3.0});
  c.name_parameters(t.net.named_parameters());
  t.loss_step(c);
  t.a->bias.grad().fill_(std::nan(""));
  CHECK_FALSE(c.step(t.opt));
  CHECK(c.overflow_report().find("0.bias") != std::string::npos);
  c.update();
  CHECK(c.get_scale() == 3.0);
  // After a clean step the report is cleared.
  t.loss_step(c);
  CHECK(c.step(t.opt));
  c.update();
  CHECK(c.overflow_report().empty());
}

TEST_CASE("GradScaler: the scale grows after growth_interval clean steps, up to max_scale") {
  manual_seed(2);
  Setup t;
  amp::GradScaler s({.init_scale = 8.0, .growth_interval = 3, .max_scale = 20.0});
  std::vector<double> scales;
  for (int i = 0; i < 7; ++i) {
    t.loss_step(s);
    CHECK(s.step(t.opt));
    s.update();
    scales.push_back(s.get_scale());
  }
  CHECK(scales == std::vector<double>{8, 8, 16, 16, 16, 20, 20});
  CHECK(s.growth_tracker() == 1);
}

TEST_CASE("GradScaler: unscale_ divides once, before step; a second call is an error") {
  manual_seed(3);
  Setup t;
  amp::GradScaler s({.init_scale = 1024.0});
  t.loss_step(s);
  const std::vector<float> scaled = t.a->weight.grad().to_vector<float>();
  s.unscale_(t.opt);
  const std::vector<float> unscaled = t.a->weight.grad().to_vector<float>();
  for (size_t i = 0; i < scaled.size(); ++i) CHECK(unscaled[i] == scaled[i] / 1024.0f);  // exact: a power of two
  CHECK(error_of<ValueError>([&] { s.unscale_(t.opt); }).find("once per step") != std::string::npos);
  const Tensor w_before = t.a->weight.clone();
  CHECK(s.step(t.opt));  // does not unscale again
  s.update();
  // The AdamW update on step 1 moves each weight by about lr (sign of the gradient): not by lr/1024.
  const double moved = max(abs(t.a->weight - w_before)).item();
  CHECK(moved > 5e-3);
  CHECK(moved < 2e-2);
}

TEST_CASE("GradScaler: f16 gradients are unscaled in f32 (small values survive)") {
  // An f16 parameter whose true gradient (2^-26) is below f16's smallest
  // subnormal (2^-24): scaled by 2^16 it is representable; dividing in f16
  // would flush it to zero, dividing in f32 keeps it.
  Tensor p = zeros({2}, kFloat16);
  p.requires_grad_(true);
  optim::SGD opt({p}, {.lr = 1.0});
  amp::GradScaler s;
  Tensor loss = sum(p.to(kFloat32) * std::ldexp(1.0, -26));
  s.scale(loss).backward();
  CHECK(p.grad().dtype() == kFloat16);
  CHECK(p.grad().to_vector<double>()[0] == std::ldexp(1.0, -10));
  CHECK(s.step(opt));
  // The master takes the tiny update exactly.
  NamedTensors st = opt.state_dict();
  Tensor master;
  for (auto& [k, v] : st)
    if (k == "state.0.0.master") master = v;
  REQUIRE(master.defined());
  CHECK(master.to_vector<double>()[0] == -std::ldexp(1.0, -26));
}

TEST_CASE("GradScaler: state round-trips through a training checkpoint") {
  manual_seed(4);
  Setup t;
  amp::GradScaler s({.init_scale = 1024.0, .growth_interval = 5, .min_scale = 2.0});
  for (int i = 0; i < 3; ++i) {
    t.loss_step(s);
    s.step(t.opt);
    s.update();
  }
  t.loss_step(s);
  t.a->weight.grad().fill_(INFINITY);
  CHECK_FALSE(s.step(t.opt));
  s.update();
  t.loss_step(s);
  s.step(t.opt);
  s.update();
  REQUIRE(s.get_scale() == 512.0);
  REQUIRE(s.growth_tracker() == 1);
  const std::string path = "test_grad_scaler_ckpt.safetensors";
  save_training_state(path, {.model = &t.net, .optimizer = &t.opt, .scaler = &s}, 5);

  Setup u;
  amp::GradScaler r;  // defaults: everything must come from the file
  load_training_state(path, {.model = &u.net, .optimizer = &u.opt, .scaler = &r});
  CHECK(r.get_scale() == 512.0);
  CHECK(r.growth_tracker() == 1);
  CHECK(r.skipped_steps() == 1);
  CHECK(r.options.growth_interval == 5);
  CHECK(r.options.min_scale == 2.0);
  CHECK(r.state_dict().size() == s.state_dict().size());
  // Both continue identically.
  for (int i = 0; i < 6; ++i) {
    t.loss_step(s);
    u.loss_step(r);
    CHECK(s.step(t.opt) == r.step(u.opt));
    s.update();
    r.update();
    CHECK(s.get_scale() == r.get_scale());
  }
  CHECK(bytes_of(t.net.named_parameters()) == bytes_of(u.net.named_parameters()));
  // A scaler asked for from a file without scaler state is an error naming the file.
  const std::string plain = "test_grad_scaler_plain.safetensors";
  save_training_state(plain, {.model = &t.net, .optimizer = &t.opt}, 1);
  CHECK(error_of<IOError>([&] {
          load_training_state(plain, {.model = &u.net, .optimizer = &u.opt, .scaler = &r});
        }).find("GradScaler") != std::string::npos);
  // A file with scaler state loads without a scaler too.
  load_training_state(path, {.model = &u.net, .optimizer = &u.opt});
  std::remove(path.c_str());
  std::remove(plain.c_str());
}

TEST_CASE("GradScaler: bad options are ValueErrors") {
  CHECK(error_of<ValueError>([] { amp::GradScaler s({.init_scale = 0}); }).find("init_scale") != std::string::npos);
  CHECK(error_of<ValueError>([] { amp::GradScaler s({.growth_factor = 1.0}); }).find("growth_factor") !=
        std::string::npos);
  CHECK(error_of<ValueError>([] { amp::GradScaler s({.backoff_factor = 1.0}); }).find("backoff_factor") !=
        std::string::npos);
  CHECK(error_of<ValueError>([] { amp::GradScaler s({.growth_interval = 0}); }).find("growth_interval") !=
        std::string::npos);
  CHECK(error_of<ValueError>([] { amp::GradScaler s({.min_scale = 8, .max_scale = 4}); }).find("min_scale") !=
        std::string::npos);
}

// SPDX-License-Identifier: MIT
// autograd/fault_injection.h: a NaN injected into a chosen op's output is
// reported by anomaly mode with that op's name (docs/reliability.md).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <snug/autograd/autocast.h>
#include <snug/autograd/fault_injection.h>
#include <snug/autograd/grad_mode.h>
#include <snug/core/generator.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include "test_util.h"

using namespace snug;
using snug::testing::contains;

namespace {
nn::models::GPT tiny_gpt() {
  nn::models::GPTConfig c;
  c.layers = 1;
  c.embd = 16;
  c.heads = 2;
  c.block = 8;
  manual_seed(1);
  return nn::models::GPT(c);
}
}  // namespace

TEST_CASE("fault injection: anomaly mode names the op whose output turned NaN") {
  auto gpt = tiny_gpt();
  manual_seed(2);
  Tensor x = randint(0, 65, Shape{2, 8}), y = randint(0, 65, Shape{2, 8});
  CHECK(std::isfinite(gpt.loss(x, y).item()));
  // The GPT block's fc, GELU, fc_proj are one op in f32 (nn/fused.h: gelu_mlp).
  for (const char* op : {"gelu_mlp", "layer_norm", "linear", "causal_attention", "embedding"}) {
    CAPTURE(op);
    autograd::AnomalyGuard anomaly;
    autograd::InjectNanGuard nan(op);
    try {
      gpt.loss(x, y);
      FAIL("anomaly mode did not report the injected NaN");
    } catch (const AutogradError& e) {
      const std::string msg = e.what();
      CHECK(contains(msg, std::string("forward op '") + op + "'"));
      CHECK(contains(msg, "NaN or inf"));
    }
  }
}

TEST_CASE("fault injection: without anomaly mode the NaN reaches the loss; guards nest and end") {
  auto gpt = tiny_gpt();
  manual_seed(2);
  Tensor x = randint(0, 65, Shape{2, 8}), y = randint(0, 65, Shape{2, 8});
  {
    autograd::InjectNanGuard nan("gelu_mlp");
    CHECK(autograd::injected_nan_op() == "gelu_mlp");
    CHECK(std::isnan(gpt.loss(x, y).item()));
    {
      autograd::InjectNanGuard inner("no_such_op");
      CHECK(std::isfinite(gpt.loss(x, y).item()));
    }
    CHECK(autograd::injected_nan_op() == "gelu_mlp");
  }
  CHECK(autograd::injected_nan_op().empty());
  CHECK(std::isfinite(gpt.loss(x, y).item()));
  // Ops that record no history are left alone.
  autograd::InjectNanGuard nan("gelu_mlp");
  NoGradGuard ng;
  CHECK(std::isfinite(gpt.loss(x, y).item()));
}

TEST_CASE("fault injection: the loss scaler skips a step whose gradients a NaN reached, touching nothing") {
  auto gpt = tiny_gpt();
  nn::optim::AdamW opt(gpt.parameters(), {.lr = 1e-2});
  nn::amp::GradScaler scaler;
  manual_seed(2);
  Tensor x = randint(0, 65, Shape{2, 8}), y = randint(0, 65, Shape{2, 8});
  auto step = [&](bool inject) {
    opt.zero_grad();
    Tensor loss;
    {
      autocast::AutocastGuard amp(DType::f16);
      std::optional<autograd::InjectNanGuard> nan;
      if (inject) nan.emplace("gelu_mlp");  // the GPT block's MLP, one op under autocast too
      loss = gpt.loss(x, y);
    }
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  REQUIRE(step(false));  // optimizer state exists
  auto snapshot = [&] {
    std::vector<Tensor> out;
    for (const Tensor& p : gpt.parameters()) out.push_back(p.detach().clone());
    for (const auto& [k, t] : opt.state_dict()) out.push_back(t.detach().clone());
    return out;
  };
  const auto before = snapshot();
  const double scale = scaler.get_scale();
  CHECK_FALSE(step(true));
  CHECK(scaler.get_scale() == scale * 0.5);
  CHECK_FALSE(scaler.overflow_report().empty());
  const auto after = snapshot();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(before[i].data_ptr(), after[i].data_ptr(), before[i].nbytes()) == 0);
  }
  CHECK(step(false));  // and training goes on
}

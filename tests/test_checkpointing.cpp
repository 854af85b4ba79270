// SPDX-License-Identifier: MIT
// Recomputation: autograd::checkpoint, checkpoint_sequential, selective
// policies, verification mode. (tests/test_training_state.cpp is about model
// files; this one is about activation checkpointing.)
#include <cstring>

#include <snug/autograd/autocast.h>
#include <snug/autograd/checkpoint.h>
#include <snug/autograd/engine.h>
#include <snug/autograd/grad_mode.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/checkpoint_sequential.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/gpt.h>
#include "test_util.h"

using namespace snug;
namespace F = snug::nn::functional;
using autograd::checkpoint;
using autograd::CheckpointOptions;

namespace {

// Every parameter's gradient, as raw f32 bits, in registration order.
std::vector<std::vector<float>> grads_of(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (auto& p : m.parameters()) {
    REQUIRE(p.grad().defined());
    out.push_back(p.grad().to_vector<float>());
  }
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_bitwise(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter #" << i);
    CHECK(bitwise_equal(a[i], b[i]));
  }
}

nn::models::GPTConfig small_gpt(double dropout) {
  nn::models::GPTConfig c;
  c.vocab = 29;
  c.block = 16;
  c.layers = 6;
  c.heads = 2;
  c.embd = 32;
  c.dropout = dropout;
  return c;
}

std::pair<Tensor, Tensor> tokens(int64_t B, int64_t T, uint64_t seed) {
  Generator g(seed);
  return {randint(0, 29, {B, T}, DType::i64, &g), randint(0, 29, {B, T}, DType::i64, &g)};
}

// One forward + backward of `model` with the default generator at `seed`;
// returns the gradients, and the generator state afterwards.
std::pair<std::vector<std::vector<float>>, PhiloxState> gpt_grads(nn::models::GPT& model, uint64_t seed) {
  auto [x, y] = tokens(4, 16, 77);
  model.zero_grad();
  manual_seed(seed);
  Tensor loss = model.loss(x, y);
  loss.backward();
  return {grads_of(model), default_generator().get_state()};
}

}  // namespace

TEST_CASE("checkpoint: GPT gradients are bitwise equal with and without checkpointing, dropout on") {
  manual_seed(5);
  nn::models::GPT model(small_gpt(0.2));
  model.train();
  auto [plain, rng_plain] = gpt_grads(model, 123);

  SUBCASE("sqrt plan") { model.checkpointing = nn::sqrt_plan(6); }
  SUBCASE("every block its own segment, the last one too") {
    model.checkpointing = nn::balanced_plan(6, 6);
    model.checkpointing.segments.back().checkpoint = true;
  }
  SUBCASE("selective: keep linear outputs") {
    model.checkpointing = nn::balanced_plan(6, 3);
    model.checkpointing.options.policy = autograd::save_ops({"linear", "layer_norm"});
  }
  SUBCASE("verify mode passes on a deterministic model") {
    model.checkpointing = nn::balanced_plan(6, 2);
    model.checkpointing.options.verify = true;
  }
  autograd::reset_recompute_stats();
  auto [ckpt, rng_ckpt] = gpt_grads(model, 123);
  CHECK(autograd::recompute_stats().segments == model.checkpointing.num_checkpointed());
  check_bitwise(plain, ckpt);
  // Recomputation replays the RNG and then puts it back: the stream the next
  // step draws from is the same as without checkpointing.
  CHECK(rng_ckpt.seed == rng_plain.seed);
  CHECK(rng_ckpt.offset == rng_plain.offset);

  // And dropout really was on: another seed gives other gradients.
  model.checkpointing = {};
  auto [other, rng_other] = gpt_grads(model, 124);
  CHECK_FALSE(bitwise_equal(plain[0], other[0]));
}

TEST_CASE("checkpoint: a function of several inputs, gradients to inputs and parameters bitwise equal") {
  Tensor w = testing::rnd({8, 8}, 1, DType::f32).requires_grad_();
  auto seg = [w](const std::vector<Tensor>& in) {
    Tensor h = gelu(matmul(in[0], w) + in[1]);
    h = dropout(h, 0.3, true);
    return std::vector<Tensor>{h * in[1], h.sum()};
  };
  auto run = [&](bool ckpt) {
    Tensor a = testing::rnd({5, 8}, 2, DType::f32).requires_grad_();
    Tensor b = testing::rnd({5, 8}, 3, DType::f32).requires_grad_();
    w.set_grad(Tensor());
    manual_seed(9);
    std::vector<Tensor> outs = ckpt ? checkpoint(seg, {a, b}) : seg({a, b});
    (outs[0].sum() * 0.5 + outs[1]).backward();
    return std::vector<std::vector<float>>{a.grad().to_vector<float>(), b.grad().to_vector<float>(),
                                           w.grad().to_vector<float>()};
  };
  check_bitwise(run(false), run(true));
}

TEST_CASE("checkpoint: the variadic form") {
  Tensor a = testing::rnd({3, 4}, 4, DType::f32).requires_grad_();
  Tensor b = testing::rnd({3, 4}, 5, DType::f32).requires_grad_();
  Tensor y = checkpoint([](const Tensor& x, const Tensor& z) { return (x * z).tanh(); }, a, b);
  y.sum().backward();
  Tensor want_a = (1.0 - (a * b).tanh().pow(2.0)) * b;
  testing::check_vals(a.grad(), want_a.detach().to_vector<double>(), 1e-5);
}

TEST_CASE("checkpoint: nested checkpoints give the same gradients, each segment recomputed once") {
  Tensor w1 = testing::rnd({16, 16}, 11, DType::f32).requires_grad_();
  Tensor w2 = testing::rnd({16, 16}, 12, DType::f32).requires_grad_();
  auto inner = [w2](const Tensor& x) { return dropout(matmul(x, w2).tanh(), 0.25, true); };
  auto outer_plain = [=](const Tensor& x) {
    Tensor h = matmul(x, w1).sigmoid();
    h = inner(h) + h;
    return inner(h).relu();
  };
  auto outer_nested = [=](const Tensor& x) {
    Tensor h = matmul(x, w1).sigmoid();
    h = checkpoint(inner, h) + h;
    // Two levels deep: a checkpoint inside a checkpoint inside a checkpoint.
    return checkpoint([inner](const Tensor& z) { return checkpoint(inner, z); }, h).relu();
  };
  auto run = [&](int mode) {
    Tensor x = testing::rnd({6, 16}, 13, DType::f32).requires_grad_();
    w1.set_grad(Tensor());
    w2.set_grad(Tensor());
    manual_seed(31);
    Tensor y = mode == 0 ? outer_plain(x) : checkpoint(outer_nested, x);
    (y * y).sum().backward();
    return std::vector<std::vector<float>>{x.grad().to_vector<float>(), w1.grad().to_vector<float>(),
                                           w2.grad().to_vector<float>()};
  };
  auto plain = run(0);
  autograd::reset_recompute_stats();
  auto nested = run(1);
  check_bitwise(plain, nested);
  // The outer segment once, the two inner ones (and the one in between) once each.
  CHECK(autograd::recompute_stats().segments == 4);
}

TEST_CASE("checkpoint: under NoGradGuard it is a plain call") {
  Tensor w = testing::rnd({4, 4}, 1, DType::f32).requires_grad_();
  Tensor x = testing::rnd({2, 4}, 2, DType::f32).requires_grad_();
  int calls = 0;
  Tensor y;
  {
    NoGradGuard ng;
    y = checkpoint(
        [&calls, w](const Tensor& t) {
          ++calls;
          return matmul(t, w);
        },
        x);
  }
  CHECK(calls == 1);
  CHECK_FALSE(y.requires_grad());
  CHECK(bitwise_equal(y.to_vector<float>(), matmul(x, w).detach().to_vector<float>()));
}

TEST_CASE("checkpoint: hooks inside and around a segment fire once, with the plain run's gradients") {
  Tensor w = testing::rnd({6, 6}, 3, DType::f32).requires_grad_();
  auto run = [&](bool ckpt) {
    std::vector<std::vector<float>> seen;
    auto seg = [w, &seen](const Tensor& x) {
      Tensor h = matmul(x, w);
      h.register_hook([&seen](const Tensor& g) {
        seen.push_back(g.to_vector<float>());
        return g * 2.0;  // a hook that changes the gradient must change it once
      });
      return h.tanh();
    };
    Tensor x = testing::rnd({3, 6}, 4, DType::f32).requires_grad_();
    w.set_grad(Tensor());
    Tensor y = ckpt ? checkpoint(seg, x) : seg(x);
    int out_hook = 0;
    y.register_hook([&out_hook](const Tensor&) {
      ++out_hook;
      return Tensor();
    });
    y.sum().backward();
    CHECK(out_hook == 1);
    REQUIRE(seen.size() == 1);
    return std::vector<std::vector<float>>{seen[0], x.grad().to_vector<float>(), w.grad().to_vector<float>()};
  };
  check_bitwise(run(false), run(true));
}

TEST_CASE("checkpoint: verification names the first recomputed tensor that differs") {
  Tensor w = testing::rnd({4, 4}, 1, DType::f32).requires_grad_();
  auto counter = std::make_shared<int>(0);
  // Not deterministic: each call adds a different constant before the tanh.
  auto seg = [w, counter](const Tensor& x) {
    Tensor h = matmul(x, w);              // saves x and w: the same each time
    Tensor s = h + double((*counter)++);  // saves nothing
    return s.tanh();                      // saves its output: differs
  };
  Tensor x = testing::rnd({2, 4}, 2, DType::f32).requires_grad_();
  CheckpointOptions opts;
  opts.verify = true;
  opts.name = "my segment";
  Tensor y = checkpoint([seg](const std::vector<Tensor>& in) { return std::vector<Tensor>{seg(in[0])}; }, {x}, opts)[0];
  try {
    y.sum().backward();
    FAIL("expected an AutogradError");
  } catch (const AutogradError& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("my segment") != std::string::npos);
    CHECK(msg.find("saved tensor #2") != std::string::npos);  // #0 x, #1 w, #2 tanh's output
    CHECK(msg.find("'tanh'") != std::string::npos);
    CHECK(msg.find("checksum") != std::string::npos);
  }
}

TEST_CASE("checkpoint: a segment that saves a different number of tensors is caught without verify") {
  Tensor w = testing::rnd({4, 4}, 1, DType::f32).requires_grad_();
  auto calls = std::make_shared<int>(0);
  auto seg = [w, calls](const Tensor& x) {
    Tensor h = matmul(x, w);
    return (*calls)++ == 0 ? h.tanh() : h.tanh().tanh();
  };
  Tensor x = testing::rnd({2, 4}, 2, DType::f32).requires_grad_();
  Tensor y = checkpoint(seg, x);
  CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("not deterministic"), AutogradError);
}

TEST_CASE("checkpoint: in-place changes after the forward are errors, not wrong gradients") {
  Tensor w = testing::rnd({4, 4}, 1, DType::f32).requires_grad_();
  auto seg = [w](const Tensor& x) { return matmul(x, w).tanh(); };
  SUBCASE("a segment input") {
    Tensor x0 = testing::rnd({2, 4}, 2, DType::f32).requires_grad_();
    Tensor x = x0 * 1.0;
    Tensor y = checkpoint(seg, x);
    {
      NoGradGuard ng;
      x.add_(1.0);
    }
    CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("in-place"), AutogradError);
  }
  SUBCASE("a parameter the segment saved") {
    Tensor x = testing::rnd({2, 4}, 2, DType::f32).requires_grad_();
    Tensor y = checkpoint(seg, x);
    {
      NoGradGuard ng;
      w.mul_(2.0);
    }
    CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("in-place"), AutogradError);
  }
  SUBCASE("an output the selective policy keeps") {
    Tensor x = testing::rnd({2, 4}, 2, DType::f32).requires_grad_();
    CheckpointOptions opts;
    opts.policy = autograd::save_ops({"matmul"});
    Tensor kept;
    auto seg2 = [w, &kept](const std::vector<Tensor>& in) {
      Tensor h = matmul(in[0], w);
      if (!kept.defined()) kept = h;
      return std::vector<Tensor>{h.tanh()};
    };
    Tensor y = checkpoint(seg2, {x}, opts)[0];
    {
      NoGradGuard ng;
      kept.add_(1.0);
    }
    CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("policy keeps"), AutogradError);
  }
}

TEST_CASE("checkpoint: activation memory is the segment's inputs, and recomputation skips kept ops") {
  const Device dev = kCPU;
  std::vector<Tensor> ws;
  for (int i = 0; i < 8; ++i) ws.push_back(testing::rnd({256, 256}, 40 + i, DType::f32).requires_grad_());
  auto layer = [](Tensor w) { return [w](const Tensor& x) { return gelu(matmul(x, w)); }; };
  // Activation bytes held between forward and backward, and allocations made in backward.
  auto measure = [&](int mode) {
    Tensor x = testing::rnd({512, 256}, 3, DType::f32).requires_grad_();
    for (auto& w : ws) w.set_grad(Tensor());
    const auto before = memory::allocated(dev);
    Tensor h = x;
    for (auto& w : ws) {
      if (mode == 0)
        h = layer(w)(h);
      else {
        CheckpointOptions o;
        if (mode == 2) o.policy = autograd::save_ops({"matmul"});
        h = checkpoint([f = layer(w)](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }, {h},
                       o)[0];
      }
    }
    Tensor loss = h.sum();
    const auto held = memory::allocated(dev) - before;
    const auto allocs_before = memory::stats(dev).allocation.allocated;
    loss.backward();
    return std::pair<size_t, int64_t>{held, memory::stats(dev).allocation.allocated - allocs_before};
  };
  auto [held_plain, allocs_plain] = measure(0);
  auto [held_ckpt, allocs_ckpt] = measure(1);
  auto [held_sel, allocs_sel] = measure(2);
  const size_t act = 512 * 256 * 4;  // one (512, 256) f32 activation
  // Plain: each layer keeps its input and the matmul output (gelu's input): 2 per layer.
  CHECK(held_plain >= 16 * act);
  // Checkpointed: each segment keeps only its input; the last output is the
  // 9th activation. Slack for the scalar loss.
  CHECK(held_ckpt <= 9 * act + 4096);
  // Selective: plus the 8 kept matmul outputs.
  CHECK(held_sel >= 16 * act);
  CHECK(held_sel <= 17 * act + 4096);
  // Recomputation allocates the matmul outputs again unless they were kept.
  CHECK(allocs_ckpt >= allocs_plain + 8);
  CHECK(allocs_sel < allocs_ckpt);
}

TEST_CASE("checkpoint_sequential: balanced segments and gradients equal to the plain run") {
  CHECK(nn::balanced_plan(10, 3).str() == "[0,4) ckpt [4,7) ckpt [7,10) keep");
  CHECK(nn::sqrt_plan(16).str() == "[0,4) ckpt [4,8) ckpt [8,12) ckpt [12,16) keep");
  CHECK_THROWS_AS(nn::balanced_plan(3, 4), ValueError);
  nn::ChainPlan bad = nn::balanced_plan(6, 2);
  bad.segments[1].begin = 4;
  CHECK_THROWS_AS(bad.validate(6), ValueError);

  manual_seed(3);
  nn::Sequential seq;
  for (int i = 0; i < 7; ++i) {
    seq.push_back(std::make_shared<nn::Linear>(12, 12));
    seq.push_back(std::make_shared<nn::GELU>());
    seq.push_back(std::make_shared<nn::Dropout>(0.1));
  }
  auto run = [&](int segments) {
    Tensor x = testing::rnd({5, 12}, 8, DType::f32).requires_grad_();
    seq.zero_grad();
    manual_seed(44);
    Tensor y = segments ? nn::checkpoint_sequential(seq, segments, x) : seq.forward(x);
    y.pow(2.0).sum().backward();
    auto g = grads_of(seq);
    g.push_back(x.grad().to_vector<float>());
    return g;
  };
  auto plain = run(0);
  check_bitwise(plain, run(3));
  check_bitwise(plain, run(21));
}

// NOTE [ Recomputation replays autocast ]: the segment runs again under the
// autocast state its forward ran under, wherever backward() is called. The
// usual pattern (docs/mixed_precision.md) is the forward inside the scope and
// backward outside it.
TEST_CASE("checkpoint under autocast: gradients bitwise equal to the same autocast run without checkpointing") {
  for (DType dt : {DType::bf16, DType::f16}) {
    for (bool backward_inside : {false, true}) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(backward_inside);
      manual_seed(5);
      nn::models::GPT model(small_gpt(0.2));
      model.train();
      auto [x, y] = tokens(4, 16, 77);
      auto step = [&] {
        model.zero_grad();
        manual_seed(123);
        Tensor loss;
        {
          AutocastGuard ac(dt);
          loss = model.loss(x, y);
          if (backward_inside) loss.backward();
        }
        if (!backward_inside) loss.backward();
        return grads_of(model);
      };
      model.checkpointing = {};
      auto plain = step();

      SUBCASE("sqrt plan") { model.checkpointing = nn::sqrt_plan(6); }
      SUBCASE("selective: keep linear and layer_norm outputs") {
        model.checkpointing = nn::balanced_plan(6, 3);
        model.checkpointing.options.policy = autograd::save_ops({"linear", "layer_norm", "causal_attention"});
      }
      SUBCASE("every block checkpointed, verify on") {
        model.checkpointing = nn::balanced_plan(6, 6);
        model.checkpointing.segments.back().checkpoint = true;
        model.checkpointing.options.verify = true;
      }
      autograd::reset_recompute_stats();
      auto ckpt = step();
      CHECK(autograd::recompute_stats().segments == model.checkpointing.num_checkpointed());
      check_bitwise(plain, ckpt);
    }
  }
}

TEST_CASE("checkpoint under autocast: nested segments and a segment that disables autocast inside") {
  Tensor w1 = testing::rnd({16, 16}, 21, DType::f32).requires_grad_();
  Tensor w2 = testing::rnd({16, 16}, 22, DType::f32).requires_grad_();
  // The inner function runs its first matmul in full precision whatever the
  // scope around it, its second under the scope's dtype.
  auto inner = [w1, w2](const Tensor& x) {
    Tensor h;
    {
      AutocastGuard off(DType::bf16, /*enabled=*/false);
      h = matmul(x.to(DType::f32), w1).tanh();
    }
    return dropout(matmul(h, w2).relu(), 0.25, true);
  };
  auto outer_plain = [=](const Tensor& x) {
    Tensor h = matmul(x, w2).sigmoid();
    return inner(inner(h) + h);
  };
  auto outer_nested = [=](const Tensor& x) {
    Tensor h = matmul(x, w2).sigmoid();
    return checkpoint([inner](const Tensor& z) { return checkpoint(inner, z); }, checkpoint(inner, h) + h);
  };
  for (DType dt : {DType::bf16, DType::f16}) {
    for (bool backward_inside : {false, true}) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(backward_inside);
      auto run = [&](int mode) {
        Tensor x = testing::rnd({6, 16}, 23, DType::f32).requires_grad_();
        w1.set_grad(Tensor());
        w2.set_grad(Tensor());
        manual_seed(31);
        Tensor loss;
        {
          AutocastGuard ac(dt);
          Tensor y = mode == 0 ? outer_plain(x) : checkpoint(outer_nested, x);
          loss = (y.to(DType::f32) * y.to(DType::f32)).sum();
          if (backward_inside) loss.backward();
        }
        if (!backward_inside) loss.backward();
        return std::vector<std::vector<float>>{x.grad().to_vector<float>(), w1.grad().to_vector<float>(),
                                               w2.grad().to_vector<float>()};
      };
      autograd::reset_recompute_stats();
      check_bitwise(run(0), run(1));
      CHECK(autograd::recompute_stats().segments == 4);
      // A segment whose forward ran with autocast off inside an enabled scope
      // recomputes with it off, even when backward runs in an enabled scope.
      Tensor x = testing::rnd({6, 16}, 24, DType::f32).requires_grad_();
      Tensor y;
      {
        AutocastGuard off(dt, false);
        y = checkpoint([w2](const Tensor& z) { return matmul(z, w2).relu(); }, x);
      }
      CHECK(y.dtype() == DType::f32);
      {
        AutocastGuard on(dt);
        y.sum().backward();
      }
      CHECK(x.grad().dtype() == DType::f32);
    }
  }
}

TEST_CASE("checkpoint_sequential under autocast: gradients bitwise equal to the plain autocast run") {
  manual_seed(3);
  nn::Sequential seq;
  for (int i = 0; i < 5; ++i) {
    seq.push_back(std::make_shared<nn::Linear>(12, 12));
    seq.push_back(std::make_shared<nn::GELU>());
    seq.push_back(std::make_shared<nn::LayerNorm>(12));
  }
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(dt)));
    auto run = [&](int segments) {
      Tensor x = testing::rnd({5, 12}, 8, DType::f32).requires_grad_();
      seq.zero_grad();
      Tensor loss;
      {
        AutocastGuard ac(dt);
        Tensor y = segments ? nn::checkpoint_sequential(seq, segments, x) : seq.forward(x);
        loss = y.to(DType::f32).pow(2.0).sum();
      }
      loss.backward();
      auto g = grads_of(seq);
      g.push_back(x.grad().to_vector<float>());
      return g;
    };
    auto plain = run(0);
    check_bitwise(plain, run(3));
    check_bitwise(plain, run(15));
  }
}

// SPDX-License-Identifier: MIT
// The tape and the backward engine: accumulation, retain_graph, grad(),
// version counters, grad mode, hooks, anomaly mode, early freeing.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <snug/autograd/engine.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/gradcheck.h>
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>

using namespace snug;

namespace {
Tensor vec(std::vector<float> v) { return from_vector<float>(v); }
std::vector<float> vals(const Tensor& t) { return t.contiguous().to_vector<float>(); }
}  // namespace

TEST_CASE("backward accumulates into leaves, including a leaf used twice") {
  Tensor x = vec({1, 2, 3});
  x.requires_grad_();
  Tensor y = (x * x + x * 3.0).sum();  // dy/dx = 2x + 3
  y.backward();
  CHECK(vals(x.grad()) == std::vector<float>{5, 7, 9});
  // A second graph accumulates on top of the existing .grad.
  (x * 2.0).sum().backward();
  CHECK(vals(x.grad()) == std::vector<float>{7, 9, 11});
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  CHECK(std::string(y.grad_fn()->name()) == "sum");
}

TEST_CASE("a leaf's first gradient keeps the incoming buffer only when nothing else holds it") {
  // Kept: a fresh gradient nobody else sees (x * w: a new tensor) becomes .grad itself.
  Tensor x = vec({1, 2, 3}), w = vec({4, 5, 6});
  x.requires_grad_();
  Tensor y = x * w;
  Tensor seed = vec({1, 1, 1});
  const int64_t allocs0 = memory::stats(kCPU).allocation.allocated;
  y.backward(seed);
  // One allocation in all: mul's backward makes seed * w, and .grad is that buffer (a copy would be a second).
  CHECK(memory::stats(kCPU).allocation.allocated - allocs0 == 1);
  CHECK(vals(x.grad()) == std::vector<float>{4, 5, 6});
  // The seed itself reaching a leaf is the caller's tensor: .grad must not alias it.
  Tensor a = vec({1, 2});
  a.requires_grad_();
  Tensor ga = vec({3, 4});
  a.backward(ga);
  CHECK(!a.grad().is_same(ga));
  CHECK(a.grad().storage() != ga.storage());
  a.backward(ga);  // accumulates in place into a.grad
  CHECK(vals(ga) == std::vector<float>{3, 4});
  CHECK(vals(a.grad()) == std::vector<float>{6, 8});
  // One gradient reaching two leaves (add passes g to both): each gets its own buffer.
  Tensor p = vec({1, 1}), q = vec({2, 2});
  p.requires_grad_();
  q.requires_grad_();
  (p + q).sum().backward();
  CHECK(p.grad().storage() != q.grad().storage());
  (p + q).sum().backward();
  CHECK(vals(p.grad()) == std::vector<float>{2, 2});
  CHECK(vals(q.grad()) == std::vector<float>{2, 2});
  // A hook that keeps the gradient it saw: .grad must not alias it.
  Tensor h = vec({1, 2});
  h.requires_grad_();
  Tensor kept;
  h.register_hook([&](const Tensor& g) {
    kept = g;
    return Tensor();
  });
  (h * 3.0).sum().backward();
  CHECK(h.grad().storage() != kept.storage());
  (h * 3.0).sum().backward();
  CHECK(vals(kept) == std::vector<float>{3, 3});
  CHECK(vals(h.grad()) == std::vector<float>{6, 6});
}

TEST_CASE("a second backward needs retain_graph") {
  Tensor x = vec({1, 2});
  x.requires_grad_();
  Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: the graph was retained
  CHECK(vals(x.grad()) == std::vector<float>{4, 8});
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("retain_graph=true"), AutogradError);
}

TEST_CASE("backward errors say what is wrong") {
  Tensor x = vec({1, 2});
  CHECK_THROWS_WITH_AS(x.sum().backward(), doctest::Contains("does not require grad"), AutogradError);
  Tensor w = vec({1, 2});
  w.requires_grad_();
  Tensor y = w * 2.0;
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("one-element output"), AutogradError);
  CHECK_THROWS_WITH_AS(y.backward(ones({3})), doctest::Contains("does not match output shape [2]"), ShapeError);
  Tensor i = arange(3);
  CHECK_THROWS_WITH_AS(i.requires_grad_(), doctest::Contains("only floating tensors"), AutogradError);
}

TEST_CASE("autograd::grad returns gradients without touching .grad") {
  Tensor x = vec({1, 2, 3});
  Tensor w = vec({4, 5, 6});
  x.requires_grad_();
  w.requires_grad_();
  Tensor h = x * w;  // non-leaf input
  Tensor y = (h * h).sum();
  auto g = autograd::grad({y}, {x, h});
  CHECK(vals(g[0]) == std::vector<float>{32, 100, 216});  // 2 h w
  CHECK(vals(g[1]) == std::vector<float>{8, 20, 36});     // 2 h
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  Tensor z = vec({1});
  z.requires_grad_();
  Tensor y2 = (x * 2.0).sum();
  CHECK_THROWS_WITH_AS(autograd::grad({y2}, {z}), doctest::Contains("not reachable"), AutogradError);
  Tensor y3 = (x * 2.0).sum();
  auto g3 = autograd::grad({y3}, {z}, {}, false, /*allow_unused=*/true);
  CHECK_FALSE(g3[0].defined());
}

TEST_CASE("an in-place change to a saved tensor is an error naming the op") {
  Tensor x = vec({1, 2, 3});
  x.requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = (h * h).sum();  // mul saves h
  uint32_t v0 = h.version();
  {
    NoGradGuard ng;
    h.add_(1.0);
  }
  CHECK(h.version() == v0 + 1);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward of 'mul'"), AutogradError);
  // Views share the counter (NOTE [ Version Counter Sharing ]).
  Tensor a = vec({1, 2, 3, 4});
  Tensor v = a.view({2, 2});
  uint32_t va = a.version();
  v.mul_(2.0);
  CHECK(a.version() == va + 1);
  CHECK(vals(a) == std::vector<float>{2, 4, 6, 8});
}

TEST_CASE("NoGradGuard and GradModeGuard stop recording") {
  Tensor x = vec({1, 2});
  x.requires_grad_();
  {
    NoGradGuard ng;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK_FALSE(autograd::is_grad_enabled());
    {
      autograd::GradModeGuard on(true);
      CHECK((x * 2.0).requires_grad());
    }
  }
  CHECK(autograd::is_grad_enabled());
  CHECK((x * 2.0).requires_grad());
  CHECK_FALSE(x.detach().requires_grad());
}

TEST_CASE("hooks see and may replace gradients; retain_grad keeps non-leaf grads") {
  Tensor x = vec({1, 2, 3});
  x.requires_grad_();
  Tensor h = x * 3.0;
  std::vector<float> seen;
  h.register_hook([&](const Tensor& g) {
    seen = vals(g);
    return g * 10.0;  // replacement flows on
  });
  h.retain_grad();
  Tensor y = h.sum();
  int leaf_calls = 0;
  x.register_hook([&](const Tensor& g) {
    ++leaf_calls;
    return Tensor();  // keep as is
  });
  y.backward();
  CHECK(seen == std::vector<float>{1, 1, 1});
  CHECK(leaf_calls == 1);
  CHECK(vals(x.grad()) == std::vector<float>{30, 30, 30});
  // retain_grad's hook was registered after the replacing hook, so it sees the replacement.
  CHECK(vals(h.grad()) == std::vector<float>{10, 10, 10});
  Tensor c = vec({1});
  CHECK_THROWS_WITH_AS(c.register_hook([](const Tensor& g) { return g; }), doctest::Contains("does not require grad"),
                       AutogradError);
}

TEST_CASE("anomaly mode names the forward op that produced NaN") {
  Tensor x = vec({1, -1});
  x.requires_grad_();
  {
    autograd::AnomalyGuard on;
    CHECK_THROWS_WITH_AS(log(x), doctest::Contains("forward op 'log'"), AutogradError);
  }
  // Backward NaN: sqrt at 0 has an infinite derivative.
  Tensor z = vec({0, 4});
  z.requires_grad_();
  Tensor y = sqrt(z).sum();
  {
    autograd::AnomalyGuard on;
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward of forward op 'sqrt'"), AutogradError);
  }
  // Without anomaly mode the same thing silently gives inf, as in PyTorch.
  Tensor y2 = sqrt(z).sum();
  y2.backward();
  CHECK(std::isinf(vals(z.grad())[0]));
}

TEST_CASE("saved memory goes down during backward (NOTE [ Saved tensors die early ])") {
  const Device dev = kCPU;
  const int64_t n = 1 << 16;  // 256 KiB per f32 activation
  Tensor x = full({n}, 0.01);
  x.requires_grad_();
  std::vector<size_t> during;
  Tensor loss;
  {
    Tensor h = x;
    for (int i = 0; i < 8; ++i) {
      h = exp(h * 0.5);  // exp saves its output: one activation per layer
      h.register_hook([&during, dev](const Tensor&) {
        during.push_back(memory::allocated(dev));
        return Tensor();
      });
    }
    loss = h.sum();
  }  // only `loss` (and through it the graph) keeps the activations alive now
  size_t before = memory::allocated(dev);
  loss.backward();
  REQUIRE(during.size() == 8);
  // Hooks run from the last layer to the first; each layer's saved output
  // is freed right after its node runs, so memory falls step by step (the
  // first step only swaps the broadcast seed for a real gradient buffer).
  for (size_t i = 1; i < during.size(); ++i) CHECK(during[i] <= during[i - 1]);
  for (size_t i = 2; i < during.size(); ++i) CHECK(during[i] + n * sizeof(float) <= during[i - 1]);
  CHECK(during.back() + 6 * n * sizeof(float) <= during.front());
  loss = Tensor();
  CHECK(memory::allocated(dev) < before);
}

TEST_CASE("gradcheck catches a wrong backward") {
  // A deliberately wrong gradient (d/dx x^3 claimed to be 2x) must fail.
  auto wrong = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    Tensor out = raw::unary(UnaryOp::pow_scalar, x, 3.0);
    if (autograd::any_requires_grad({x}))
      autograd::record("wrong_cube", {x}, {out}, {x}, [](FunctionNode& self, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{raw::binary(BinaryOp::mul, g[0], self.saved_at(0) * 2.0)};
      });
    return out;
  };
  auto r = autograd::gradcheck(wrong, {vec({0.5f, 1.5f})});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("analytic") != std::string::npos);
  auto right = [](const std::vector<Tensor>& in) { return pow(in[0], 3.0); };
  CHECK(autograd::gradcheck(right, {vec({0.5f, 1.5f})}).ok);
}

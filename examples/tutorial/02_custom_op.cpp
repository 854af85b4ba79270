// SPDX-License-Identifier: MIT
// Tutorial chapter 2 (docs/tutorial/02-autograd-and-custom-ops.md): autograd,
// and a new op with its own backward, written the way snug writes its own:
// the math once in SNUG_HOST_DEVICE functors, a CPU loop that instantiates
// them, and an autograd record with the backward beside the forward.
// The op is softsign(x) = x / (1 + |x|). Exits 1 if a check fails.
#include <snug/base/macros.h>    // SNUG_HOST_DEVICE, SNUG_INLINE
#include <snug/core/functors.h>  // fmath:: (math usable on host and device)
#include <snug/snug.h>

#include <iostream>

using namespace snug;

// ---- the math, once (as in core/functors.h) ----
// C is the compute type: float for f16/bf16 storage, else the storage type.
struct SoftsignF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C x) const {
    return x / (C(1) + fmath::fabs(x));
  }
};
// d softsign / dx = 1 / (1 + |x|)^2, times the incoming gradient g.
struct SoftsignBackwardF {
  template <class C>
  SNUG_HOST_DEVICE SNUG_INLINE C operator()(C g, C x) const {
    const C d = C(1) + fmath::fabs(x);
    return g / (d * d);
  }
};

// ---- the CPU kernel: one loop, instantiated for every floating dtype ----
// out[i] = f(in[i]...) over contiguous copies of same-shaped CPU tensors
// (snug's own loop, core/cpu/loop.h, adds broadcasting, strides and threads).
template <class F, class... In>
Tensor cpu_map(const char* op, F f, const Tensor& first, const In&... rest) {
  for (const Tensor* t : {&first, &rest...}) {
    SNUG_CHECK(t->device().is_cpu(), DeviceError, op, ": this kernel runs on the CPU, got ", t->device());
    SNUG_CHECK(t->shape() == first.shape() && t->dtype() == first.dtype(), ShapeError, op,
               ": operands must have one shape and dtype");
  }
  Tensor out = empty(first.shape(), first.options());
  dispatch_floating(first.dtype(), op, [&]<class T>() {
    using C = compute_t<T>;
    T* o = out.data<T>();
    auto loop = [&](const auto*... in) {
      for (int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(f(static_cast<C>(in[i])...));
    };
    // Contiguous copies (or the tensors themselves) of every operand, handed on as typed pointers.
    const Tensor c0 = first.contiguous();
    [&](const auto&... cs) { loop(c0.data<T>(), cs.template data<T>()...); }(rest.contiguous()...);
  });
  return out;
}

// ---- the op: forward, and the backward recorded beside it ----
Tensor softsign(const Tensor& x) {
  Tensor out = cpu_map("softsign", SoftsignF{}, x);
  if (autograd::any_requires_grad({x}))  // grad mode on and x needs a gradient
    autograd::record("softsign", {x}, {out}, /*to_save=*/{x},
                     [](FunctionNode& self, const std::vector<Tensor>& g) -> std::vector<Tensor> {
                       // One gradient per input: d(loss)/dx = g * softsign'(x).
                       return {cpu_map("softsign_backward", SoftsignBackwardF{}, g[0], self.saved_at(0))};
                     });
  return out;
}

// The same op with a wrong derivative (the square forgotten): gradcheck must catch it.
Tensor softsign_wrong(const Tensor& x) {
  Tensor out = cpu_map("softsign", SoftsignF{}, x);
  if (autograd::any_requires_grad({x}))
    autograd::record("softsign_wrong", {x}, {out}, {x}, [](FunctionNode& self, const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0] / (1.0 + abs(self.saved_at(0)))};
    });
  return out;
}

// The largest |a - b|, in f64 (snug has no allclose; this is all a check needs).
double max_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.detach().to(kFloat64) - b.detach().to(kFloat64))).item();
}

int main() {
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    std::cout << (ok ? "ok:   " : "FAIL: ") << what << "\n";
    failures += ok ? 0 : 1;
  };
  manual_seed(0);

  // ---- autograd in four lines: requires_grad, ops, backward, .grad() ----
  Tensor w = randn({3});
  w.requires_grad_();
  Tensor loss = (w * w).sum();  // d loss / dw = 2w
  loss.backward();
  std::cout << "loss was made by " << loss.grad_fn()->name() << "; w.grad() = " << w.grad() << "\n";
  expect(max_diff(w.grad(), w * 2.0) == 0, "backward of sum(w * w) is 2w");

  // ---- the new op: forward matches the composed formula ----
  Tensor x = randn({4, 5});
  expect(max_diff(softsign(x), x / (1.0 + abs(x))) < 1e-6, "softsign(x) == x / (1 + |x|)");
  Tensor h = softsign(x.to(kBFloat16));  // the same functor, computing in float
  expect(h.dtype() == kBFloat16, "softsign keeps bf16 storage");
  Tensor y = softsign(x.detach().requires_grad_());
  expect(y.grad_fn() && std::string(y.grad_fn()->name()) == "softsign", "softsign records its own node");

  // ---- gradcheck: analytic gradients against finite differences in f64 ----
  auto check = [](Tensor (*op)(const Tensor&)) {
    return autograd::gradcheck([op](const std::vector<Tensor>& in) { return op(in[0]); }, {randn({4, 5})});
  };
  autograd::GradcheckResult good = check(softsign);
  expect(good.ok, "gradcheck passed for softsign");
  autograd::GradcheckResult bad = check(softsign_wrong);
  std::cout << "gradcheck on the wrong backward: " << bad.message << "\n";
  expect(!bad.ok, "gradcheck rejects the wrong derivative");

  // ---- training with it: a 1-32-1 network with softsign fits y = x^2 - 1 ----
  Tensor xs = rand({256, 1}) * 4.0 - 2.0;  // (256, 1) in [-2, 2)
  Tensor ys = xs * xs - 1.0;
  Tensor w1 = (randn({1, 32}) * 2.0).requires_grad_(), b1 = zeros({32}).requires_grad_();
  Tensor w2 = (randn({32, 1}) * 0.2).requires_grad_(), b2 = zeros({1}).requires_grad_();
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor pred = matmul(softsign(matmul(xs, w1) + b1), w2) + b2;  // (256, 1)
    Tensor l = ((pred - ys) * (pred - ys)).mean();
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(Tensor());  // forget the last step's gradients
    l.backward();                                                  // softsign's backward runs in here
    {
      NoGradGuard no_grad;  // the update itself is not recorded
      for (Tensor* p : {&w1, &b1, &w2, &b2}) p->sub_(p->grad(), 0.1);
    }
    if (step == 0) first = l.item();
    last = l.item();
    if (step % 100 == 0 || step == 299) std::cout << "step " << step << " loss " << l.item() << "\n";
  }
  expect(last < first / 10, "training through softsign cut the loss tenfold");

  std::cout << (failures == 0 ? "PASS" : "FAILED") << "\n";
  return failures == 0 ? 0 : 1;
}

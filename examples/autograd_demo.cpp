// SPDX-License-Identifier: MIT
// autograd_demo: a two-layer MLP learns y = sin(x) on [-pi, pi] with snug's
// autograd and plain full-batch gradient descent written by hand, no nn/ or
// optim/: the forward is ops from autograd/ops.h, loss.backward() fills
// .grad(), and the update runs under NoGradGuard so it is not recorded.
//
//   demo [--steps N] [--lr X] [--hidden H] [--seed S] [--every K] [--json]
//
// Prints the loss every K steps; with --json, a final JSON line as well.
// Exits 1 unless the fit explains 90% of the target's variance (loss below
// var(y) / 10), so a short run doubles as a smoke test of autograd.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include <snug/snug.h>

using namespace snug;

namespace {

struct Args {
  int steps = 2000;
  double lr = 0.05;  // full batch; the output layer's curvature is about 2*H*E[tanh^2], keep lr*that < 2
  int hidden = 32;
  uint64_t seed = 0;
  int every = 200;
  bool json = false;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--steps N] [--lr X] [--hidden H] [--seed S] [--every K] [--json]\n", argv0);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(argv[0]);
      return argv[++i];
    };
    if (k == "--steps") a.steps = std::atoi(value());
    else if (k == "--lr") a.lr = std::atof(value());
    else if (k == "--hidden") a.hidden = std::atoi(value());
    else if (k == "--seed") a.seed = std::strtoull(value(), nullptr, 10);
    else if (k == "--every") a.every = std::atoi(value());
    else if (k == "--json") a.json = true;
    else usage(argv[0]);
  }
  if (a.steps < 1 || a.hidden < 1 || a.every < 1 || !(a.lr > 0)) usage(argv[0]);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const auto t0 = std::chrono::steady_clock::now();

  // Data: n points on [-pi, pi]. x is (n,1), y is (n,1).
  const int n = 256;
  std::vector<float> xs(n), ys(n);
  for (int i = 0; i < n; ++i) {
    xs[i] = float(-std::numbers::pi + 2 * std::numbers::pi * i / (n - 1));
    ys[i] = std::sin(xs[i]);
  }
  const Tensor x = from_vector(xs, {n, 1});
  const Tensor y = from_vector(ys, {n, 1});

  // Parameters: w1 (1,H), b1 (H), w2 (H,1), b2 (1). Leaves that require grad.
  Generator gen(args.seed);
  const int h = args.hidden;
  Tensor w1 = (randn({1, h}, {}, &gen) * 1.5).requires_grad_();
  Tensor b1 = (randn({h}, {}, &gen) * 0.5).requires_grad_();
  Tensor w2 = (randn({h, 1}, {}, &gen) * (1.0 / std::sqrt(double(h)))).requires_grad_();
  Tensor b2 = zeros({1}).requires_grad_();
  std::vector<Tensor> params = {w1, b1, w2, b2};

  const double target_var = mean(square(y - mean(y))).item();
  std::printf("fitting sin(x) at %d points with a 1-%d-1 tanh MLP (predicting the mean would score %.4f)\n", n, h,
              target_var);
  double first = 0, last = 0;
  for (int step = 0; step < args.steps; ++step) {
    const Tensor hid = tanh(matmul(x, w1) + b1);  // (n,H)
    const Tensor pred = matmul(hid, w2) + b2;     // (n,1)
    const Tensor loss = mean(square(pred - y));   // ()
    loss.backward();
    last = loss.item();
    if (step == 0) first = last;
    {
      NoGradGuard no_grad;  // the update itself must not be recorded
      for (Tensor& p : params) {
        p.sub_(p.grad() * args.lr);
        p.set_grad(Tensor());  // like zero_grad(set_to_none=true)
      }
    }
    if (step % args.every == 0 || step == args.steps - 1)
      std::printf("step %5d  loss %.6f\n", step, last);
  }

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool learned = last < target_var / 10;
  std::printf("loss %.6f -> %.6f in %d steps (%.2f s)%s\n", first, last, args.steps, seconds,
              learned ? "" : "  [did not reach var(y)/10]");
  if (args.json)
    std::printf("{\"example\":\"autograd_demo\",\"steps\":%d,\"hidden\":%d,\"lr\":%g,\"seed\":%llu,"
                "\"initial_loss\":%.6g,\"final_loss\":%.6g,\"seconds\":%.3f,\"cuda_devices\":%d}\n",
                args.steps, h, args.lr, (unsigned long long)args.seed, first, last, seconds,
                cuda::device_count());
  return learned ? 0 : 1;
}

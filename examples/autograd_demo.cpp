// SPDX-License-Identifier: MIT
// autograd_demo: a two-layer MLP learns y = sin(x) on [-pi, pi] with snug's
// autograd and plain full-batch gradient descent written by hand, no nn/ or
// optim/: the forward is ops from autograd/ops.h, loss.backward() fills
// .grad(), and the update runs under NoGradGuard so it is not recorded.
//
//   demo [--steps N] [--lr X] [--hidden H] [--seed S] [--every K] [--json]
//
// Prints the loss every K steps; with --json that text goes to stderr and
// stdout holds one JSON line with the result. `demo --help` lists the flags.
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

#include "common/cli.h"

using namespace snug;

namespace {

struct Args {
  int steps = 2000;
  double lr = 0.05;  // full batch; the output layer's curvature is about 2*H*E[tanh^2], keep lr*that < 2
  int hidden = 32;
  int64_t seed = 0;
  int every = 200;
  bool json = false;
};

}  // namespace

namespace {

int run(int argc, char** argv) {
  Args args;
  CLI::App app{"Fits y = sin(x) with a two-layer MLP using snug's autograd and hand-written gradient descent.", "demo"};
  cli::init(app);
  app.add_option("--steps", args.steps, "full-batch gradient-descent steps")->transform(cli::integer(1));
  app.add_option("--lr", args.lr, "learning rate")->transform(cli::number({.lo = 0, .lo_open = true}));
  app.add_option("--hidden", args.hidden, "hidden units")->transform(cli::integer(1));
  app.add_option("--seed", args.seed, "seed of the initial weights")->transform(cli::integer(0));
  app.add_option("--every", args.every, "print the loss every K steps")->transform(cli::integer(1));
  app.add_flag("--json", args.json, "human text to stderr; stdout holds one JSON line with the result");
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  // With --json, stdout is for the JSON line alone.
  FILE* text = args.json ? stderr : stdout;
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
  Generator gen(static_cast<uint64_t>(args.seed));
  const int h = args.hidden;
  Tensor w1 = (randn({1, h}, {}, &gen) * 1.5).requires_grad_();
  Tensor b1 = (randn({h}, {}, &gen) * 0.5).requires_grad_();
  Tensor w2 = (randn({h, 1}, {}, &gen) * (1.0 / std::sqrt(double(h)))).requires_grad_();
  Tensor b2 = zeros({1}).requires_grad_();
  std::vector<Tensor> params = {w1, b1, w2, b2};

  const double target_var = mean(square(y - mean(y))).item();
  std::fprintf(text, "fitting sin(x) at %d points with a 1-%d-1 tanh MLP (predicting the mean would score %.4f)\n", n,
               h, target_var);
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
    if (step % args.every == 0 || step == args.steps - 1) std::fprintf(text, "step %5d  loss %.6f\n", step, last);
  }

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool learned = last < target_var / 10;
  std::fprintf(text, "loss %.6f -> %.6f in %d steps (%.2f s)%s\n", first, last, args.steps, seconds,
               learned ? "" : "  [did not reach var(y)/10]");
  if (args.json)
    std::printf(
        "{\"example\":\"autograd_demo\",\"steps\":%d,\"hidden\":%d,\"lr\":%g,\"seed\":%llu,"
        "\"initial_loss\":%.6g,\"final_loss\":%.6g,\"seconds\":%.3f,\"cuda_devices\":%d,\"cpu_isa\":\"%s\"}\n",
        args.steps, h, args.lr, (unsigned long long)args.seed, first, last, seconds, cuda::device_count(),
        cpu_isa().c_str());
  return learned ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return snug::cli::exit_status("demo", e);  // NOTE [ Program exit status ]: 2 for a bad command line, 1 otherwise
  }
}

// SPDX-License-Identifier: MIT
// batch_norm / BatchNorm2d: batch statistics in training, running statistics
// (momentum, unbiased variance) and their use in eval, gradients.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/backend.h>
#include <snug/core/generator.h>
#include <snug/nn/batch_norm.h>
#include <snug/nn/functional.h>
#include "test_util.h"

using namespace snug;
using snug::testing::check_grad;
namespace F = snug::nn::functional;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(a.to(DType::f64) - b.to(DType::f64))).item(); }

}  // namespace

TEST_CASE("batch_norm in training normalizes each channel over (N, H, W)") {
  Generator gen(1);
  Tensor x = randn({4, 3, 5, 6}, DType::f32, &gen) * 3.0 + 2.0;
  Tensor y = F::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  Tensor m = mean(y, {0, 2, 3}), v = var(y, {0, 2, 3}, 0);
  for (double e : m.to_vector<double>()) CHECK(std::fabs(e) < 1e-5);
  for (double e : v.to_vector<double>()) CHECK(e == doctest::Approx(1.0).epsilon(1e-3));
  // Affine: y = xhat * w + b per channel.
  Tensor w = from_vector<double>({1, 2, -1}, {3}, DType::f32), b = from_vector<double>({0, 1, 5}, {3}, DType::f32);
  Tensor ya = F::batch_norm(x, Tensor(), Tensor(), w, b, true);
  CHECK(max_abs_diff(ya, y * w.view({1, 3, 1, 1}) + b.view({1, 3, 1, 1})) < 1e-5);
  CHECK(ya.shape() == x.shape());
}

TEST_CASE("running statistics: momentum update with the unbiased variance, then used in eval") {
  Generator gen(2);
  Tensor x = randn({6, 2, 3, 3}, DType::f32, &gen) * 2.0 + 1.0;
  Tensor rm = zeros({2}), rv = ones({2});
  F::batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
  Tensor bm = mean(x, {0, 2, 3}), bv = var(x, {0, 2, 3}, 1);  // unbiased, M = 54
  CHECK(max_abs_diff(rm, bm * 0.1) < 1e-6);
  CHECK(max_abs_diff(rv, bv * 0.1 + 0.9) < 1e-5);
  // A second step keeps blending.
  Tensor x2 = randn({6, 2, 3, 3}, DType::f32, &gen);
  Tensor rm1 = rm.clone(), rv1 = rv.clone();
  F::batch_norm(x2, rm, rv, Tensor(), Tensor(), true, 0.25, 1e-5);
  CHECK(max_abs_diff(rm, rm1 * 0.75 + mean(x2, {0, 2, 3}) * 0.25) < 1e-6);
  CHECK(max_abs_diff(rv, rv1 * 0.75 + var(x2, {0, 2, 3}, 1) * 0.25) < 1e-5);
  // Eval: (x - rm) / sqrt(rv + eps) * w + b, and the running stats stay put.
  Tensor w = from_vector<double>({2, 3}, {2}, DType::f32), b = from_vector<double>({-1, 1}, {2}, DType::f32);
  Tensor ye = F::batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5);
  Tensor want =
      (x - rm.view({1, 2, 1, 1})) / sqrt(rv.view({1, 2, 1, 1}) + 1e-5) * w.view({1, 2, 1, 1}) + b.view({1, 2, 1, 1});
  CHECK(max_abs_diff(ye, want) < 1e-5);
  CHECK(max_abs_diff(rm, rm1 * 0.75 + mean(x2, {0, 2, 3}) * 0.25) < 1e-6);
}

TEST_CASE("batch_norm gradients match finite differences") {
  Generator gen(3);
  Tensor x = randn({3, 2, 3, 2}, DType::f64, &gen), w = randn({2}, DType::f64, &gen), b = randn({2}, DType::f64, &gen);
  check_grad([](const std::vector<Tensor>& in) { return F::batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true); },
             {x, w, b});
  check_grad(
      [](const std::vector<Tensor>& in) { return F::batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
      {x});
  Tensor rm = randn({2}, DType::f64, &gen), rv = rand({2}, DType::f64, &gen) + 0.5;
  check_grad([&](const std::vector<Tensor>& in) { return F::batch_norm(in[0], rm, rv, in[1], in[2], false); },
             {x, w, b});
  // (N, C) input, as BatchNorm1d would give.
  Tensor x2 = randn({5, 3}, DType::f64, &gen), w2 = randn({3}, DType::f64, &gen), b2 = randn({3}, DType::f64, &gen);
  check_grad([](const std::vector<Tensor>& in) { return F::batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true); },
             {x2, w2, b2});
}

TEST_CASE("BatchNorm2d module: parameters, buffers, train/eval") {
  nn::BatchNorm2d bn(3);
  CHECK(bn.num_parameters() == 6);
  auto buffers = bn.named_buffers();
  REQUIRE(buffers.size() == 3);
  CHECK(buffers[0].first == "running_mean");
  CHECK(buffers[1].first == "running_var");
  CHECK(buffers[2].first == "num_batches_tracked");
  CHECK(bn.running_var.to_vector<double>() == std::vector<double>{1, 1, 1});
  Generator gen(4);
  Tensor x = randn({4, 3, 2, 2}, DType::f32, &gen) + 3.0;
  Tensor y = bn(x);
  CHECK(bn.num_batches_tracked.item() == 1);
  CHECK(max_abs_diff(bn.running_mean, mean(x, {0, 2, 3}) * 0.1) < 1e-6);
  y.sum().backward();
  CHECK(bn.weight.grad().defined());
  CHECK(bn.bias.grad().to_vector<double>() == std::vector<double>{16, 16, 16});
  bn.eval();
  Tensor rm = bn.running_mean.clone();
  Tensor ye = bn(x);
  CHECK(bn.num_batches_tracked.item() == 1);
  CHECK(max_abs_diff(bn.running_mean, rm) == 0.0);
  CHECK(ye.shape() == x.shape());
  // Under no-grad, training still updates the running statistics (as PyTorch).
  bn.train();
  {
    NoGradGuard ng;
    bn(x);
  }
  CHECK(bn.num_batches_tracked.item() == 2);
  CHECK(bn.repr() == "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=true)");
}

TEST_CASE("batch_norm errors") {
  CHECK_THROWS_WITH_AS(F::batch_norm(randn({4}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("expected input (N, C, ...)"), ShapeError);
  CHECK_THROWS_WITH_AS(F::batch_norm(randn({2, 3, 4, 4}), zeros({4}), ones({4}), Tensor(), Tensor(), true),
                       doctest::Contains("running_mean of shape [4] does not match the 3 channels"), ShapeError);
  CHECK_THROWS_WITH_AS(F::batch_norm(randn({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("more than 1 value per channel"), ValueError);
  CHECK_THROWS_WITH_AS(F::batch_norm(randn({2, 3, 2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), false),
                       doctest::Contains("evaluation mode needs running_mean"), ValueError);
  nn::BatchNorm2d bn(3);
  CHECK_THROWS_WITH_AS(bn(randn({2, 4, 2, 2})), doctest::Contains("does not have 3 channels"), ShapeError);
}

TEST_CASE("the backend's batch norm entries: the batch statistics, and each gradient only when asked") {
  Backend& be = backend_for(kCPU);
  Generator gen(4);
  const Tensor x = randn({4, 3, 5}, DType::f32, &gen) * 2.0 + 1.0;
  const Tensor w = randn({3}, DType::f32, &gen), b = randn({3}, DType::f32, &gen),
               gy = randn({4, 3, 5}, DType::f32, &gen);
  const Tensor y = empty({4, 3, 5}), mean = empty({3}), invstd = empty({3});
  be.batch_norm_forward_training(x, w, b, Tensor(), Tensor(), 0.1, 1e-5, y, mean, invstd);
  const Tensor mu = snug::mean(x, {0, 2}), var = snug::var(x, {0, 2}, 0);
  CHECK(max_abs_diff(mean, mu) < 1e-6);
  CHECK(max_abs_diff(invstd, rsqrt(var + 1e-5)) < 1e-5);
  CHECK(max_abs_diff(y, F::batch_norm(x, Tensor(), Tensor(), w, b, true)) == 0.0);
  const Tensor gx = empty({4, 3, 5}), gw = empty({3}), gb = empty({3});
  be.batch_norm_backward(gy, x, w, mean, invstd, true, 1e-5, gx, gw, gb);
  const Tensor gx_only = empty({4, 3, 5}), gb_only = empty({3}, DType::f64);  // gb in its own dtype
  be.batch_norm_backward(gy, x, w, mean, invstd, true, 1e-5, gx_only, Tensor(), Tensor());
  be.batch_norm_backward(gy, x, w, mean, invstd, true, 1e-5, Tensor(), Tensor(), gb_only);
  CHECK(max_abs_diff(gx_only, gx) == 0.0);
  CHECK(max_abs_diff(gb_only, sum(gy, {0, 2})) < 1e-5);
  CHECK(max_abs_diff(gb, gb_only) < 1e-6);
  CHECK(max_abs_diff(gw, sum(gy * ((x - mu.view({1, 3, 1})) * rsqrt(var + 1e-5).view({1, 3, 1})), {0, 2})) < 1e-4);
}

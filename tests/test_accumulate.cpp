// SPDX-License-Identifier: MIT
// Gradient accumulation: K micro-batches give one big batch's gradients at
// about 1/K of its activation memory; token weighting for padded batches.
#include <cmath>

#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/accumulate.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/gpt.h>
#include "test_util.h"

using namespace snug;
namespace F = snug::nn::functional;

namespace {

std::vector<std::vector<double>> grads_of(nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& p : m.parameters()) {
    REQUIRE(p.grad().defined());
    out.push_back(p.grad().to_vector<double>());
  }
  return out;
}

// The largest, over parameters, of ||a - b|| / ||b||.
double max_rel_diff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double num = 0, den = 0;
    for (size_t k = 0; k < a[i].size(); ++k) {
      num += (a[i][k] - b[i][k]) * (a[i][k] - b[i][k]);
      den += b[i][k] * b[i][k];
    }
    if (den > 0) worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

nn::models::GPTConfig cfg() {
  nn::models::GPTConfig c;
  c.vocab = 40;
  c.block = 64;
  c.layers = 3;
  c.heads = 4;
  c.embd = 64;
  return c;
}

int64_t activation_peak(Device dev) {
  return memory::stats(dev).tag_bytes[static_cast<int>(memory::Tag::activation)].peak;
}

}  // namespace

TEST_CASE("accumulation: K micro-batches of b rows give the gradients of one batch of K*b, at ~1/K the activations") {
  const Device dev("cpu:4");  // its own pool, so the peaks are this test's
  manual_seed(21);
  nn::models::GPT model(cfg());
  model.to(dev);
  const int64_t K = 4, b = 4, T = 64;
  Generator g(3);
  Tensor x = randint(0, 40, {K * b, T}, DType::i64, &g).to(dev);
  Tensor y = randint(0, 40, {K * b, T}, DType::i64, &g).to(dev);

  model.zero_grad();
  memory::reset_peak(dev);
  {
    Tensor loss;
    {
      memory::TagScope tag(memory::Tag::activation);
      loss = model.loss(x, y);
    }
    loss.backward();
  }
  const auto big = grads_of(model);
  const int64_t big_peak = activation_peak(dev);

  model.zero_grad();
  memory::reset_peak(dev);
  nn::GradAccumulator acc = nn::GradAccumulator::equal(K);
  auto xs = nn::split_batch(x, K), ys = nn::split_batch(y, K);
  for (int64_t k = 0; k < K; ++k) {
    Tensor loss;
    {
      memory::TagScope tag(memory::Tag::activation);
      loss = model.loss(xs[k], ys[k]);
    }
    acc.backward(loss);
  }
  const auto small = grads_of(model);
  const int64_t small_peak = activation_peak(dev);

  const double rel = max_rel_diff(small, big);
  MESSAGE("accumulation: max relative gradient difference " << rel << ", activation peak " << small_peak << " vs "
                                                            << big_peak << " (ratio " << double(small_peak) / big_peak
                                                            << ")");
  CHECK(rel <= 1e-6);
  CHECK(rel > 0);  // not the same computation: the sums are grouped differently
  const double ratio = double(small_peak) / double(big_peak);
  CHECK(ratio <= 1.2 / K);
  CHECK(ratio >= 0.8 / K);
}

TEST_CASE("accumulation: variable-length micro-batches need token weights") {
  // Padded targets (ignore_index -100): the rows have 16, 3, 9 and 1 real tokens.
  const int64_t V = 11, T = 16;
  Generator g(8);
  Tensor logits_all = testing::rnd({4 * T, V}, 4, DType::f32);
  std::vector<int64_t> tv;
  const int64_t lens[4] = {16, 3, 9, 1};
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < T; ++t) tv.push_back(t < lens[r] ? (r * 7 + t) % V : -100);
  Tensor targets = from_vector(tv, {4, T});
  CHECK(nn::count_tokens(targets) == 29);

  auto grad_of = [&](int mode) {
    Tensor w = logits_all.detach().requires_grad_();
    if (mode == 0) {
      F::cross_entropy(w, targets.reshape({-1})).backward();
    } else {
      // Two micro-batches of two rows: 19 and 10 real tokens.
      nn::GradAccumulator acc(mode == 1 ? 29.0 : 2.0);
      auto rows = nn::split_batch(w, 2);                    // 2 x (2T, V)
      auto tg = nn::split_batch(targets.reshape({-1}), 2);  // 2 x (2T)
      for (int k = 0; k < 2; ++k) {
        Tensor mean = F::cross_entropy(rows[k], tg[k]);
        acc.backward(mean, mode == 1 ? double(nn::count_tokens(tg[k])) : 1.0);
      }
    }
    return std::vector<std::vector<double>>{w.grad().to_vector<double>()};
  };
  auto big = grad_of(0);
  CHECK(max_rel_diff(grad_of(1), big) <= 1e-6);  // token-weighted
  CHECK(max_rel_diff(grad_of(2), big) > 0.05);   // 1/K each: short batches' tokens count too much
}

TEST_CASE("accumulation: the helper's checks and split_batch") {
  nn::GradAccumulator acc(3.0);
  Tensor w = testing::rnd({3}, 1, DType::f32).requires_grad_();
  CHECK(acc.backward(w.sum(), 2.0) == doctest::Approx(w.sum().item() * 2.0 / 3.0));
  CHECK_THROWS_AS(acc.backward(w.sum(), 2.0), ValueError);  // 4 > 3
  CHECK_THROWS_AS(nn::GradAccumulator(0.0), ValueError);
  CHECK_THROWS_AS(acc.backward(w * 1.0, 0.5), ShapeError);
  auto parts = nn::split_batch(testing::iota({7, 2}), 3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].size(0) == 3);
  CHECK(parts[1].size(0) == 2);
  CHECK(parts[2].size(0) == 2);
  CHECK(parts[2].to_vector<double>() == std::vector<double>{10, 11, 12, 13});
  CHECK_THROWS_AS(nn::split_batch(testing::iota({2}), 3), ValueError);
}

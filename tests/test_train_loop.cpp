// SPDX-License-Identifier: MIT
// nn::TrainLoop (cadence of hooks, resume, timing, evaluation),
// nn::accumulate_gradients (micro-batches give one batch's gradients) and
// the progress line (memory now and at peak).
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/train_loop.h>
#include "test_util.h"

using namespace snug;
namespace F = snug::nn::functional;

TEST_CASE("train loop: runs start..steps-1 in order and reports the loss and time of each") {
  std::vector<int64_t> before, stepped;
  nn::TrainLoop loop({.steps = 5, .start = 0});
  loop.before_step([&](int64_t s) { before.push_back(s); }).step([&](int64_t s) {
    stepped.push_back(s);
    return 10.0 - double(s);
  });
  std::vector<double> losses;
  loop.every(1, [&](const nn::StepInfo& i) { losses.push_back(i.loss); });
  const nn::TrainSummary sum = loop.run();
  CHECK(before == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(stepped == before);
  CHECK(losses == std::vector<double>{10, 9, 8, 7, 6});
  CHECK(sum.steps_run == 5);
  CHECK(sum.step_ms.size() == 5);
  CHECK(sum.loss == 6);
  CHECK(std::isnan(sum.eval));  // no evaluate()
}

TEST_CASE("train loop: every(n) runs after each n-th step counted from 0, and after the last") {
  auto steps_seen = [](int64_t n, bool and_last, int64_t start, int64_t steps) {
    std::vector<int64_t> seen;
    nn::TrainLoop loop({.steps = steps, .start = start});
    loop.step([](int64_t) { return 0.0; })
        .every(
            n, [&](const nn::StepInfo& i) { seen.push_back(i.step); }, and_last);
    loop.run();
    return seen;
  };
  CHECK(steps_seen(3, true, 0, 10) == std::vector<int64_t>{3, 6, 9, 10});
  CHECK(steps_seen(3, false, 0, 10) == std::vector<int64_t>{3, 6, 9});
  CHECK(steps_seen(5, true, 0, 10) == std::vector<int64_t>{5, 10});  // the last once, not twice
  CHECK(steps_seen(0, true, 0, 4) == std::vector<int64_t>{4});       // 0: only the last
  CHECK(steps_seen(0, false, 0, 4).empty());
  // Resumed at step 4: the cadence stays that of the whole run (6, 9), not 4 + 3.
  CHECK(steps_seen(3, true, 4, 10) == std::vector<int64_t>{6, 9, 10});
  CHECK(steps_seen(3, true, 10, 10).empty());  // nothing left to run
}

TEST_CASE("train loop: stop ends a run early, its last step's hooks run, and a resume finishes the total") {
  auto run = [](int64_t start, int64_t stop) {
    std::vector<int64_t> stepped, last_hooks;
    std::vector<int64_t> totals;
    nn::TrainLoop loop({.steps = 10, .start = start, .stop = stop});
    loop.step([&](int64_t s) {
      stepped.push_back(s);
      return 0.0;
    });
    loop.every(0, [&](const nn::StepInfo& i) {  // only the last: where a program saves
      last_hooks.push_back(i.step);
      totals.push_back(i.total);
    });
    const nn::TrainSummary sum = loop.run();
    CHECK(sum.steps_run == static_cast<int64_t>(stepped.size()));
    return std::make_tuple(stepped, last_hooks, totals);
  };
  auto [a, a_last, a_total] = run(0, 4);  // preempted after step 4 of 10
  CHECK(a == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(a_last == std::vector<int64_t>{4});
  CHECK(a_total == std::vector<int64_t>{10});  // the total stays the schedule's
  auto [b, b_last, b_total] = run(4, 0);       // resumed: on to the end
  CHECK(b == std::vector<int64_t>{4, 5, 6, 7, 8, 9});
  CHECK(b_last == std::vector<int64_t>{10});
  auto [c, c_last, c_total] = run(0, 25);  // a stop past the total changes nothing
  CHECK(c.size() == 10);
  CHECK(c_last == std::vector<int64_t>{10});
}

TEST_CASE("train loop: evaluate() feeds the later hooks and the summary; after_step may change the loss") {
  int evals = 0;
  std::vector<double> eval_seen, loss_seen;
  nn::TrainLoop loop({.steps = 7});
  loop.step([](int64_t s) { return double(s); })
      .after_step([](nn::StepInfo& i) { i.loss *= 2; })  // e.g. the mean over ranks
      .evaluate(3,
                [&](const nn::StepInfo& i) {
                  ++evals;
                  return 100.0 + double(i.step);
                })
      .every(1, [&](const nn::StepInfo& i) {
        eval_seen.push_back(i.eval);
        loss_seen.push_back(i.loss);
      });
  const nn::TrainSummary sum = loop.run();
  CHECK(evals == 3);  // after steps 3, 6 and 7 (the last)
  REQUIRE(eval_seen.size() == 7);
  CHECK(std::isnan(eval_seen[0]));
  CHECK(std::isnan(eval_seen[1]));
  CHECK(eval_seen[2] == 103);  // the evaluation that just ran, before this hook
  CHECK(eval_seen[5] == 106);
  CHECK(eval_seen[6] == 107);
  CHECK(loss_seen == std::vector<double>{0, 2, 4, 6, 8, 10, 12});
  CHECK(sum.eval == 107);
  CHECK(sum.loss == 12);
}

TEST_CASE("train loop: bad use is an error") {
  CHECK_THROWS_AS(nn::TrainLoop({.steps = 3}).run(), ValueError);  // no step function
  CHECK_THROWS_AS(nn::TrainLoop({.steps = -1}), ValueError);
  nn::TrainLoop loop({.steps = 3});
  CHECK_THROWS_AS(loop.every(-2, [](const nn::StepInfo&) {}), ValueError);
  CHECK(!nn::TrainLoop::due(0, false, {.step = 3, .total = 3, .last = true}));
  CHECK(nn::TrainLoop::due(0, true, {.step = 3, .total = 3, .last = true}));
}

namespace {

// Gradients of a small classifier after `fn` ran its backward.
std::vector<std::vector<double>> grads_after(nn::Module& m, const std::function<void()>& fn) {
  m.zero_grad();
  fn();
  std::vector<std::vector<double>> out;
  for (auto& p : m.parameters()) {
    REQUIRE(p.grad().defined());
    out.push_back(p.grad().to_vector<double>());
  }
  return out;
}

double max_abs_diff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < a[i].size(); ++k) worst = std::max(worst, std::abs(a[i][k] - b[i][k]));
  return worst;
}

}  // namespace

TEST_CASE("accumulate_gradients: k micro-batches give the gradients and loss of the whole batch") {
  manual_seed(5);
  nn::Linear net(6, 4);
  Generator g(9);
  // 10 rows: k = 3 splits them 4, 3, 3 (unequal, so equal 1/k weights would be wrong).
  Tensor x = randn({10, 6}, DType::f32, &g);
  std::vector<int64_t> yv = {0, 1, 2, 3, 0, 1, 2, 3, 1, -100};  // one ignored target
  Tensor y = from_vector(yv, {10});
  double big_loss = 0;
  const auto big = grads_after(net, [&] {
    Tensor loss = F::cross_entropy(net.forward(x), y);
    big_loss = loss.item();
    loss.backward();
  });
  for (int64_t k : {1, 2, 3, 10}) {
    std::vector<int64_t> seen;
    int64_t lasts = 0;
    double acc_loss = 0;
    const auto small = grads_after(net, [&] {
      acc_loss = nn::accumulate_gradients(x, y, k, [&](const nn::MicroBatch& mb) {
        seen.push_back(mb.x.size(0));
        CHECK(mb.count == k);
        lasts += mb.last ? 1 : 0;
        CHECK(mb.last == (mb.index + 1 == k));
        return F::cross_entropy(net.forward(mb.x), mb.y);
      });
    });
    CAPTURE(k);
    CHECK(static_cast<int64_t>(seen.size()) == k);
    CHECK(lasts == 1);
    CHECK(max_abs_diff(small, big) < 1e-6);
    CHECK(acc_loss == doctest::Approx(big_loss).epsilon(1e-6));
  }
  // A scaled loss (a GradScaler's) comes back scaled: the caller divides.
  const auto scaled = grads_after(net, [&] {
    const double l = nn::accumulate_gradients(
        x, y, 2, [&](const nn::MicroBatch& mb) { return F::cross_entropy(net.forward(mb.x), mb.y); },
        [](const Tensor& loss) { return loss * 8.0; });
    CHECK(l / 8.0 == doctest::Approx(big_loss).epsilon(1e-6));
  });
  CHECK(scaled[0][0] == doctest::Approx(8 * big[0][0]).epsilon(1e-5));
  CHECK_THROWS_AS(nn::accumulate_gradients(x, y, 11, [&](const nn::MicroBatch& mb) { return mb.x.sum(); }),
                  ValueError);  // more micro-batches than rows
}

TEST_CASE("progress line: bar, step, loss, rate and the memory now and at peak") {
  const Device dev("cpu:5");  // its own pool: the numbers are this test's
  memory::reset_peak(dev);
  std::string line;
  {
    Tensor big = zeros({1 << 16}, DType::f32).to(dev);  // 256 KiB, freed before the line
  }
  Tensor t = zeros({1 << 10}, DType::f32).to(dev);  // 4 KiB held
  line = nn::progress_line(15, 30, 2.5, 1234.4, "tok/s", {dev});
  MESSAGE(line);
  CHECK(line.rfind("[###############...............] step 15/30  loss 2.5000  1234 tok/s  mem ", 0) == 0);
  CHECK(line.find(memory::format_bytes(memory::allocated(dev)) + " (peak " +
                  memory::format_bytes(memory::peak_allocated(dev)) + ")") != std::string::npos);
  CHECK(memory::peak_allocated(dev) >= (std::size_t(1) << 18));  // the freed tensor counts at peak
  CHECK(memory::allocated(dev) < (std::size_t(1) << 18));
  // Several devices are named.
  const std::string two = nn::progress_line(30, 30, 1.0, 1, "samples/s", {Device("cpu:5"), Device("cpu:6")});
  CHECK(two.find("cpu:5 ") != std::string::npos);
  CHECK(two.find(", cpu:6 ") != std::string::npos);
  CHECK(two.rfind("[##############################] step 30/30", 0) == 0);
}

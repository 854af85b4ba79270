// SPDX-License-Identifier: MIT
// snug-bench checkpoint: the planner's budget sweep, measured in one process.
//
// One GPT (16 layers, width 128, block 128, batch 16 by default) is profiled
// once; the planner then makes a plan for each of --points budgets spread
// evenly from its minimum to the unconstrained peak. Each round runs, for every
// budget, a step without checkpointing and a step with the plan back to back
// (their order alternates between rounds), on the same batch. A step's extra
// time is the planned step minus the plain step next to it; the report gives
// the median over rounds (the main figure, compared with the plan's predicted
// recomputation) and, as a second view, the fastest planned step minus the
// fastest plain step of the whole run.
//
// Why one process and pairs: separate runs on a shared 2-core machine differ by
// more than a few recomputed layers cost. Adjacent steps see the same load, and
// with --clock cpu (the default; needs --threads 1) the time other processes
// take the core away is not counted on either side, prediction included.
//
//   snug-bench checkpoint [--layers 16] [--embd 128] [--block 128] [--batch 16]
//                         [--points 9] [--rounds 5] [--profile-repeats 3]
//                         [--clock cpu|wall] [--threads 1] [--seed 1337] [--json]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <snug/autograd/checkpoint.h>
#include <snug/core/generator.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/planner.h>
#include "bench/bench.h"

namespace snug::bench {
namespace {

struct Point {
  int64_t budget = 0;
  nn::ChainPlan plan;
  nn::PlanCost cost;
  int64_t layers = 0;  // recomputed layers
  int64_t peak = 0;    // highest peak_allocated over its planned steps
  std::vector<double> none_ms, plan_ms, extra_ms, recompute_ms;
};

std::string mib(int64_t b) { return memory::format_bytes(static_cast<std::size_t>(b)); }

}  // namespace

SNUG_BENCH(checkpoint, "planner budget sweep: measured peak vs budget, extra step time vs predicted, one process",
           int_flag("layers", 16, "GPT layers"), int_flag("embd", 128, "GPT channels (a multiple of its 4 heads)"),
           int_flag("block", 128, "sequence length"), int_flag("batch", 16, "batch size"),
           int_flag("points", 9, "budgets, spread from the planner's minimum to the unconstrained peak", 2),
           int_flag("rounds", 5, "rounds over every budget"),
           int_flag("profile-repeats", 3, "repeats of the planner's measuring pass"),
           choice_flag("clock", "cpu", {"cpu", "wall"}, "time steps in this process's CPU time or wall-clock time"),
           int_flag("threads", 1, "compute threads (--clock cpu needs 1)"),
           int_flag("seed", 1337, "seed of the weights and the batch", 0)) {
  const int64_t layers = args.get_int("layers"), embd = args.get_int("embd"), block = args.get_int("block"),
                B = args.get_int("batch"), points = args.get_int("points"), rounds = args.get_int("rounds"),
                repeats = args.get_int("profile-repeats"), threads = args.get_int("threads"),
                seed = args.get_int("seed");
  const std::string clock_name = args.get("clock");
  const bool cpu = clock_name == "cpu";
  SNUG_FLAG_CHECK(!cpu || threads == 1,
                  "--clock cpu sums every thread's time; use it with --threads 1 (or --clock wall)");
  set_num_threads(static_cast<int>(threads));
  manual_seed(static_cast<uint64_t>(seed));
  auto now_ms = [&] { return cpu ? nn::cpu_ms_now() : now_seconds() * 1e3; };

  nn::models::GPTConfig cfg;
  cfg.layers = layers;
  cfg.embd = embd;
  cfg.block = block;
  check_gpt_flags(cfg);
  Tensor x, y;  // (B, T) tokens and targets
  std::unique_ptr<nn::models::GPT> net;
  {
    memory::TagScope tag(memory::Tag::parameter);
    net = std::make_unique<nn::models::GPT>(cfg);
  }
  nn::models::GPT& model = *net;
  {
    Tensor seq = randint(0, cfg.vocab, Shape{B, block + 1});
    x = seq.narrow(1, 0, block).contiguous();
    y = seq.narrow(1, 1, block).contiguous();
  }
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});

  // Profile before the first step (the profile counts gradients and
  // optimizer state as still to come).
  const nn::ChainProfile prof = nn::profile_chain(model.chain(x, y), kCPU, /*optimizer_slots=*/2,
                                                  {.repeats = static_cast<int>(repeats), .cpu_time = cpu});
  const int64_t lo = nn::minimum_budget(prof), hi = nn::evaluate_plan(prof, nn::ChainPlan{}).total_peak;
  std::vector<Point> pts(static_cast<size_t>(points));
  for (int64_t i = 0; i < points; ++i) {
    Point& p = pts[static_cast<size_t>(i)];
    p.budget = lo + (hi - lo) * i / (points - 1);
    nn::PlanResult r = nn::plan_checkpoints(prof, p.budget);
    p.plan = r.plan;
    p.cost = r.cost;
    for (const auto& sg : p.plan.segments) p.layers += sg.checkpoint ? sg.end - sg.begin : 0;
  }

  struct Timed {
    double ms, recompute_ms;
    int64_t peak;
  };
  auto step = [&](const nn::ChainPlan& plan) {
    model.checkpointing = plan;
    memory::reset_peak(kCPU);
    autograd::reset_recompute_stats();
    const double t0 = now_ms();
    opt.zero_grad();
    Tensor loss;
    {
      memory::TagScope tag(memory::Tag::activation);
      loss = model.loss(x, y);
    }
    loss.backward();
    opt.step();
    const double ms = now_ms() - t0;
    return Timed{ms, autograd::recompute_stats().ms, static_cast<int64_t>(memory::peak_allocated(kCPU))};
  };
  // Warm-up: the first steps pay for fresh allocator segments and page faults.
  step(nn::ChainPlan{});
  step(pts[0].plan);

  for (int64_t r = 0; r < rounds; ++r) {
    for (Point& p : pts) {
      Timed none{}, planned{};
      if (r % 2 == 0) {
        none = step(nn::ChainPlan{});
        planned = step(p.plan);
      } else {
        planned = step(p.plan);
        none = step(nn::ChainPlan{});
      }
      p.none_ms.push_back(none.ms);
      p.plan_ms.push_back(planned.ms);
      p.extra_ms.push_back(planned.ms - none.ms);
      p.recompute_ms.push_back(planned.recompute_ms);
      p.peak = std::max(p.peak, planned.peak);
    }
  }

  bool all_fit = true;
  int within15 = 0, compared = 0;
  auto min_of = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  auto max_of = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  std::vector<double> all_none;
  for (const Point& p : pts) all_none.insert(all_none.end(), p.none_ms.begin(), p.none_ms.end());
  const double none_min = min_of(all_none);
  auto extra_of = [&](const Point& p) { return median(p.extra_ms); };
  auto fastest_extra_of = [&](const Point& p) { return min_of(p.plan_ms) - none_min; };
  for (const Point& p : pts) {
    all_fit = all_fit && p.peak <= p.budget;
    if (p.cost.recompute_ms > 0) {
      ++compared;
      within15 += std::abs(extra_of(p) / p.cost.recompute_ms - 1.0) <= 0.15;
    }
  }

  if (args.json()) {
    std::printf(
        "{\"bench\": \"checkpoint\", \"clock\": \"%s\", \"layers\": %lld, \"rounds\": %lld, "
        "\"minimum_budget_bytes\": %lld, \"unconstrained_peak_bytes\": %lld, \"all_fit\": %s, "
        "\"extra_within_15pct\": %d, \"compared\": %d, \"none_ms_min\": %.3f, \"points\": [",
        clock_name.c_str(), (long long)layers, (long long)rounds, (long long)lo, (long long)hi,
        all_fit ? "true" : "false", within15, compared, none_min);
    for (size_t i = 0; i < pts.size(); ++i) {
      const Point& p = pts[i];
      std::printf(
          "%s{\"budget\": %lld, \"predicted_peak\": %lld, \"peak_allocated\": %lld, \"recomputed_layers\": %lld, "
          "\"predicted_recompute_ms\": %.3f, \"recompute_ms\": %.3f, \"none_ms\": %.3f, \"plan_ms\": %.3f, "
          "\"none_ms_min\": %.3f, \"plan_ms_min\": %.3f, \"extra_ms\": %.3f, \"extra_ms_fastest\": %.3f, "
          "\"extra_ms_pairs_min\": %.3f, \"extra_ms_pairs_max\": %.3f}",
          i ? ", " : "", (long long)p.budget, (long long)p.cost.total_peak, (long long)p.peak, (long long)p.layers,
          p.cost.recompute_ms, median(p.recompute_ms), median(p.none_ms), median(p.plan_ms), min_of(p.none_ms),
          min_of(p.plan_ms), extra_of(p), fastest_extra_of(p), min_of(p.extra_ms), max_of(p.extra_ms));
    }
    std::printf("]}\n");
    return all_fit ? 0 : 1;
  }
  std::printf("GPT %lld layers, width %lld, block %lld, batch %lld; clock %s; %lld rounds; profile repeats %lld\n",
              (long long)layers, (long long)embd, (long long)block, (long long)B, clock_name.c_str(), (long long)rounds,
              (long long)repeats);
  std::printf("planner minimum %s, unconstrained predicted peak %s; fastest plain step %.1f ms (of %zu)\n\n",
              mib(lo).c_str(), mib(hi).c_str(), none_min, all_none.size());
  std::printf(
      "| budget | predicted peak | measured peak | fits | recomputed layers | predicted recompute ms | "
      "measured recompute ms (median) | step ms none → plan (medians) | extra ms (median of pairs, min..max) | "
      "extra vs predicted | fastest plan − fastest none |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Point& p : pts) {
    const double extra = extra_of(p);
    char vs[32] = "n/a";
    if (p.cost.recompute_ms > 0) std::snprintf(vs, sizeof vs, "%+.0f%%", 100.0 * (extra / p.cost.recompute_ms - 1.0));
    std::printf("| %s | %s | %s | %s | %lld | %.1f | %.1f | %.0f → %.0f | %+.1f (%+.1f..%+.1f) | %s | %+.1f |\n",
                mib(p.budget).c_str(), mib(p.cost.total_peak).c_str(), mib(p.peak).c_str(),
                p.peak <= p.budget ? "yes" : "NO", (long long)p.layers, p.cost.recompute_ms, median(p.recompute_ms),
                median(p.none_ms), median(p.plan_ms), extra, min_of(p.extra_ms), max_of(p.extra_ms), vs,
                fastest_extra_of(p));
  }
  std::printf("\nall budgets held: %s; extra time within 15%% of the prediction at %d of %d points\n",
              all_fit ? "yes" : "NO", within15, compared);
  return all_fit ? 0 : 1;
}

}  // namespace snug::bench

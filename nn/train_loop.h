// SPDX-License-Identifier: MIT
// A training loop that reads like its description, and the small pieces every
// training program writes again: gradient accumulation over micro-batches and
// a progress line with the memory held now and at peak.
//
//   nn::TrainLoop loop({.steps = 3000, .start = resumed_step});
//   loop.before_step([&](int64_t s) { batch = next_batch(s); })        // untimed
//       .step([&](int64_t s) { return train_step(batch); })             // timed; returns the loss
//       .every(50, [&](const nn::StepInfo& i) { print_progress(i); })   // after steps 50, 100, ... and the last
//       .evaluate(250, [&](const nn::StepInfo&) { return val_loss(); })
//       .every(save_every, [&](const nn::StepInfo& i) { save(i.step); });
//   nn::TrainSummary sum = loop.run();   // sum.median_ms(), sum.loss, sum.eval
//
// NOTE [ Train loop cadence ]: a hook registered with every(n) runs after the
// step that brings the count of steps done to a multiple of n, counted from
// step 0 (so a run resumed at step 120 with n = 50 still reports at 150), and
// after the last step unless and_last is false; n = 0 means only the last.
// Within one step the hooks run in this order: after_step hooks (which may
// change info.loss, e.g. to the mean over ranks), then the every() and
// evaluate() hooks in the order they were registered. Only the step function
// is timed (StepInfo::ms): fetching the batch in before_step and the hooks are
// left out.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <snug/base/device.h>
#include <snug/core/tensor.h>

namespace snug::nn {

// Where the loop is, handed to the hooks after each step.
struct StepInfo {
  int64_t step = 0;   // steps done, counted from step 0: 1 after the first step
  int64_t total = 0;  // TrainLoopOptions::steps
  double loss = NAN;  // what the step function returned (after_step hooks may change it)
  double ms = 0;      // the step function's wall time
  double eval = NAN;  // the latest evaluate() result so far (NaN before the first)
  bool last = false;  // the last step of this run: step == total, or TrainLoopOptions::stop
};

struct TrainLoopOptions {
  int64_t steps = 0;  // run steps start, ..., steps - 1 (step s counted from 0)
  int64_t start = 0;  // the first step to run: a resumed run's step
  // > 0: this run ends after step `stop` (when below `steps`), as a job
  // preempted there would; its hooks see that step as the last (the final
  // save happens then), while `steps` stays the total the schedule and the
  // progress count. A run resumed from that save continues to `steps`.
  int64_t stop = 0;
};

// What run() returns.
struct TrainSummary {
  int64_t steps_run = 0;
  std::vector<double> step_ms;  // each step function's wall time, in order
  double loss = NAN;            // the last step's loss (NaN when no step ran)
  double eval = NAN;            // the last evaluation (NaN when none ran)
  double median_ms() const;     // 0 when no step ran
};

class TrainLoop {
 public:
  using StepFn = std::function<double(int64_t step)>;  // step: 0-based index of the step to run
  using Hook = std::function<void(const StepInfo&)>;

  explicit TrainLoop(TrainLoopOptions opt);
  // Before each step, untimed (fetch the batch, start a profiler).
  TrainLoop& before_step(std::function<void(int64_t step)> fn);
  // The step itself: forward, backward, optimizer; returns the loss. Required.
  TrainLoop& step(StepFn fn);
  // After each step, untimed, before the every() hooks; may change info.loss.
  TrainLoop& after_step(std::function<void(StepInfo&)> fn);
  // hook after every n-th step (NOTE [ Train loop cadence ]); n = 0: only the last.
  TrainLoop& every(int64_t n, Hook hook, bool and_last = true);
  // eval on the every(n) cadence; its result goes into StepInfo::eval for the
  // hooks after it and into TrainSummary::eval.
  TrainLoop& evaluate(int64_t n, std::function<double(const StepInfo&)> eval);
  // Runs the steps; throws ValueError without a step function.
  TrainSummary run();

  // Whether a hook with cadence (n, and_last) runs after `info`'s step.
  static bool due(int64_t n, bool and_last, const StepInfo& info);

 private:
  struct Periodic {
    int64_t n;
    bool and_last;
    Hook hook;
  };
  TrainLoopOptions opt_;
  std::function<void(int64_t)> before_;
  StepFn step_;
  std::vector<std::function<void(StepInfo&)>> after_;
  std::vector<Periodic> periodic_;
  double eval_ = NAN;
};

// One micro-batch of an accumulated step.
struct MicroBatch {
  int64_t index = 0;  // 0, ..., count - 1
  int64_t count = 1;
  bool last = false;  // index + 1 == count: e.g. the backward that syncs gradients across ranks
  Tensor x, y;        // the rows [.., ..) of the step's x and y
};

// Gradient accumulation (nn/accumulate.h): splits x (B, ...) and y (B, ...)
// along dim 0 into k micro-batches, and for each runs backward of
// loss_of(mb) * tokens(mb.y) / tokens(y), tokens counting targets !=
// ignore_index, so the gradients add up to those of the whole batch's mean
// loss. loss_of returns the micro-batch's mean loss; scale, when given, maps
// it to the tensor to run backward from (a GradScaler's scale(): the loss
// times the loss scale). Returns the sum of the scaled, weighted losses: the
// whole batch's loss, times that scale. k = 1 is one ordinary backward.
double accumulate_gradients(const Tensor& x, const Tensor& y, int64_t k,
                            const std::function<Tensor(const MicroBatch&)>& loss_of,
                            const std::function<Tensor(const Tensor&)>& scale = {}, int64_t ignore_index = -100);

// One progress line: a bar, the step, the loss, the throughput and the memory
// each device holds now and at peak (memory::allocated / peak_allocated):
//   [#########.....] step 30/3000  loss 2.4512  51234 tok/s  mem 3.1 MiB (peak 9.5 MiB)
// With several devices each is named ("cpu:1 3.1 MiB (peak ...), cpu:2 ...").
std::string progress_line(int64_t step, int64_t total, double loss, double per_s, const char* unit,
                          const std::vector<Device>& devices);
// Writes it to f: redrawn in place ("\r", clear to end of line) on a terminal,
// one line each otherwise.
void print_progress(std::FILE* f, const std::string& line, bool tty);

}  // namespace snug::nn

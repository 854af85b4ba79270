// SPDX-License-Identifier: MIT
// Pipelined training steps over a placed LayerStack (docs/placement.md).
//
//   Pipeline pipe(stack, placement, {.micro_batches = 4, .schedule = Schedule::one_f_one_b});
//   opt.zero_grad();
//   double loss = pipe.step(x, y);   // forward + backward of the whole batch; gradients in .grad
//   opt.step();
//
// Each stage runs on its own thread (CPU devices; on CUDA devices each stage
// would use its own stream). Stage k receives its input for micro-batch m
// from stage k-1 as a copy on its own device, runs its layers, and sends a
// detached copy of the output on; backward sends the gradient of that input
// back. Micro-batch losses are means weighted by their share of the batch's
// rows, so the gradients equal one backward of the whole batch's mean loss
// (up to summation order: bitwise equal to the same micro-batches accumulated
// on one device, except for a weight shared between stages, whose two parts
// can arrive in either order).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <snug/parallel/layer_stack.h>
#include <snug/parallel/placement.h>

namespace snug::parallel {

struct PipelineOptions {
  int64_t micro_batches = 1;
  Schedule schedule = Schedule::gpipe;
  bool checkpoint_stages = false;  // recompute each stage's forward in its backward (autograd::checkpoint)
  int threads_per_stage = 1;       // compute threads of each stage's worker
  bool record_timeline = false;    // keep one event per forward/backward of a micro-batch
};

// One forward or backward of one micro-batch on one stage, in ms since the
// step began.
struct TimelineEvent {
  int stage = 0;
  int micro_batch = 0;
  bool backward = false;
  double start_ms = 0, end_ms = 0;
};

// The order in which stage k runs its forwards (F m) and backwards (B m).
struct ScheduleOp {
  bool backward;
  int64_t micro_batch;
};
std::vector<ScheduleOp> stage_schedule(Schedule s, int64_t stage, int64_t stages, int64_t micro_batches);

class Pipeline {
 public:
  // The stack must already be placed as `placement` says (place()).
  Pipeline(LayerStack& stack, Placement placement, PipelineOptions options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  // One training step's forward and backward over the batch x (B, ...) with
  // targets y (B, ...): gradients accumulate into the parameters' .grad.
  // Returns the batch's mean loss. If any stage throws, every stage stops and
  // the first error is rethrown (with the stage and micro-batch named).
  double step(const Tensor& x, const Tensor& y);
  // The last step's events (when record_timeline) and its wall time.
  const std::vector<TimelineEvent>& timeline() const { return timeline_; }
  double last_step_ms() const { return last_step_ms_; }
  // 1 - busy / (stages x step time) of the last step (needs record_timeline).
  double idle_fraction() const;
  const Placement& placement() const { return placement_; }
  const PipelineOptions& options() const { return opts_; }
  // Writes the last step's timeline as Chrome trace JSON (one row per stage).
  void write_timeline(const std::string& path) const;

 private:
  LayerStack& stack_;
  Placement placement_;
  PipelineOptions opts_;
  std::vector<TimelineEvent> timeline_;
  double last_step_ms_ = 0;
  // Stage k's own CUDA stream when it runs on a GPU (0 for CPU stages): NOTE
  // [ CUDA stages ] in pipeline.cpp.
  std::vector<std::uintptr_t> streams_;
};

}  // namespace snug::parallel

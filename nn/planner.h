// SPDX-License-Identifier: MIT
// The checkpoint planner: measure a chain model once, then choose which
// segments to checkpoint so that a training step fits a memory budget with
// the least recomputation. docs/checkpointing.md explains the memory model
// and the dynamic program.
//
//   ChainProfile prof = profile_chain(model.chain(x, y), kCPU, /*optimizer_slots=*/2);
//   PlanResult r = plan_checkpoints(prof, 150 << 20);   // throws OutOfMemoryError if impossible
//   model.checkpointing = r.plan;
//   std::cout << estimate_memory(prof, r.plan).table();
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <snug/nn/checkpoint_sequential.h>
#include <snug/nn/module.h>
#include <snug/nn/optim/optimizer.h>

namespace snug::nn {

// A model seen as prefix -> chain of single-tensor layers -> head (loss).
struct ChainModel {
  std::function<Tensor()> prefix;               // () -> the chain's input, e.g. embeddings (B, T, C)
  std::vector<std::shared_ptr<Module>> layers;  // each (B, T, C) -> (B, T, C)
  std::function<Tensor(const Tensor&)> head;    // the chain's output -> scalar loss
  std::vector<Tensor> parameters;               // every trainable parameter, once
};

// What one layer costs, measured on the sample batch. Bytes are allocator
// bytes (rounded as the allocator rounds), times in milliseconds.
struct LayerCost {
  std::string name;
  int64_t output_bytes = 0;   // its output (what a checkpoint after it keeps; its gradient's size)
  int64_t saved_bytes = 0;    // held from its forward to its backward when not checkpointed, output included
  int64_t forward_peak = 0;   // highest bytes above those live before its forward, during it (saved included)
  int64_t backward_peak = 0;  // highest bytes above those live when its backward starts (saved + incoming gradient)
  double forward_ms = 0, backward_ms = 0;
  int64_t cast_bytes = 0;  // parameter casts its forward added to the autocast cache (left out of the above)
  // Its parameters' gradients, which its backward creates (part of
  // backward_peak) and which then live to the end of the step.
  int64_t param_grad_bytes = 0;
};

struct ChainProfile {
  LayerCost prefix;               // never checkpointed
  std::vector<LayerCost> layers;  // the chain the planner chooses segments of
  LayerCost head;                 // never checkpointed
  // Bytes that live through the whole step whatever the plan.
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;         // one gradient per trainable parameter
  int64_t optimizer_state_bytes = 0;  // optimizer_slots tensors per trainable parameter
  int64_t other_bytes = 0;            // allocated when profiling began, besides parameters (the batch, buffers)
  int64_t step_bytes = 0;             // the optimizer step's temporaries (a few of the largest parameter)
  // Under autocast: the parameters' 16-bit casts, which the cast cache keeps
  // for the whole scope (a training step) whatever the plan.
  int64_t autocast_cast_bytes = 0;
  // The gradients the prefix, layers and head create in their backward (a
  // step starts without gradients: zero_grad sets them to none); the rest of
  // gradient_bytes counts as static.
  int64_t placed_gradient_bytes() const;
  int64_t static_bytes() const {
    return parameter_bytes + (gradient_bytes - placed_gradient_bytes()) + optimizer_state_bytes + other_bytes +
           autocast_cast_bytes;
  }
  std::string table() const;  // one row per layer, for logs and docs
};

// The measuring pass: runs the prefix, then each layer and the head on its
// own (a detached input, forward, backward with a gradient of ones), timing
// them and reading the allocator's counters on `device`. It measures under
// the caller's autocast state: call it inside the AutocastGuard the
// training step will use, so activations come out in the step's dtypes and
// the cached parameter casts are counted (autocast_cast_bytes). Its own peak is about
// one layer's activations above the static bytes, so it runs where a full step
// would not fit. Call it before the first optimizer step (it counts gradients
// and optimizer state as still to come) with the model in training mode; it
// leaves every parameter's .grad unset. Draws from the default generator
// (dropout) and puts its state back.
struct ProfileOptions {
  // Times the chain's layers this many times and keeps each layer's median
  // run: on a busy machine one pass can be off by tens of percent, and the
  // median of a few ignores the outliers while still predicting the typical
  // cost a step pays (the fastest run underestimates it; bytes are exact and
  // measured once).
  int repeats = 1;
  // Process CPU time instead of wall time. With one compute thread it leaves
  // out the time other processes take the core away, so predictions made on
  // a shared machine stay comparable with steps timed on the same clock
  // (cpu_ms_now). With several threads it sums them: use wall time there.
  bool cpu_time = false;
  // Micro-batches per step (gradient accumulation, nn/accumulate.h; the
  // profile's batch is one micro-batch). With more than one, every gradient
  // exists while the later micro-batches run forward and backward, so the
  // gradients count as static bytes, not from the backward that makes them.
  int micro_batches = 1;
};
ChainProfile profile_chain(const ChainModel& model, Device device, int optimizer_slots,
                           const ProfileOptions& options = {});
// The same, with the optimizer state that `optimizer` will really hold
// (Optimizer::expected_state_bytes: 8-bit moments, f32 masters of 16-bit
// parameters) instead of a number of f32 slots per parameter.
ChainProfile profile_chain(const ChainModel& model, Device device, const optim::Optimizer& optimizer,
                           const ProfileOptions& options = {});
// The measuring pass's unit, for other planners (parallel/placement.cpp):
// fn on a detached copy of input (requiring grad when floating), forward under
// the activation tag, then backward with a gradient of ones; bytes read from
// the allocator counters of `device`. output, if given, receives fn's result
// detached.
LayerCost measure_layer(const std::string& name, const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                        Device device, Tensor* output = nullptr, bool cpu_time = false);
// What the caching allocator hands out for t's storage (rounded up to 512 bytes).
int64_t alloc_bytes(const Tensor& t);
// Milliseconds on the clock ProfileOptions::cpu_time selects (process CPU time),
// from an arbitrary origin: for timing steps against a cpu_time profile.
double cpu_ms_now();

// The predicted peak of a training step under `plan` (empty: no checkpointing).
struct PlanCost {
  int64_t activation_peak = 0;  // above the static bytes: activations, activation and parameter gradients
  int64_t total_peak = 0;       // static + max(activation_peak, placed gradients + step_bytes)
  double recompute_ms = 0;      // the forward time of the checkpointed layers, spent again in backward
};
PlanCost evaluate_plan(const ChainProfile& prof, const ChainPlan& plan);

struct PlanResult {
  ChainPlan plan;
  PlanCost cost;
  int64_t budget = 0;
};

// The plan with the least recomputation whose predicted total peak is at most
// budget_bytes. Throws OutOfMemoryError saying the minimum when no plan fits.
PlanResult plan_checkpoints(const ChainProfile& prof, int64_t budget_bytes);
// The smallest budget plan_checkpoints accepts.
int64_t minimum_budget(const ChainProfile& prof);

// "Will it fit": the predicted bytes by tag at the peak of a step under plan.
struct MemoryEstimate {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, other = 0;
  int64_t autocast_casts = 0;  // parameter casts cached for the autocast scope
  int64_t total() const { return parameters + gradients + optimizer_state + activations + other + autocast_casts; }
  std::string table() const;
};
MemoryEstimate estimate_memory(const ChainProfile& prof, const ChainPlan& plan);
// Throws OutOfMemoryError when estimate_memory(prof, plan) exceeds budget,
// naming what does not fit and the minimum budget with the best plan.
void check_fits(const ChainProfile& prof, const ChainPlan& plan, int64_t budget_bytes);

// Parses "150MiB", "2G", "1.5GiB", "4096" (K/M/G and KiB/MiB/GiB are powers
// of 1024, KB/MB/GB powers of 1000). Throws ValueError.
int64_t parse_bytes(const std::string& text);

}  // namespace snug::nn

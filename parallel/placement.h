// SPDX-License-Identifier: MIT
// Which layers of a LayerStack live on which device (docs/placement.md).
//
//   StackProfile prof = profile_stack(stack, x_micro, y_micro, /*optimizer_slots=*/2);
//   Placement p = plan_placement(prof, {Device("cpu:1"), Device("cpu:2")}, Policy::balance_memory,
//                                {.micro_batches = 4, .schedule = Schedule::one_f_one_b});
//   place(stack, p);   // moves each layer's parameters and buffers to its device
//
// A stage is a contiguous range of layers on one device; stage k runs on
// devices[k]. The planner predicts each device's peak allocated bytes for a
// pipelined training step and keeps it within the device's capacity
// (memory::capacity), or throws an OutOfMemoryError that says which device
// and layer do not fit and by how many bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <snug/parallel/layer_stack.h>

namespace snug::parallel {

enum class Policy {
  manual,          // the caller's layer ranges (manual_placement)
  balance_memory,  // the split whose largest device peak, as a share of its capacity, is smallest
  balance_time,    // the split whose slowest stage (forward + backward) is fastest, among those that fit
  fill,            // in device order, each device takes as many layers as fit: offload, e.g.
                   // devices {cuda:0, cpu} keeps all it can on the GPU and the rest on the CPU
};
Policy parse_policy(const std::string& s);  // "manual", "memory", "time", "fill" (or "offload")

enum class Schedule { gpipe, one_f_one_b };
Schedule parse_schedule(const std::string& s);  // "gpipe", "1f1b"
const char* schedule_name(Schedule s);

// How a step runs; the planner needs it to count activations in flight.
struct StepShape {
  int64_t micro_batches = 1;
  Schedule schedule = Schedule::gpipe;
  bool checkpoint_stages = false;  // each stage keeps only its input per micro-batch until its backward
};

// One layer measured on one micro-batch. Bytes are allocator bytes.
struct LayerProfile {
  std::string name;
  int64_t param_bytes = 0;  // trainable parameters it owns (tied weights: the owner only)
  int64_t buffer_bytes = 0;
  int64_t saved_bytes = 0;  // held from its forward to its backward, output included
  int64_t output_bytes = 0;
  int64_t forward_peak = 0;   // above what was live before its forward
  int64_t backward_peak = 0;  // above what was live before its backward
  double forward_ms = 0, backward_ms = 0;
};

struct StackProfile {
  std::vector<LayerProfile> layers;  // the last one includes the loss
  int64_t input_bytes = 0;           // one micro-batch's input and targets
  int optimizer_slots = 2;           // state tensors per parameter (AdamW: 2, SGD with momentum: 1)
  std::string table() const;
};

// The measuring pass: runs every layer once on the current devices of the
// stack (place it after profiling), forward and backward with a gradient of
// ones, on one micro-batch (x, y). Leaves parameter gradients unset and the
// default generator's state as it was.
StackProfile profile_stack(const LayerStack& stack, const Tensor& x, const Tensor& y, int optimizer_slots);

struct Placement {
  std::vector<Device> devices;          // stage k on devices[k]
  std::vector<int64_t> bounds;          // stage k = layers [bounds[k], bounds[k+1]); size devices + 1
  std::vector<int64_t> predicted_peak;  // per stage, bytes (empty for a manual placement without a profile)
  std::vector<double> stage_ms;         // per stage, forward + backward of all micro-batches
  int64_t num_stages() const { return static_cast<int64_t>(devices.size()); }
  std::string str() const;  // "cpu:1 [0, 9) | cpu:2 [9, 18)"
};

// A placement from explicit ranges: stage k = layers [bounds[k], bounds[k+1]).
// Checks that the ranges cover the stack in order and that no stage is empty.
Placement manual_placement(const std::vector<Device>& devices, const std::vector<int64_t>& bounds, int64_t num_layers);

// Predicted peak bytes of each stage of p (fills p.predicted_peak, p.stage_ms).
void predict(const StackProfile& prof, const StepShape& shape, Placement& p);

// Chooses a split of the profiled layers over `devices` (one stage each, in
// order) by policy (balance_memory or balance_time) that fits every device's
// capacity. capacities: bytes per device; empty means memory::capacity(d).
Placement plan_placement(const StackProfile& prof, const std::vector<Device>& devices, Policy policy,
                         const StepShape& shape, std::vector<int64_t> capacities = {});

// Moves every layer of stage k to devices[k] (Module::to: the Tensor handles
// stay the same, so an optimizer built before still updates them).
void place(LayerStack& stack, const Placement& p);

// Parses "cpu:1,cpu:2" into devices; throws ValueError on an empty or repeated entry.
std::vector<Device> parse_devices(const std::string& list);

}  // namespace snug::parallel

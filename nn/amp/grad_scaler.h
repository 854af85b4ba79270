// SPDX-License-Identifier: MIT
// GradScaler: dynamic loss scaling for f16 training (torch.amp.GradScaler).
//
// f16 has 5 exponent bits: gradients below 2^-24 become zero. Multiplying
// the loss by a large scale S moves the whole backward pass up by S; the
// gradients are divided by S again before the optimizer sees them. When S
// is too large some gradient overflows to inf (or a NaN appears): that step
// is skipped and S shrinks; after `growth_interval` clean steps S grows.
//
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);            // optional: before clipping gradients
//   clip_grad_norm_(params, 1.0);
//   scaler.step(opt);                // unscales if not done; skips on inf/NaN
//   scaler.update();                 // backs off or grows the scale
//
// Defaults as PyTorch: init 2^16, growth 2, backoff 0.5, interval 2000; the
// optional min/max clamp the scale. f16/bf16 gradients are widened to f32
// when unscaled (dividing in f16 would flush the small values the scale was
// there to keep); the optimizer's master weights take f32 gradients as they
// are (nn/optim/optimizer.h).
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>

#include <snug/core/tensor.h>
#include <snug/nn/module.h>
#include <snug/nn/optim/optimizer.h>

namespace snug::nn::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0.0;                                      // clamps after backoff; 0 = none
  double max_scale = std::numeric_limits<double>::infinity();  // clamps after growth
  bool enabled = true;                                         // disabled: scale() is the identity, step() just steps
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions o = {});

  // loss * scale, computed in f32 (differentiable). Identity when disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of opt's parameters by the scale (in f32) and
  // records whether any is inf or NaN. Once per optimizer per step: a second
  // call before update() is a ValueError.
  void unscale_(optim::Optimizer& opt);
  // Calls unscale_ if it was not called, then opt.step() unless a gradient
  // was inf/NaN. Returns whether the optimizer stepped. A skipped step
  // touches neither the parameters nor the optimizer's state.
  bool step(optim::Optimizer& opt);
  // Backs off (found inf) or counts a clean step and grows after
  // growth_interval of them; then a new step begins.
  void update();

  double get_scale() const { return enabled_ ? scale_ : 1.0; }
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return enabled_; }
  // The last step's overflow: which parameters had inf/NaN gradients, by
  // name when known (name_parameters), else group/index and shape. "" if none.
  const std::string& overflow_report() const { return overflow_; }
  int64_t skipped_steps() const { return skipped_; }
  // Names for overflow reports, e.g. scaler.name_parameters(model.named_parameters()).
  void name_parameters(const NamedTensors& named);

  // "scale", "growth_tracker", "skipped_steps" (one-element f64) plus the
  // options, so a resumed run continues with the same scale schedule.
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& sd);

  GradScalerOptions options;

 private:
  bool enabled_;
  double scale_;
  int64_t growth_tracker_ = 0, skipped_ = 0;
  struct PerOptimizer {
    bool unscaled = false, found_inf = false;
  };
  std::map<const optim::Optimizer*, PerOptimizer> per_opt_;
  std::string overflow_;
  std::unordered_map<const TensorImpl*, std::string> names_;
};

}  // namespace snug::nn::amp

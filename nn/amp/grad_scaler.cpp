// SPDX-License-Identifier: MIT
#include <snug/nn/amp/grad_scaler.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/core/backend.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug::nn::amp {

GradScaler::GradScaler(GradScalerOptions o) : options(o), enabled_(o.enabled), scale_(o.init_scale) {
  SNUG_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), ValueError,
             "GradScaler: init_scale must be positive and finite, got ", o.init_scale);
  SNUG_CHECK(o.growth_factor > 1, ValueError, "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  SNUG_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, ValueError,
             "GradScaler: backoff_factor must be in (0, 1), got ", o.backoff_factor);
  SNUG_CHECK(o.growth_interval >= 1, ValueError, "GradScaler: growth_interval must be >= 1, got ", o.growth_interval);
  SNUG_CHECK(o.min_scale >= 0 && o.min_scale <= o.max_scale, ValueError,
             "GradScaler: need 0 <= min_scale <= max_scale, got ", o.min_scale, " and ", o.max_scale);
  scale_ = std::clamp(scale_, o.min_scale, o.max_scale);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  SNUG_CHECK(loss.is_floating_point(), DTypeError, "GradScaler::scale: expected a floating loss, got ",
             dtype_name(loss.dtype()));
  // In f32 whatever the loss's dtype: the scaled loss may not fit in f16.
  return loss.to(loss.dtype() == DType::f64 ? DType::f64 : DType::f32) * scale_;
}

void GradScaler::name_parameters(const NamedTensors& named) {
  for (const auto& [n, t] : named) names_[t.impl()] = n;
}

// NOTE [ Unscaling reads back once per device ]
// Each gradient is unscaled and checked by its backend's unscale_and_check
// (core/backend.h: one loop on the CPU, one kernel on a GPU), which sets the
// gradient's own slot of a per-device i32 flag array; the flags of each
// device are read back once, after every gradient of the optimizer was
// queued, so a step waits for a GPU once rather than once per parameter. The
// result: the gradient times 1/scale, in f32 (f64 for f64), and "inf/NaN"
// when any unscaled element is not finite.
void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!enabled_) return;
  PerOptimizer& st = per_opt_[&opt];
  SNUG_CHECK(!st.unscaled, ValueError,
             "GradScaler::unscale_: already called for this optimizer since the last update(); call it once per step");
  NoGradGuard ng;
  memory::TagScope tag(memory::Tag::gradient);
  const double inv = 1.0 / scale_;
  struct Entry {
    size_t gi, pi;
    size_t device;  // index into `devices`: the result is in flags[device][slot]
    int64_t slot;
    bool finite = true;
  };
  std::vector<Entry> entries;
  std::vector<Device> devices;  // the gradients' devices, in order of first use
  std::vector<int64_t> slots;   // gradients per device
  const auto& groups = opt.param_groups();
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (size_t pi = 0; pi < groups[gi].params.size(); ++pi) {
      const Tensor& g = groups[gi].params[pi].grad();
      if (!g.defined()) continue;
      const size_t d = size_t(std::find(devices.begin(), devices.end(), g.device()) - devices.begin());
      if (d == devices.size()) {
        devices.push_back(g.device());
        slots.push_back(0);
      }
      entries.push_back({gi, pi, d, slots[d]++});
    }
  std::vector<Tensor> flags;
  for (size_t d = 0; d < devices.size(); ++d) flags.push_back(zeros({slots[d]}, TensorOptions(DType::i32, devices[d])));
  for (Entry& e : entries) {
    const Tensor& p = groups[e.gi].params[e.pi];
    const Tensor g = p.grad();
    // f32/f64 gradients in place; half ones widened into a new f32 tensor
    // (g / scale in f16 would flush small values to zero).
    const Tensor out = g.dtype() == DType::f32 || g.dtype() == DType::f64
                           ? g
                           : empty(g.shape(), TensorOptions(DType::f32, g.device()));
    backend_for(g.device()).unscale_and_check(g, out, inv, flags[e.device], e.slot);
    if (!out.is_same(g)) p.set_grad(out);
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    // Waits for the device: the one read back.
    const std::vector<int32_t> host = flags[d].to(kCPU).to_vector<int32_t>();
    for (Entry& e : entries)
      if (e.device == d) e.finite = host[static_cast<size_t>(e.slot)] == 0;
  }
  std::string report;
  int bad = 0;
  for (const Entry& e : entries) {
    if (e.finite) continue;
    if (bad < 3) {
      const Tensor& p = groups[e.gi].params[e.pi];
      auto it = names_.find(p.impl());
      std::string who = it != names_.end() ? it->second : (p.name().empty() ? std::string() : p.name());
      report +=
          str(bad ? ", " : "", who.empty() ? str("group ", e.gi, " parameter ", e.pi) : who, " ", shape_str(p.shape()));
    }
    ++bad;
  }
  st.unscaled = true;
  st.found_inf = bad > 0;
  if (bad > 0) {
    if (bad > 3) report += str(" and ", bad - 3, " more");
    overflow_ = str("inf/NaN gradient at scale ", scale_, " in ", report);
  }
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!enabled_) {
    opt.step();
    return true;
  }
  if (!per_opt_[&opt].unscaled) unscale_(opt);
  if (per_opt_[&opt].found_inf) {
    ++skipped_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  bool found = false;
  for (auto& [o, st] : per_opt_) found = found || st.found_inf;
  if (found) {
    scale_ = std::max(scale_ * options.backoff_factor, options.min_scale);
    growth_tracker_ = 0;
  } else {
    overflow_.clear();
    if (++growth_tracker_ >= options.growth_interval) {
      scale_ = std::min(scale_ * options.growth_factor, options.max_scale);
      growth_tracker_ = 0;
    }
  }
  per_opt_.clear();
}

NamedTensors GradScaler::state_dict() const {
  auto scalar = [](double v) { return full({}, v, DType::f64); };
  return {{"scale", scalar(scale_)},
          {"growth_tracker", scalar(static_cast<double>(growth_tracker_))},
          {"skipped_steps", scalar(static_cast<double>(skipped_))},
          {"growth_factor", scalar(options.growth_factor)},
          {"backoff_factor", scalar(options.backoff_factor)},
          {"growth_interval", scalar(static_cast<double>(options.growth_interval))},
          {"min_scale", scalar(options.min_scale)},
          {"max_scale", scalar(options.max_scale)}};
}

void GradScaler::load_state_dict(const NamedTensors& sd) {
  std::map<std::string, Tensor> m(sd.begin(), sd.end());
  auto get = [&](const char* k) {
    auto it = m.find(k);
    SNUG_CHECK(it != m.end(), ValueError, "GradScaler::load_state_dict: missing key \"", k, "\"");
    SNUG_CHECK(it->second.numel() == 1, ValueError, "GradScaler::load_state_dict: \"", k,
               "\" must hold one value, got shape ", shape_str(it->second.shape()));
    return it->second.item();
  };
  const double s = get("scale");
  SNUG_CHECK(s > 0 && std::isfinite(s), ValueError,
             "GradScaler::load_state_dict: scale must be positive and finite, got ", s);
  GradScalerOptions o = options;
  o.growth_factor = get("growth_factor");
  o.backoff_factor = get("backoff_factor");
  o.growth_interval = static_cast<int64_t>(get("growth_interval"));
  o.min_scale = get("min_scale");
  o.max_scale = get("max_scale");
  const int64_t tracker = static_cast<int64_t>(get("growth_tracker")),
                skipped = static_cast<int64_t>(get("skipped_steps"));
  GradScaler check(o);  // validates the options before anything is replaced
  options = o;
  scale_ = s;
  growth_tracker_ = tracker;
  skipped_ = skipped;
  per_opt_.clear();
  overflow_.clear();
}

}  // namespace snug::nn::amp

// SPDX-License-Identifier: MIT
// The checkpoint planner: the measuring pass, the memory model and the
// dynamic program (docs/checkpointing.md).
//
// NOTE [ Checkpoint memory model ]
// Bytes above the static ones (parameters, optimizer state, other, autocast
// casts), for a chain split into segments, with base(j) the bytes kept by the
// prefix and by the segments before j, and G(i) the parameter gradients that
// exist when layer i's backward starts (those of the layers after i and of
// the head: a step starts with none, and backward creates them back to front):
//   keep(j)  = the saved bytes of its layers if stored, its output if checkpointed
//   req(j)   = max over its layers i of
//                S(begin..i) + output_i + backward_peak_i + G(i)   (the backward of i,
//                                                                   its own gradients included)
//                S(begin..i-1) + forward_peak_i                    (the forward of i)
//                S(begin..i-1) + forward_peak_i + G(end - 1)       (its recomputation, in backward)
//              where S sums saved bytes: a checkpointed segment is recomputed
//              whole before its backward starts, so it then holds what a
//              stored one holds.
//   peak     = max( prefix terms (its backward with every gradient), max_j base(j) + req(j),
//                   base(end) + head.forward_peak,
//                   base(end) + head.saved + head.output + head.backward_peak )
// and after backward the optimizer step: every gradient plus step_bytes.
// The forward of a checkpointed segment holds less than req(j) says (only
// the current layer's), so the model errs on the safe side there; elsewhere
// it follows the order the engine frees things in (NOTE [ Saved tensors die early ]).
// Recomputation time: each checkpointed segment runs its layers' forward once more.
#include <snug/nn/planner.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <sstream>

#include <snug/autograd/autocast.h>
#include <snug/autograd/engine.h>
#include <snug/autograd/grad_mode.h>
#include <snug/core/generator.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>

namespace snug::nn {

int64_t alloc_bytes(const Tensor& t) {
  // Requests are rounded up to 512 bytes by default; close enough for a budget.
  const int64_t n = static_cast<int64_t>(t.nbytes());
  return (n + 511) / 512 * 512;
}

namespace {

// The profile's clock: wall (steady_clock) or process CPU time, in ms.
double wall_ms_now() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
using ClockFn = double (*)();

int64_t now_allocated(Device d) { return static_cast<int64_t>(memory::allocated(d)); }

// One layer (or the prefix/head) on its own: forward from a detached input
// that requires grad, then backward with a gradient of ones.
LayerCost measure(const std::string& name, const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  Device dev, Tensor* output, ClockFn clock = wall_ms_now) {
  LayerCost c;
  c.name = name;
  Tensor x;
  if (input.defined()) {
    x = input.detach();
    if (x.is_floating_point()) x.requires_grad_(true);
  }
  Tensor y;
  {
    memory::TagScope tag(memory::Tag::activation);
    const int64_t before = now_allocated(dev);
    const auto casts_before = static_cast<int64_t>(autocast::cache_bytes());
    const auto ncasts_before = static_cast<int64_t>(autocast::cache_size());
    memory::reset_peak(dev);
    const double t0 = clock();
    y = fn(x);
    c.forward_ms = clock() - t0;
    // Parameter casts that the autocast cache made here live for the whole
    // step, not from this forward to this backward: static, not saved.
    // (Each rounded up as the allocator rounds, at most 511 bytes more.)
    c.cast_bytes = static_cast<int64_t>(autocast::cache_bytes()) - casts_before +
                   511 * (static_cast<int64_t>(autocast::cache_size()) - ncasts_before);
    c.saved_bytes = now_allocated(dev) - before - c.cast_bytes;
    c.forward_peak = static_cast<int64_t>(memory::peak_allocated(dev)) - before - c.cast_bytes;
  }
  c.output_bytes = alloc_bytes(y);
  if (y.requires_grad()) {
    Tensor g;
    {
      memory::TagScope tag(memory::Tag::gradient);
      g = ones(y.shape(), y.options());
    }
    const int64_t before = now_allocated(dev);
    memory::reset_peak(dev);
    const double t0 = clock();
    autograd::backward({y}, {g});
    c.backward_ms = clock() - t0;
    c.backward_peak = static_cast<int64_t>(memory::peak_allocated(dev)) - before;
  }
  if (output) *output = y.detach();
  return c;
}

std::string mib(int64_t b) { return memory::format_bytes(static_cast<std::size_t>(std::max<int64_t>(b, 0))); }

// Sums over a chain's layers, for segment costs in O(1).
struct Prefixes {
  std::vector<int64_t> saved;  // saved[i] = saved bytes of layers [0, i)
  std::vector<double> fwd;     // fwd[i] = forward ms of layers [0, i)
  std::vector<int64_t> grads;  // grads[i] = G(i - 1): gradients of layers [i, n) and of the head
  Prefixes(const std::vector<LayerCost>& ls, const LayerCost& head)
      : saved(ls.size() + 1, 0), fwd(ls.size() + 1, 0), grads(ls.size() + 1, 0) {
    for (size_t i = 0; i < ls.size(); ++i) {
      saved[i + 1] = saved[i] + ls[i].saved_bytes;
      fwd[i + 1] = fwd[i] + ls[i].forward_ms;
    }
    grads[ls.size()] = head.param_grad_bytes;
    for (size_t i = ls.size(); i-- > 0;) grads[i] = grads[i + 1] + ls[i].param_grad_bytes;
  }
};

// req(j) of NOTE [ Checkpoint memory model ] for layers [a, b), stored or checkpointed.
int64_t segment_req(const std::vector<LayerCost>& ls, const Prefixes& p, int64_t a, int64_t b, bool ckpt) {
  int64_t r = 0;
  for (int64_t i = a; i < b; ++i) {
    const LayerCost& l = ls[i];
    r = std::max(r, p.saved[i + 1] - p.saved[a] + l.output_bytes + l.backward_peak + p.grads[i + 1]);
    r = std::max(r, p.saved[i] - p.saved[a] + l.forward_peak + (ckpt ? p.grads[b] : 0));
  }
  return r;
}

int64_t segment_keep(const std::vector<LayerCost>& ls, const Prefixes& p, int64_t a, int64_t b, bool ckpt) {
  return ckpt ? ls[b - 1].output_bytes : p.saved[b] - p.saved[a];
}

int64_t prefix_req(const ChainProfile& prof, const Prefixes& p) {
  const LayerCost& pre = prof.prefix;
  return std::max(pre.forward_peak, pre.saved_bytes + pre.output_bytes + pre.backward_peak + p.grads[0]);
}

// The optimizer step's need above the static bytes: every gradient and the step's temporaries.
int64_t step_req(const ChainProfile& prof) { return prof.placed_gradient_bytes() + prof.step_bytes; }

// The head's need on top of what the chain keeps at its end.
int64_t head_req(const ChainProfile& prof) {
  const LayerCost& h = prof.head;
  return std::max(h.forward_peak, h.saved_bytes + h.output_bytes + h.backward_peak);
}

// The least-recomputation plan whose activation peak is at most act_budget,
// by a dynamic program over the chain. A state after i layers is (bytes kept
// so far, recomputation so far); only the Pareto front of states (no other
// state keeps fewer bytes for no more time) is extended, which makes the
// result exact without discretizing bytes. Returns false when nothing fits.
bool solve(const ChainProfile& prof, int64_t act_budget, ChainPlan* plan, PlanCost* cost) {
  const auto& ls = prof.layers;
  const auto n = static_cast<int64_t>(ls.size());
  const Prefixes p(ls, prof.head);
  if (prefix_req(prof, p) > act_budget) return false;
  struct State {
    int64_t kept;
    double ms;
    int64_t from;     // previous position
    size_t from_idx;  // index in the previous position's front
    bool ckpt;        // the segment [from, here) is checkpointed
  };
  std::vector<std::vector<State>> front(n + 1);
  front[0].push_back({prof.prefix.saved_bytes, 0.0, -1, 0, false});
  for (int64_t i = 0; i <= n; ++i) {
    auto& f = front[i];
    std::sort(f.begin(), f.end(),
              [](const State& a, const State& b) { return a.kept != b.kept ? a.kept < b.kept : a.ms < b.ms; });
    std::vector<State> pruned;
    for (const State& s : f)
      if (pruned.empty() || s.ms < pruned.back().ms) pruned.push_back(s);
    f = std::move(pruned);
    if (i == n) break;
    for (size_t k = 0; k < f.size(); ++k) {
      const State s = f[k];
      for (int64_t j = i + 1; j <= n; ++j) {
        // A stored segment needs no more than a checkpointed one, and longer
        // stored segments only need more.
        if (s.kept + segment_req(ls, p, i, j, false) > act_budget) break;
        for (bool ckpt : {false, true}) {
          if (ckpt && s.kept + segment_req(ls, p, i, j, true) > act_budget) continue;
          const double ms = s.ms + (ckpt ? p.fwd[j] - p.fwd[i] : 0.0);
          front[j].push_back({s.kept + segment_keep(ls, p, i, j, ckpt), ms, i, k, ckpt});
        }
      }
    }
  }
  const State* best = nullptr;
  size_t best_idx = 0;
  for (size_t k = 0; k < front[n].size(); ++k) {
    const State& s = front[n][k];
    if (s.kept + head_req(prof) > act_budget) continue;
    if (!best || s.ms < best->ms) {
      best = &s;
      best_idx = k;
    }
  }
  if (!best) return false;
  if (plan) {
    std::vector<ChainSegment> segs;
    int64_t at = n;
    size_t idx = best_idx;
    while (at > 0) {
      const State& s = front[at][idx];
      segs.push_back({s.from, at, s.ckpt});
      idx = s.from_idx;
      at = s.from;
    }
    std::reverse(segs.begin(), segs.end());
    // Adjacent stored segments are one stored segment.
    plan->segments.clear();
    for (const auto& s : segs) {
      if (!plan->segments.empty() && !s.checkpoint && !plan->segments.back().checkpoint)
        plan->segments.back().end = s.end;
      else
        plan->segments.push_back(s);
    }
    if (plan->num_checkpointed() == 0) plan->segments.clear();  // nothing to recompute: run plainly
  }
  if (cost && plan) *cost = evaluate_plan(prof, *plan);
  return true;
}

int64_t minimum_activation_budget(const ChainProfile& prof) {
  int64_t hi = evaluate_plan(prof, ChainPlan{}).activation_peak;  // no checkpointing always fits its own peak
  int64_t lo = -1;                                                // infeasible
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (solve(prof, mid, nullptr, nullptr))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

}  // namespace

int64_t ChainProfile::placed_gradient_bytes() const {
  int64_t n = prefix.param_grad_bytes + head.param_grad_bytes;
  for (const LayerCost& l : layers) n += l.param_grad_bytes;
  return n;
}

std::string ChainProfile::table() const {
  std::ostringstream os;
  char line[200];
  std::snprintf(line, sizeof line, "%-12s %12s %12s %12s %12s %9s %9s\n", "layer", "saved", "output", "fwd peak",
                "bwd peak", "fwd ms", "bwd ms");
  os << line;
  auto row = [&](const LayerCost& c) {
    std::snprintf(line, sizeof line, "%-12s %12s %12s %12s %12s %9.2f %9.2f\n", c.name.c_str(),
                  mib(c.saved_bytes).c_str(), mib(c.output_bytes).c_str(), mib(c.forward_peak).c_str(),
                  mib(c.backward_peak).c_str(), c.forward_ms, c.backward_ms);
    os << line;
  };
  row(prefix);
  for (const auto& l : layers) row(l);
  row(head);
  os << "static: parameters " << mib(parameter_bytes) << ", gradients " << mib(gradient_bytes) << ", optimizer state "
     << mib(optimizer_state_bytes) << ", other " << mib(other_bytes) << ", step " << mib(step_bytes);
  if (autocast_cast_bytes > 0) os << ", autocast casts " << mib(autocast_cast_bytes);
  os << "\n";
  return os.str();
}

double cpu_ms_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

LayerCost measure_layer(const std::string& name, const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                        Device device, Tensor* output, bool cpu_time) {
  return measure(name, fn, input, device, output, cpu_time ? cpu_ms_now : wall_ms_now);
}

namespace {
// optimizer_state: the optimizer's expected state bytes, or -1 for
// optimizer_slots f32 tensors per trainable parameter.
ChainProfile profile(const ChainModel& model, Device dev, int optimizer_slots, int64_t optimizer_state,
                     const ProfileOptions& options) {
  SNUG_CHECK(model.prefix && model.head && !model.layers.empty(), ValueError,
             "profile_chain: the model needs a prefix, at least one layer and a head");
  SNUG_CHECK(options.repeats >= 1, ValueError, "profile_chain: repeats must be >= 1, got ", options.repeats);
  SNUG_CHECK(options.micro_batches >= 1, ValueError, "profile_chain: micro_batches must be >= 1, got ",
             options.micro_batches);
  const ClockFn clock = options.cpu_time ? cpu_ms_now : wall_ms_now;
  SNUG_CHECK(optimizer_slots >= 0, ValueError, "profile_chain: optimizer_slots must be >= 0, got ", optimizer_slots);
  autograd::GradModeGuard grad_on(true);
  Generator& gen = default_generator();
  const PhiloxState rng = gen.get_state();

  ChainProfile prof;
  int64_t largest = 0, existing_grads = 0, trainable = 0;
  for (const Tensor& t : model.parameters) {
    const int64_t b = alloc_bytes(t);
    prof.parameter_bytes += b;
    largest = std::max(largest, b);
    if (t.requires_grad()) {
      ++trainable;
      prof.gradient_bytes += b;
      prof.optimizer_state_bytes += optimizer_slots * b;
      if (t.grad().defined()) existing_grads += alloc_bytes(t.grad());
    }
  }
  // The optimizer's own count is of tensor bytes; each of its state tensors
  // (up to four per parameter: two moments, 8-bit scales or a master) is
  // rounded up by the allocator, by at most 511 bytes.
  if (optimizer_state >= 0) prof.optimizer_state_bytes = optimizer_state + 4 * 511 * trainable;
  prof.other_bytes = std::max<int64_t>(0, now_allocated(dev) - prof.parameter_bytes - existing_grads);
  prof.step_bytes = 3 * largest;
  auto clear_grads = [&] {
    for (const Tensor& t : model.parameters)
      if (t.requires_grad()) t.set_grad(Tensor());
  };
  clear_grads();
  // Which parameters have a gradient now, and the bytes of those that got one
  // since `before`: a layer's param_grad_bytes.
  const auto& params = model.parameters;
  auto with_grad = [&] {
    std::vector<bool> v(params.size());
    for (size_t i = 0; i < params.size(); ++i) v[i] = params[i].requires_grad() && params[i].grad().defined();
    return v;
  };
  auto new_grad_bytes = [&](const std::vector<bool>& now, const std::vector<bool>& before,
                            const std::vector<bool>& skip) {
    int64_t b = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (now[i] && !before[i] && !skip[i]) b += alloc_bytes(params[i]);
    return b;
  };
  const std::vector<bool> none(params.size(), false);

  Tensor x0;
  prof.prefix = measure(
      "prefix", [&](const Tensor&) { return model.prefix(); }, Tensor(), dev, &x0, clock);
  const std::vector<bool> prefix_grads = with_grad();
  // One untimed round of the first layer: the first call pays for thread
  // start-up and fresh allocator segments, which the step never sees again.
  const LayerCost warm = measure(
      "warm-up", [&](const Tensor& in) { return model.layers[0]->forward(in); }, x0, dev, nullptr, clock);
  clear_grads();
  // Every repeat runs the chain from the same input; dropout draws differ
  // between repeats, which changes no byte count and no shape.
  std::vector<std::vector<double>> fwd(model.layers.size()), bwd(model.layers.size());
  Tensor x;
  for (int rep = 0; rep < options.repeats; ++rep) {
    x = x0;
    for (size_t i = 0; i < model.layers.size(); ++i) {
      auto& layer = model.layers[i];
      Tensor y;
      const std::vector<bool> before = with_grad();
      LayerCost c = measure(
          str("layer ", i), [&](const Tensor& in) { return layer->forward(in); }, x, dev, &y, clock);
      c.param_grad_bytes = new_grad_bytes(with_grad(), before, none);
      fwd[i].push_back(c.forward_ms);
      bwd[i].push_back(c.backward_ms);
      if (rep == 0) prof.layers.push_back(c);
      x = y;
    }
    clear_grads();
  }
  // The median, not the fastest: a step recomputes at the layer's typical
  // speed, and the fastest of five predicted 15-25% too little once layers got
  // short (docs/checkpointing.md (b3)).
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  for (size_t i = 0; i < model.layers.size(); ++i) {
    prof.layers[i].forward_ms = median(fwd[i]);
    prof.layers[i].backward_ms = median(bwd[i]);
  }
  prof.head = measure("head", model.head, x, dev, nullptr, clock);
  const std::vector<bool> head_grads = with_grad();
  prof.head.param_grad_bytes = new_grad_bytes(head_grads, none, none);
  // A weight the head shares with the prefix (a tied embedding) gets its
  // gradient in the head's backward, which runs first.
  prof.prefix.param_grad_bytes = new_grad_bytes(prefix_grads, none, head_grads);
  if (options.micro_batches > 1) {  // every gradient is there before the last micro-batch starts
    prof.prefix.param_grad_bytes = prof.head.param_grad_bytes = 0;
    for (LayerCost& l : prof.layers) l.param_grad_bytes = 0;
    // Adding a micro-batch's gradient to an existing one may hold a sum
    // beside both for a moment; allow one of the largest.
    prof.other_bytes += largest;
  }
  clear_grads();
  gen.set_state(rng);
  // The first pass made every cast (later repeats find them cached).
  prof.autocast_cast_bytes = prof.prefix.cast_bytes + warm.cast_bytes + prof.head.cast_bytes;
  for (const LayerCost& l : prof.layers) prof.autocast_cast_bytes += l.cast_bytes;
  return prof;
}
}  // namespace

ChainProfile profile_chain(const ChainModel& model, Device dev, int optimizer_slots, const ProfileOptions& options) {
  return profile(model, dev, optimizer_slots, -1, options);
}

ChainProfile profile_chain(const ChainModel& model, Device dev, const optim::Optimizer& optimizer,
                           const ProfileOptions& options) {
  return profile(model, dev, 0, static_cast<int64_t>(optimizer.expected_state_bytes()), options);
}

PlanCost evaluate_plan(const ChainProfile& prof, const ChainPlan& plan) {
  const auto& ls = prof.layers;
  const auto n = static_cast<int64_t>(ls.size());
  std::vector<ChainSegment> segs = plan.segments;
  if (segs.empty())
    segs.push_back({0, n, false});
  else
    plan.validate(n);
  const Prefixes p(ls, prof.head);
  PlanCost c;
  int64_t peak = prefix_req(prof, p);
  int64_t kept = prof.prefix.saved_bytes;
  for (const auto& s : segs) {
    peak = std::max(peak, kept + segment_req(ls, p, s.begin, s.end, s.checkpoint));
    kept += segment_keep(ls, p, s.begin, s.end, s.checkpoint);
    if (s.checkpoint) c.recompute_ms += p.fwd[s.end] - p.fwd[s.begin];
  }
  peak = std::max(peak, kept + head_req(prof));
  c.activation_peak = peak;
  c.total_peak = prof.static_bytes() + std::max(peak, step_req(prof));
  return c;
}

int64_t minimum_budget(const ChainProfile& prof) {
  return prof.static_bytes() + std::max(minimum_activation_budget(prof), step_req(prof));
}

namespace {
[[noreturn]] void throw_too_small(const ChainProfile& prof, int64_t budget, const std::string& what) {
  const int64_t min_act = minimum_activation_budget(prof);
  const int64_t minimum = prof.static_bytes() + std::max(min_act, step_req(prof));
  throw OutOfMemoryError(
      str(what, " a budget of ", mib(budget), " cannot hold a training step; the minimum is ", mib(minimum), " (",
          minimum, " bytes): parameters ", mib(prof.parameter_bytes), ", gradients ", mib(prof.gradient_bytes),
          ", optimizer state ", mib(prof.optimizer_state_bytes), ", other ", mib(prof.other_bytes),
          prof.autocast_cast_bytes > 0 ? str(", autocast casts ", mib(prof.autocast_cast_bytes)) : std::string(),
          ", and activations of at least ", mib(min_act),
          " with the best checkpointing. Smaller batches (gradient accumulation) or fewer optimizer slots lower it."),
      static_cast<std::size_t>(minimum), static_cast<std::size_t>(std::max<int64_t>(budget, 0)));
}
}  // namespace

PlanResult plan_checkpoints(const ChainProfile& prof, int64_t budget) {
  PlanResult r;
  r.budget = budget;
  const int64_t act_budget = budget - prof.static_bytes();
  if (prof.static_bytes() + step_req(prof) > budget || !solve(prof, act_budget, &r.plan, &r.cost))
    throw_too_small(prof, budget, "plan_checkpoints:");
  return r;
}

MemoryEstimate estimate_memory(const ChainProfile& prof, const ChainPlan& plan) {
  const PlanCost c = evaluate_plan(prof, plan);
  MemoryEstimate e;
  e.parameters = prof.parameter_bytes;
  // At the peak: during backward (activations and the gradients made so
  // far, one number) or in the optimizer step (every gradient, the step's
  // temporaries in other).
  const int64_t placed = prof.placed_gradient_bytes();
  e.optimizer_state = prof.optimizer_state_bytes;
  if (c.activation_peak >= step_req(prof)) {
    e.gradients = prof.gradient_bytes - placed;
    e.activations = c.activation_peak;
    e.other = prof.other_bytes;
  } else {
    e.gradients = prof.gradient_bytes;
    e.other = prof.other_bytes + prof.step_bytes;
  }
  e.autocast_casts = prof.autocast_cast_bytes;
  return e;
}

std::string MemoryEstimate::table() const {
  std::ostringstream os;
  auto row = [&](const char* tag, int64_t b) {
    char line[120];
    std::snprintf(line, sizeof line, "  %-16s %12s\n", tag, mib(b).c_str());
    os << line;
  };
  row("parameter", parameters);
  row("gradient", gradients);
  row("optimizer_state", optimizer_state);
  row("activation", activations);
  row("other", other);
  if (autocast_casts > 0) row("autocast casts", autocast_casts);
  row("total (peak)", total());
  return os.str();
}

void check_fits(const ChainProfile& prof, const ChainPlan& plan, int64_t budget) {
  const MemoryEstimate e = estimate_memory(prof, plan);
  if (e.total() <= budget) return;
  throw_too_small(prof, budget, str("check_fits: with plan ", plan.str(), " a step needs ", mib(e.total()), "; "));
}

int64_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  SNUG_CHECK(pos > 0 && v >= 0 && std::isfinite(v), ValueError, "parse_bytes: \"", text,
             "\" is not a byte count (e.g. 4096, 150MiB, 1.5G)");
  std::string unit = text.substr(pos);
  double mult = 0;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KiB")
    mult = 1024.0;
  else if (unit == "M" || unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  SNUG_CHECK(mult > 0, ValueError, "parse_bytes: unknown unit \"", unit, "\" in \"", text,
             "\" (use B, K/KiB, M/MiB, G/GiB, or KB/MB/GB for powers of 1000)");
  const double bytes = v * mult;
  SNUG_CHECK(bytes < 9.0e18, ValueError, "parse_bytes: \"", text, "\" is too large");
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace snug::nn

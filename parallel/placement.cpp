// SPDX-License-Identifier: MIT
// Profiling a LayerStack, predicting each stage's peak, and choosing a split.
//
// NOTE [ Stage memory model ]
// For stage k = layers [a, b) on its device, with n micro-batches in flight
// (GPipe: all M; 1F1B: min(K - k, M), since stage k runs K - k forwards before
// its first backward and then alternates), per micro-batch:
//   in   = the stage's input (the previous stage's output, or the batch itself)
//   S    = the saved bytes of its layers (what a forward holds until its backward)
// the peak is
//   static + max( (n-1)(in + S) + in + max_i (S(a..i-1) + forward_peak_i),      last forward
//                 grads + n(in + S) + out + max_i backward_peak_i )             first backward
// where static = parameters + buffers + optimizer state (its slots x parameters)
// and grads = the parameters' gradients, which appear during the first backward.
// With per-stage checkpointing a micro-batch in flight holds only in + out
// and one recomputed micro-batch holds S. The model counts every backward at
// its most expensive moment, so it errs upward; tests check it within 10%.
#include <snug/parallel/placement.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include <snug/autograd/grad_mode.h>
#include <snug/core/generator.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/planner.h>

namespace snug::parallel {

namespace {

using nn::alloc_bytes;
std::string mib(int64_t b) { return memory::format_bytes(static_cast<std::size_t>(std::max<int64_t>(b, 0))); }

}  // namespace

Policy parse_policy(const std::string& s) {
  if (s == "manual") return Policy::manual;
  if (s == "memory" || s == "balance_memory") return Policy::balance_memory;
  if (s == "time" || s == "balance_time") return Policy::balance_time;
  if (s == "fill" || s == "offload") return Policy::fill;
  throw ValueError(str("placement policy must be manual, memory, time or fill, got \"", s, "\""));
}

Schedule parse_schedule(const std::string& s) {
  if (s == "gpipe") return Schedule::gpipe;
  if (s == "1f1b") return Schedule::one_f_one_b;
  throw ValueError(str("pipeline schedule must be gpipe or 1f1b, got \"", s, "\""));
}

const char* schedule_name(Schedule s) { return s == Schedule::gpipe ? "gpipe" : "1f1b"; }

std::vector<Device> parse_devices(const std::string& list) {
  std::vector<Device> out;
  std::set<Device> seen;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    SNUG_CHECK(!item.empty(), ValueError, "device list \"", list, "\" has an empty entry");
    Device d(item);
    SNUG_CHECK(seen.insert(d).second, ValueError, "device list \"", list, "\" names ", d.str(), " twice");
    out.push_back(d);
  }
  SNUG_CHECK(!out.empty(), ValueError, "device list is empty");
  return out;
}

std::string StackProfile::table() const {
  std::ostringstream os;
  char line[200];
  std::snprintf(line, sizeof line, "%-14s %11s %11s %11s %11s %11s %8s %8s\n", "layer", "params", "saved", "output",
                "fwd peak", "bwd peak", "fwd ms", "bwd ms");
  os << line;
  for (const auto& l : layers) {
    std::snprintf(line, sizeof line, "%-14s %11s %11s %11s %11s %11s %8.2f %8.2f\n", l.name.c_str(),
                  mib(l.param_bytes).c_str(), mib(l.saved_bytes).c_str(), mib(l.output_bytes).c_str(),
                  mib(l.forward_peak).c_str(), mib(l.backward_peak).c_str(), l.forward_ms, l.backward_ms);
    os << line;
  }
  return os.str();
}

StackProfile profile_stack(const LayerStack& stack, const Tensor& x, const Tensor& y, int optimizer_slots) {
  SNUG_CHECK(!stack.layers.empty() && stack.loss, ValueError, "profile_stack: the stack needs layers and a loss");
  SNUG_CHECK(stack.names.size() == stack.layers.size(), ValueError, "profile_stack: one name per layer expected");
  SNUG_CHECK(optimizer_slots >= 0, ValueError, "profile_stack: optimizer_slots must be >= 0");
  autograd::GradModeGuard grad_on(true);
  Generator& gen = default_generator();
  const PhiloxState rng = gen.get_state();
  StackProfile prof;
  prof.optimizer_slots = optimizer_slots;
  prof.input_bytes = alloc_bytes(x) + alloc_bytes(y);

  std::set<const void*> owned;  // a tied weight counts for its first layer only
  Tensor in = x;
  const size_t n = stack.layers.size();
  for (size_t i = 0; i < n; ++i) {
    auto& layer = stack.layers[i];
    LayerProfile lp;
    lp.name = stack.names[i];
    for (const Tensor& p : layer->parameters())
      if (owned.insert(p.impl()).second && p.requires_grad()) lp.param_bytes += alloc_bytes(p);
    for (const auto& [name, b] : layer->named_buffers()) lp.buffer_bytes += alloc_bytes(b);
    const Device dev = layer_device(*layer);
    const bool last = i + 1 == n;
    const Tensor yt = last && y.device() != dev ? y.to(dev) : y;
    // The last layer is measured with the loss (its backward starts there);
    // its output (the logits) is kept until the measuring is done, so it
    // counts among the saved bytes, and its size is the stage's output bytes.
    Tensor logits;
    Tensor out;
    const nn::LayerCost c = nn::measure_layer(
        lp.name,
        [&](const Tensor& h) {
          Tensor o = layer->forward(h);
          if (!last) return o;
          logits = o;
          return stack.loss(o, yt);
        },
        in.device() == dev ? in : in.detach().to(dev), dev, &out);
    lp.saved_bytes = c.saved_bytes;
    lp.output_bytes = last ? alloc_bytes(logits) : c.output_bytes;
    logits = Tensor();
    lp.forward_peak = c.forward_peak;
    lp.backward_peak = c.backward_peak;
    lp.forward_ms = c.forward_ms;
    lp.backward_ms = c.backward_ms;
    prof.layers.push_back(lp);
    in = out;
  }
  for (const auto& l : stack.layers)
    for (const Tensor& p : l->parameters())
      if (p.requires_grad()) p.set_grad(Tensor());
  gen.set_state(rng);
  return prof;
}

std::string Placement::str() const {
  std::ostringstream os;
  for (size_t k = 0; k < devices.size(); ++k)
    os << (k ? " | " : "") << devices[k].str() << " [" << bounds[k] << ", " << bounds[k + 1] << ")";
  return os.str();
}

Placement manual_placement(const std::vector<Device>& devices, const std::vector<int64_t>& bounds, int64_t num_layers) {
  SNUG_CHECK(!devices.empty(), ValueError, "manual_placement: no devices");
  SNUG_CHECK(bounds.size() == devices.size() + 1, ValueError, "manual_placement: ", devices.size(), " devices need ",
             devices.size() + 1, " bounds, got ", bounds.size());
  SNUG_CHECK(bounds.front() == 0 && bounds.back() == num_layers, ValueError,
             "manual_placement: the ranges must cover layers [0, ", num_layers, "), got [", bounds.front(), ", ",
             bounds.back(), ")");
  for (size_t k = 0; k + 1 < bounds.size(); ++k)
    SNUG_CHECK(bounds[k] < bounds[k + 1], ValueError, "manual_placement: stage ", k, " on ", devices[k].str(),
               " is empty or reversed: [", bounds[k], ", ", bounds[k + 1], ")");
  std::set<Device> seen(devices.begin(), devices.end());
  SNUG_CHECK(seen.size() == devices.size(), ValueError, "manual_placement: a device appears twice");
  Placement p;
  p.devices = devices;
  p.bounds = bounds;
  return p;
}

namespace {

struct StageCost {
  int64_t peak = 0;
  double ms = 0;
};

// NOTE [ Stage memory model ] for layers [a, b) as stage k of K.
StageCost stage_cost(const StackProfile& prof, const StepShape& sh, int64_t a, int64_t b, int64_t k, int64_t K) {
  const auto& ls = prof.layers;
  const int64_t M = sh.micro_batches;
  const int64_t n = sh.schedule == Schedule::gpipe ? M : std::min<int64_t>(K - k, M);
  int64_t params = 0, buffers = 0, S = 0, fwd = 0, bwd = 0;
  double ms = 0;
  for (int64_t i = a; i < b; ++i) {
    params += ls[i].param_bytes;
    buffers += ls[i].buffer_bytes;
    fwd = std::max(fwd, S + ls[i].forward_peak);
    S += ls[i].saved_bytes;
    bwd = std::max(bwd, ls[i].backward_peak);
    ms += (ls[i].forward_ms * (sh.checkpoint_stages ? 2 : 1) + ls[i].backward_ms) * static_cast<double>(M);
  }
  const int64_t in = a == 0 ? prof.input_bytes : ls[a - 1].output_bytes;
  const int64_t out = ls[b - 1].output_bytes;
  const int64_t held = sh.checkpoint_stages ? in + out : in + S;  // per micro-batch in flight
  const int64_t stat = params * (1 + prof.optimizer_slots) + buffers;
  const int64_t last_fwd = (n - 1) * held + in + fwd;
  const int64_t first_bwd = params + n * held + (sh.checkpoint_stages ? S : 0) + out + bwd;
  return {stat + std::max(last_fwd, first_bwd), ms};
}

struct Split {
  double score = std::numeric_limits<double>::infinity();
  std::vector<int64_t> bounds;
};

// Best split of all layers into K stages under `score(stage costs)`, where the
// score of a split is the max over its stages of stage_score(k, a, b) (lower
// is better). A small O(K N^2) dynamic program over (stages used, layers placed).
template <class StageScore>
Split best_split(int64_t N, int64_t K, StageScore stage_score) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(K + 1, std::vector<double>(N + 1, inf));
  std::vector<std::vector<int64_t>> from(K + 1, std::vector<int64_t>(N + 1, -1));
  best[0][0] = -inf;
  for (int64_t k = 1; k <= K; ++k)
    for (int64_t i = k; i <= N - (K - k); ++i)
      for (int64_t a = k - 1; a < i; ++a) {
        if (best[k - 1][a] == inf) continue;
        const double s = std::max(best[k - 1][a], stage_score(k - 1, a, i));
        if (s < best[k][i]) {
          best[k][i] = s;
          from[k][i] = a;
        }
      }
  Split sp;
  sp.score = best[K][N];
  if (sp.score == inf) return sp;
  sp.bounds.assign(K + 1, 0);
  sp.bounds[K] = N;
  for (int64_t k = K, i = N; k > 0; --k) {
    i = from[k][i];
    sp.bounds[k - 1] = i;
  }
  return sp;
}

}  // namespace

void predict(const StackProfile& prof, const StepShape& shape, Placement& p) {
  SNUG_CHECK(p.bounds.size() == p.devices.size() + 1 && p.bounds.back() == static_cast<int64_t>(prof.layers.size()),
             ValueError, "predict: the placement covers ", p.bounds.back(), " layers, the profile has ",
             prof.layers.size());
  SNUG_CHECK(shape.micro_batches >= 1, ValueError, "micro_batches must be >= 1, got ", shape.micro_batches);
  const int64_t K = p.num_stages();
  p.predicted_peak.assign(K, 0);
  p.stage_ms.assign(K, 0);
  for (int64_t k = 0; k < K; ++k) {
    StageCost c = stage_cost(prof, shape, p.bounds[k], p.bounds[k + 1], k, K);
    p.predicted_peak[k] = c.peak;
    p.stage_ms[k] = c.ms;
  }
}

Placement plan_placement(const StackProfile& prof, const std::vector<Device>& devices, Policy policy,
                         const StepShape& shape, std::vector<int64_t> caps) {
  SNUG_CHECK(policy != Policy::manual, ValueError,
             "plan_placement: a manual policy takes its ranges from manual_placement");
  SNUG_CHECK(!devices.empty(), ValueError, "plan_placement: no devices");
  SNUG_CHECK(shape.micro_batches >= 1, ValueError, "micro_batches must be >= 1, got ", shape.micro_batches);
  const auto N = static_cast<int64_t>(prof.layers.size());
  const auto K = static_cast<int64_t>(devices.size());
  SNUG_CHECK(K <= N, ValueError, "plan_placement: ", K, " devices but only ", N, " layers (every stage needs one)");
  if (caps.empty())
    for (const Device& d : devices) {
      const std::size_t c = memory::available(d);  // the capacity, or a GPU's free memory
      caps.push_back(c > static_cast<std::size_t>(std::numeric_limits<int64_t>::max())
                         ? std::numeric_limits<int64_t>::max()
                         : static_cast<int64_t>(c));
    }
  SNUG_CHECK(static_cast<int64_t>(caps.size()) == K, ValueError, "plan_placement: ", K, " devices but ", caps.size(),
             " capacities");
  const double inf = std::numeric_limits<double>::infinity();
  auto cost = [&](int64_t k, int64_t a, int64_t b) { return stage_cost(prof, shape, a, b, k, K); };
  Split sp;
  if (policy == Policy::fill) {
    // Greedy, in device order: each device ends its stage at the last layer
    // that still fits, leaving one layer for each device after it. A stage's
    // peak only grows with its layer range, so if any split fits, this one
    // does (each greedy boundary is at or past the same boundary of any
    // split that fits).
    sp.bounds.assign(static_cast<size_t>(K + 1), 0);
    sp.bounds[K] = N;
    sp.score = 0;
    for (int64_t k = 0; k < K && sp.score == 0; ++k) {
      const int64_t a = sp.bounds[k];
      int64_t b = k == K - 1 ? N : N - (K - 1 - k);
      while (b > a && cost(k, a, b).peak > caps[k]) --b;
      if (b == a || (k == K - 1 && b != N))
        sp.score = inf;
      else
        sp.bounds[k + 1] = b;
    }
  } else if (policy == Policy::balance_memory) {
    sp = best_split(N, K, [&](int64_t k, int64_t a, int64_t b) {
      const StageCost c = cost(k, a, b);
      return c.peak > caps[k] ? inf : static_cast<double>(c.peak) / static_cast<double>(caps[k]);
    });
  } else {
    sp = best_split(N, K, [&](int64_t k, int64_t a, int64_t b) {
      const StageCost c = cost(k, a, b);
      return c.peak > caps[k] ? inf : c.ms;
    });
  }
  if (sp.score == inf) {
    // Explain: the split that overshoots least, and by how much on which device.
    Split close = best_split(
        N, K, [&](int64_t k, int64_t a, int64_t b) { return static_cast<double>(cost(k, a, b).peak - caps[k]); });
    std::ostringstream os;
    os << "plan_placement: no split of " << N << " layers over ";
    for (int64_t k = 0; k < K; ++k) os << (k ? ", " : "") << devices[k].str() << " (" << mib(caps[k]) << ")";
    os << " fits a " << schedule_name(shape.schedule) << " step of " << shape.micro_batches
       << " micro-batch(es). Closest:";
    int64_t worst_over = 0, worst_k = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t a = close.bounds[k], b = close.bounds[k + 1];
      const int64_t peak = cost(k, a, b).peak, over = peak - caps[k];
      os << " " << devices[k].str() << " layers " << a << ".." << b - 1 << " ('" << prof.layers[a].name << "' to '"
         << prof.layers[b - 1].name << "') need " << mib(peak);
      if (over > 0) os << ", " << mib(over) << " (" << over << " bytes) over";
      os << ";";
      if (over > worst_over) {
        worst_over = over;
        worst_k = k;
      }
    }
    int64_t big = 0;
    for (int64_t i = 0; i < N; ++i)
      if (cost(0, i, i + 1).peak > cost(0, big, big + 1).peak) big = i;
    os << " the largest single layer, '" << prof.layers[big].name << "', needs " << mib(cost(0, big, big + 1).peak)
       << " on a device of its own. More devices, more micro-batches, per-stage checkpointing or a smaller batch help.";
    throw OutOfMemoryError(
        os.str(), static_cast<std::size_t>(cost(worst_k, close.bounds[worst_k], close.bounds[worst_k + 1]).peak),
        static_cast<std::size_t>(caps[worst_k]));
  }
  Placement p;
  p.devices = devices;
  p.bounds = sp.bounds;
  predict(prof, shape, p);
  return p;
}

void place(LayerStack& stack, const Placement& p) {
  SNUG_CHECK(p.bounds.size() == p.devices.size() + 1 && p.bounds.back() == static_cast<int64_t>(stack.size()),
             ValueError, "place: the placement covers ", p.bounds.empty() ? 0 : p.bounds.back(),
             " layers, the stack has ", stack.size());
  for (size_t k = 0; k < p.devices.size(); ++k)
    for (int64_t i = p.bounds[k]; i < p.bounds[k + 1]; ++i) stack.layers[static_cast<size_t>(i)]->to(p.devices[k]);
}

}  // namespace snug::parallel

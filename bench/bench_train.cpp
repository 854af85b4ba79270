// SPDX-License-Identifier: MIT
// snug-bench gpt|cnn|mlp: one timed training step of the W-GPT, W-CNN and W-MLP
// workloads exactly as docs/workloads.md defines them.
//
// A timed step = zero the gradients, forward, cross-entropy loss, backward,
// optimizer step. Batches are random (seeded) and prepared before the timer.
// Reported: the median over --steps timed steps after --warmup untimed ones.
//   snug-bench gpt [--steps 20] [--warmup 3] [--threads 2] [--seed 1337] [--amp none|bf16|f16] [--json]
//
// gpt --amp bf16|f16 runs the forward pass and the loss under autocast, as
// bench/peers/train_torch.py --amp does with torch.autocast("cpu"); the
// parameters, their gradients and AdamW stay f32, and f16 adds a GradScaler.
//
// Memory: each step begins with memory::mark_step (the planned allocation
// policy plans from the first). --memory-trace PATH records the allocator's
// history from before the model is made and writes it as a snapshot that
// `snug-bench replay` reads (with its step events); gpt --varlen gives each
// step a random sequence length (16 to 128, a multiple of 8): padded batches
// of varying length, the case caching allocators fragment on.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <snug/autograd/autocast.h>
#include <snug/core/cpu_isa.h>
#include <snug/core/generator.h>
#include <snug/memory/allocator.h>
#include <snug/memory/caching_allocator.h>
#include <snug/memory/planned_arena.h>
#include <snug/memory/stats.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/functional.h>
#include <snug/nn/fuse.h>
#include <snug/nn/models/cnn.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include "bench/bench.h"

namespace snug::bench {
namespace {

struct Batch {
  Tensor x, y;
};

struct StepResult {
  std::vector<double> ms;
  double loss_first = 0, loss_last = 0;
  int64_t params = 0;
  size_t peak_allocated = 0, peak_reserved = 0;
  size_t steady_peak_reserved = 0;   // over the steps after the first
  int64_t raw_allocs_after_step1 = 0;  // device allocations after the first step
};

struct Common {
  int64_t steps, warmup, threads, seed;
  Device device;      // where the model, its optimizer and the batches live
  std::string trace;  // --memory-trace: the snapshot to write ("" none)
};

// --device cpu|cuda|cuda:N (or a virtual cpu:N), checked as the programs check it (cli::device).
Flag device_flag() {
  Flag f = text_flag("device", "cpu", "run the steps on this device: cpu, cuda, cuda:N (or a virtual cpu:N)", "DEVICE");
  f.check = cli::device();
  return f;
}

// The flags of gpt, cnn and mlp (bench/ratios.py and the PyTorch peers take the same).
#define SNUG_TRAIN_FLAGS                                                                                          \
  int_flag("steps", 20, "timed steps (the median is reported)"), int_flag("warmup", 3, "untimed steps first", 0), \
      int_flag("threads", 2, "compute threads"),                                                                  \
      int_flag("seed", 1337, "seed of the weights and the random batches", 0), device_flag(),                        \
      text_flag("memory-trace", "", "record the allocator's history and write it as a snapshot here", "PATH")

// Made before the model, so a --memory-trace includes the parameters.
Common common(const Args& a) {
  Common c{a.get_int("steps"), a.get_int("warmup"), a.get_int("threads"), a.get_int("seed"), Device(a.get("device")),
           a.get("memory-trace")};
  set_num_threads(static_cast<int>(c.threads));
  manual_seed(static_cast<uint64_t>(c.seed));
  if (!c.trace.empty()) memory::record_history(true, 4000000);
  return c;
}

// One training step as the benchmarks time it: the batch copied to the
// device (part of the step, as in training), zero_grad, forward + loss under
// autocast to `amp` (none for f32), backward scaled by `scaler` (the identity
// unless enabled: f16), the optimizer step. Returns the loss (waiting for the
// step on any device).
template <class LossFn>
double train_step(const Common& c, nn::optim::Optimizer& opt, nn::amp::GradScaler& scaler, const Batch& hb,
                  LossFn loss_of, DType amp) {
  const Batch b{hb.x.to(c.device), hb.y.to(c.device)};
  opt.zero_grad();
  Tensor loss;
  {
    AutocastGuard ac(amp == DType::f32 ? DType::bf16 : amp, amp != DType::f32);
    loss = loss_of(b);
  }
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
  return loss.item();
}

// Runs warmup + steps training steps, one batch each, and times the last `steps`.
// `loss_of` is forward + loss for one batch.
// `amp` is the autocast dtype of forward + loss (f32: none); f16 scales the loss.
template <class LossFn>
StepResult run_steps(const Common& c, nn::Module& net, nn::optim::Optimizer& opt, const std::vector<Batch>& batches,
                     LossFn loss_of, DType amp = DType::f32) {
  nn::amp::GradScaler scaler({.enabled = amp == DType::f16});
  StepResult r;
  r.params = net.num_parameters();
  net.to(c.device);  // in place: the optimizer's handles stay, its state is made on the first step
  memory::reset_peak(c.device);
  size_t first_peak_allocated = 0, first_peak_reserved = 0;
  int64_t first_raw_allocs = 0;
  for (int64_t s = 0; s < c.warmup + c.steps; ++s) {
    const Batch& hb = batches[static_cast<size_t>(s)];  // made on the host (the same on every device)
    if (s == 1) {  // the first step has shaped the pool: what follows is the steady state
      const memory::DeviceStats st = memory::stats(c.device);
      first_peak_allocated = static_cast<size_t>(st.allocated_bytes.peak);
      first_peak_reserved = static_cast<size_t>(st.reserved_bytes.peak);
    }
    memory::mark_step(c.device);
    if (s == 1) {  // after the mark, where the planned policy makes its arena
      memory::reset_peak(c.device);
      first_raw_allocs = memory::stats(c.device).num_raw_allocs;
    }
    const double t0 = now_seconds();
    const double l = train_step(c, opt, scaler, hb, loss_of, amp);
    const double ms = (now_seconds() - t0) * 1e3;
    if (s == 0) r.loss_first = l;
    r.loss_last = l;
    if (s >= c.warmup) r.ms.push_back(ms);
  }
  const memory::DeviceStats st = memory::stats(c.device);
  r.peak_allocated = std::max(first_peak_allocated, static_cast<size_t>(st.allocated_bytes.peak));
  r.steady_peak_reserved = static_cast<size_t>(st.reserved_bytes.peak);
  r.peak_reserved = std::max(first_peak_reserved, r.steady_peak_reserved);
  r.raw_allocs_after_step1 = c.warmup + c.steps > 1 ? st.num_raw_allocs - first_raw_allocs : 0;
  if (!c.trace.empty()) {
    memory::dump_snapshot(c.device, c.trace);
    memory::record_history(false);
  }
  return r;
}

// gpt --amp X --paired-f32: the autocast step and the f32 step of two copies
// of the model (the same weights), taken by turns in one process, which of the
// two goes first alternating, so both see the same moments of a noisy machine
// (this VM's speed drifts by 20-40% over seconds; two processes a few seconds
// apart measured that drift as much as the steps). amp_over_f32 is the median
// of the per-turn ratios. Peaks are each model's own: reset before each step.
struct PairedResult {
  StepResult amp, f32;
  std::vector<double> ratios;  // amp ms / f32 ms, turn by turn
};
template <class LossFn>
PairedResult run_paired(const Common& c, nn::Module& amp_net, nn::optim::Optimizer& amp_opt, nn::Module& f32_net,
                        nn::optim::Optimizer& f32_opt, const std::vector<Batch>& batches, LossFn loss_of,
                        DType amp) {
  nn::amp::GradScaler amp_scaler({.enabled = amp == DType::f16}), f32_scaler({.enabled = false});
  PairedResult r;
  r.amp.params = amp_net.num_parameters();
  r.f32.params = f32_net.num_parameters();
  amp_net.to(c.device);
  f32_net.to(c.device);
  // One training step of net; returns its ms and stores its loss and peak.
  auto step = [&](nn::Module& net, nn::optim::Optimizer& opt, bool autocast, const Batch& hb, StepResult& out,
                  bool first) {
    memory::mark_step(c.device);
    memory::reset_peak(c.device);
    const double t0 = now_seconds();
    const double l = train_step(c, opt, autocast ? amp_scaler : f32_scaler, hb,
                                [&](const Batch& b) { return loss_of(net, b); }, autocast ? amp : DType::f32);
    const double ms = (now_seconds() - t0) * 1e3;
    if (first) out.loss_first = l;
    out.loss_last = l;
    const memory::DeviceStats st = memory::stats(c.device);
    out.peak_allocated = std::max(out.peak_allocated, static_cast<size_t>(st.allocated_bytes.peak));
    out.peak_reserved = std::max(out.peak_reserved, static_cast<size_t>(st.reserved_bytes.peak));
    return ms;
  };
  for (int64_t s = 0; s < c.warmup + c.steps; ++s) {
    const Batch& hb = batches[static_cast<size_t>(s)];
    double a_ms = 0, f_ms = 0;
    if (s % 2 == 0) {
      a_ms = step(amp_net, amp_opt, true, hb, r.amp, s == 0);
      f_ms = step(f32_net, f32_opt, false, hb, r.f32, s == 0);
    } else {
      f_ms = step(f32_net, f32_opt, false, hb, r.f32, false);
      a_ms = step(amp_net, amp_opt, true, hb, r.amp, false);
    }
    if (s < c.warmup) continue;
    r.amp.ms.push_back(a_ms);
    r.f32.ms.push_back(f_ms);
    r.ratios.push_back(a_ms / f_ms);
  }
  r.amp.steady_peak_reserved = r.amp.peak_reserved;
  r.f32.steady_peak_reserved = r.f32.peak_reserved;
  return r;
}

// The JSON fields --paired-f32 adds (none without it).
std::string paired_json(const PairedResult* p) {
  if (!p) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                ", \"paired_f32\": true, \"f32_ms_per_step\": %.3f, \"amp_over_f32\": %.4f, "
                "\"f32_peak_allocated_bytes\": %zu, \"f32_loss_last\": %.5f",
                median(p->f32.ms), median(p->ratios), p->f32.peak_allocated, p->f32.loss_last);
  return buf;
}

void report(const Args& a, const char* name, const Common& c, const StepResult& r, const char* rate_name,
            double items_per_step, const char* amp = "none", const PairedResult* paired = nullptr) {
  const double ms = median(r.ms);
  const double lo = *std::min_element(r.ms.begin(), r.ms.end()), hi = *std::max_element(r.ms.begin(), r.ms.end());
  const memory::AllocatorSettings as = memory::allocator_for(c.device).settings();
  const memory::PlannedStats ps = memory::allocator_for(c.device).planned_stats();
  if (a.json()) {
    std::printf(
        "{\"bench\": \"%s\", \"ms_per_step\": %.3f, \"ms_min\": %.3f, \"ms_max\": %.3f, \"%s\": %.1f, "
        "\"loss_first\": %.5f, \"loss_last\": %.5f, \"params\": %lld, \"peak_allocated_bytes\": %zu, "
        "\"peak_reserved_bytes\": %zu, \"steps\": %lld, \"warmup\": %lld, \"threads\": %lld, \"cpu_isa\": \"%s\", "
        "\"amp\": \"%s\", \"device\": \"%s\", \"alloc_policy\": \"%s\", \"steady_peak_reserved_bytes\": %zu, "
        "\"raw_allocs_after_step1\": %lld, \"planned_arena_bytes\": %zu, \"planned_peak_bytes\": %zu, "
        "\"planned_hits\": %lld, \"planned_held_hits\": %lld, \"planned_fallbacks\": %lld%s}\n",
        name, ms, lo, hi, rate_name, items_per_step / (ms / 1e3), r.loss_first, r.loss_last, (long long)r.params,
        r.peak_allocated, r.peak_reserved, (long long)c.steps, (long long)c.warmup, (long long)c.threads,
        cpu_isa().c_str(), amp, c.device.str().c_str(), memory::policy_name(as.policy), r.steady_peak_reserved,
        (long long)r.raw_allocs_after_step1, ps.arena_bytes, ps.planned_peak, (long long)ps.hits, (long long)ps.held_hits,
        (long long)ps.fallbacks, paired_json(paired).c_str());
  } else {
    std::printf(
        "%s: median %.2f ms/step (min %.2f, max %.2f) over %lld steps, %.0f %s, loss %.4f -> %.4f, "
        "%lld params, peak allocated %s, reserved %s\n",
        name, ms, lo, hi, (long long)c.steps, items_per_step / (ms / 1e3), rate_name, r.loss_first, r.loss_last,
        (long long)r.params, memory::format_bytes(r.peak_allocated).c_str(),
        memory::format_bytes(r.peak_reserved).c_str());
    if (paired)
      std::printf("f32 copy, by turns: median %.2f ms/step, loss %.4f -> %.4f, peak allocated %s; "
                  "autocast over f32 %.3f (median of %zu turns)\n",
                  median(paired->f32.ms), paired->f32.loss_first, paired->f32.loss_last,
                  memory::format_bytes(paired->f32.peak_allocated).c_str(), median(paired->ratios),
                  paired->ratios.size());
  }
}

// Uniform random class labels (n) in [0, classes), i64.
Tensor random_labels(int64_t n, int64_t classes) { return randint(0, classes, Shape{n}); }

}  // namespace

// W-GPT: vocab 65, block 128, 4 layers, 4 heads, width 128; batch 16;
// AdamW lr 3e-4, betas (0.9, 0.999), weight decay 0.01 on every parameter.
SNUG_BENCH(gpt, "W-GPT training step (docs/workloads.md): median ms/step, tokens/s, peak memory", SNUG_TRAIN_FLAGS,
           choice_flag("amp", "none", {"none", "bf16", "f16"},
                       "autocast the forward pass and loss to bf16 or f16 (f16 with loss scaling)"),
           switch_flag("varlen", "a random sequence length per step (16..128, multiples of 8)"),
           switch_flag("paired-f32",
                       "with --amp: also an f32 copy of the model, its steps taken by turns with the autocast ones "
                       "in this process; adds f32_ms_per_step and amp_over_f32 (the median per-turn ratio)")) {
  const std::string amp = args.get("amp");
  const bool paired = args.has("paired-f32");
  if (paired && amp == "none") cli::fail("--paired-f32 needs --amp bf16 or --amp f16");
  if (paired && !args.get("memory-trace").empty()) cli::fail("--paired-f32 takes no --memory-trace (two models share the pool)");
  const Common c = common(args);
  const DType amp_dt = amp == "bf16" ? DType::bf16 : amp == "f16" ? DType::f16 : DType::f32;
  const int64_t B = 16, T = 128, V = 65;
  nn::models::GPT net(nn::models::GPTConfig{});
  nn::optim::AdamW opt(net.parameters(), {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  std::vector<Batch> batches;
  Generator lengths(static_cast<uint64_t>(c.seed) + 1);
  for (int64_t s = 0; s < c.warmup + c.steps; ++s) {
    const int64_t t = args.has("varlen") ? 8 * randint(2, 17, Shape{1}, DType::i64, &lengths).item<int64_t>() : T;
    Tensor seq = randint(0, V, Shape{B, t + 1});  // (B, t+1)
    batches.push_back({seq.narrow(1, 0, t).contiguous(), seq.narrow(1, 1, t).contiguous()});
  }
  if (paired) {
    manual_seed(static_cast<uint64_t>(c.seed));  // the same weights as the autocast model's
    nn::models::GPT f32_net(nn::models::GPTConfig{});
    nn::optim::AdamW f32_opt(f32_net.parameters(),
                             {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
    const PairedResult p = run_paired(c, net, opt, f32_net, f32_opt, batches,
                                      [](nn::Module& m, const Batch& b) {
                                        return static_cast<nn::models::GPT&>(m).loss(b.x, b.y);
                                      },
                                      amp_dt);
    report(args, "gpt", c, p.amp, "tokens_per_s", double(B * T), amp.c_str(), &p);
    return 0;
  }
  StepResult r = run_steps(c, net, opt, batches, [&](const Batch& b) { return net.loss(b.x, b.y); }, amp_dt);
  report(args, "gpt", c, r, "tokens_per_s", double(B * T), amp.c_str());  // --varlen: tokens of a full-length step
  return 0;
}

namespace {
// A 10-class classifier step (W-CNN, W-MLP): SGD lr 0.01 momentum 0.9 on
// random inputs of `input` shape (batch first) and random labels.
template <class MakeNet>
int classifier_bench(const Args& args, const char* name, MakeNet make_net, const Shape& input) {
  const Common c = common(args);
  std::shared_ptr<nn::Module> net = make_net();
  nn::fuse(*net);  // Conv2d + ReLU, Linear + ReLU (+ Linear) as fused layers (nn/fuse.h)
  const int64_t B = input[0];
  nn::optim::SGD opt(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  std::vector<Batch> batches;
  for (int64_t s = 0; s < c.warmup + c.steps; ++s) batches.push_back({randn(input), random_labels(B, 10)});
  StepResult r = run_steps(c, *net, opt, batches,
                           [&](const Batch& b) { return nn::functional::cross_entropy(net->forward(b.x), b.y); });
  report(args, name, c, r, "samples_per_s", double(B));
  return 0;
}
}  // namespace

// W-CNN: 1x28x28 inputs, batch 64.
SNUG_BENCH(cnn, "W-CNN training step (docs/workloads.md): median ms/step, samples/s, peak memory", SNUG_TRAIN_FLAGS) {
  return classifier_bench(args, "cnn", [] { return nn::models::make_wcnn(); }, Shape{64, 1, 28, 28});
}

// W-MLP: 784-1024-1024-10, batch 128.
SNUG_BENCH(mlp, "W-MLP training step (docs/workloads.md): median ms/step, samples/s, peak memory", SNUG_TRAIN_FLAGS) {
  return classifier_bench(args, "mlp", [] { return nn::models::make_wmlp(); }, Shape{128, 784});
}

}  // namespace snug::bench

// SPDX-License-Identifier: MIT
// Where the memory goes: the pipeline placement over --devices
// (docs/placement.md), the --memory-budget check and planner
// (docs/checkpointing.md), and the --profile window.
#include <cstdio>

#include <snug/autograd/autocast.h>
#include <snug/memory/stats.h>
#include <snug/nn/planner.h>

#include "charlm/charlm.h"

namespace charlm {

void place_model(parallel::LayerStack& stack, const Corpus& corpus, const Setup& st, bool checkpoint_stages,
                 std::optional<parallel::Pipeline>& pipe) {
  Generator sample_gen(st.seed + 4000);
  auto [sx, sy] = get_batch(corpus.train, st.B / st.micro_batches, st.T, sample_gen);
  const parallel::StepShape shape{
      .micro_batches = st.micro_batches, .schedule = st.schedule, .checkpoint_stages = checkpoint_stages};
  const parallel::StackProfile sp = parallel::profile_stack(stack, sx, sy, /*optimizer_slots=*/2);
  parallel::Placement pl = parallel::plan_placement(sp, st.devices, st.placement, shape);
  parallel::place(stack, pl);
  pipe.emplace(stack, pl,
               parallel::PipelineOptions{
                   .micro_batches = st.micro_batches,
                   .schedule = st.schedule,
                   .checkpoint_stages = checkpoint_stages,
                   .threads_per_stage = std::max(1, get_num_threads() / static_cast<int>(st.devices.size()))});
  std::fprintf(stderr, "placement (%s, %lld micro-batches): %s\n", parallel::schedule_name(st.schedule),
               (long long)st.micro_batches, pl.str().c_str());
  for (size_t k = 0; k < st.devices.size(); ++k)
    std::fprintf(stderr, "  %s: predicted peak %s\n", st.devices[k].str().c_str(),
                 memory::format_bytes(static_cast<std::size_t>(pl.predicted_peak[k])).c_str());
}

// One measuring pass on a sample micro-batch (from its own generator, so
// training sees the same batches whatever the flags), before the first step.
MemoryPlan plan_memory(nn::models::GPT& model, const Corpus& corpus, nn::optim::Optimizer& opt, const Setup& st,
                       const std::string& ckpt_mode) {
  MemoryPlan out;
  if (st.budget <= 0) {
    if (st.lead && !model.checkpointing.empty())
      std::fprintf(stderr, "checkpointing: %s\n", model.checkpointing.str().c_str());
    return out;
  }
  const int64_t budget = st.budget, accum = st.accum;
  Generator sample_gen(st.seed + 4000);
  auto [sx, sy] = get_batch(corpus.train, st.micro_B, st.T, sample_gen, st.device);
  // Measured as training will run: under the step's autocast scope (its
  // activations' dtypes and the cached 16-bit weight casts), with the
  // optimizer's real state (8-bit moments with --optim adamw8bit).
  nn::ChainProfile prof;
  {
    AutocastGuard ac(st.amp.value_or(DType::bf16), st.amp.has_value());
    prof = nn::profile_chain(model.chain(sx, sy), st.device, opt, {.micro_batches = static_cast<int>(accum)});
  }
  // A budget below what a step needs is an impossible request (exit 2).
  try {
    if (ckpt_mode == "auto") {
      nn::PlanResult r = nn::plan_checkpoints(prof, budget);
      model.checkpointing = r.plan;
    } else {
      nn::check_fits(prof, model.checkpointing, budget);
    }
  } catch (const OutOfMemoryError& e) {
    cli::fail("--memory-budget ", memory::format_bytes(budget), " is too small for this model and --batch ",
              st.micro_B * accum, (accum > 1 ? str(" --accum ", accum) : std::string()), ": ", e.what());
  }
  nn::PlanCost pc = nn::evaluate_plan(prof, model.checkpointing);
  out.predicted_peak = pc.total_peak;
  out.predicted_recompute_ms = pc.recompute_ms * static_cast<double>(accum);
  out.minimum_budget = nn::minimum_budget(prof);
  if (st.lead) std::fprintf(stderr, "measured on a batch of %lld:\n%s", (long long)st.micro_B, prof.table().c_str());
  if (st.lead)
    std::fprintf(stderr,
                 "memory budget %s (minimum %s): plan %s\n%spredicted peak %s, recomputation %.1f ms per step\n",
                 memory::format_bytes(budget).c_str(), memory::format_bytes(out.minimum_budget).c_str(),
                 model.checkpointing.str().c_str(), nn::estimate_memory(prof, model.checkpointing).table().c_str(),
                 memory::format_bytes(pc.total_peak).c_str(), out.predicted_recompute_ms);
  return out;
}

StepProfiler::StepProfiler(std::string path, int64_t from, int64_t to, int64_t steps, bool tty)
    : path_(std::move(path)), from_(from), to_(to), steps_(steps), tty_(tty) {}

void StepProfiler::before_step(int64_t step) {
  if (!path_.empty() && step == from_) prof_ = std::make_unique<profiler::Profile>();
}

void StepProfiler::after_step(int64_t done) {
  if (!prof_ || (done != to_ && done != steps_)) return;
  prof_->stop();
  prof_->write_chrome_trace(path_);
  std::fprintf(stderr, "%sprofile of %lld steps (trace in %s):\n%s", tty_ ? "\n" : "", (long long)(done - from_),
               path_.c_str(), prof_->summary().c_str());
  prof_.reset();
}

}  // namespace charlm

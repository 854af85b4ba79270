// SPDX-License-Identifier: MIT
// The model as it trains (cpu:0, or pipelined over --devices) and one training
// step: the gradients of one batch (pipelined micro-batches, or accumulated
// ones under autocast and DataParallel::no_sync), the loss scaler, the
// optimizer and the schedule; then what the report needs from each step.
#include <cmath>
#include <cstdio>

#include <snug/autograd/autocast.h>
#include <snug/autograd/checkpoint.h>
#include <snug/memory/allocator.h>

#include "charlm/charlm.h"

namespace charlm {

TrainModel::TrainModel(const nn::models::GPTConfig& cfg, const Flags& fl, const Corpus& corpus, const Setup& st)
    : gpt([&] {
        memory::TagScope tag(memory::Tag::parameter);  // the timeline's "parameter" colour
        auto g = std::make_unique<nn::models::GPT>(cfg);  // made on the host: the same weights on every device
        if (!st.placed && st.device != kCPU) g->to(st.device);
        if (st.half_params) g->to(*st.amp);  // the optimizer keeps f32 masters (NOTE [ Master weights ])
        return g;
      }()),
      stack(parallel::gpt_stack(*gpt)) {
  if (fl.checkpoint == "sqrt") gpt->checkpointing = nn::sqrt_plan(cfg.layers);
  if (st.placed) place_model(stack, corpus, st, fl.checkpoint == "stage", pipe);
  if (st.placed)
    logits_of = [this](const Tensor& t) { return parallel::run_stack(stack, t); };
  else  // tokens made on the host (evaluation, sampling) go to the model's device
    logits_of = [this, d = st.device](const Tensor& t) { return gpt->forward(t.to(d)); };
}

Trainer::Trainer(TrainModel& m, nn::optim::Optimizer& opt, nn::optim::LRScheduler& sched,
                 nn::amp::GradScaler& scaler, distributed::DataParallel* dp, distributed::ProcessGroup& pg,
                 const Setup& st, bool tty)
    : m_(m), opt_(opt), sched_(sched), scaler_(scaler), dp_(dp), pg_(pg), st_(st), tty_(tty),
      step_peaks(st.devices.size(), 0) {}

double Trainer::step(const Tensor& x, const Tensor& y, int64_t step) {
  autograd::reset_recompute_stats();
  opt_.zero_grad();
  const double loss_scale = scaler_.get_scale();
  double loss;
  if (m_.pipe) {
    loss = m_.pipe->step(x, y);  // forward + backward of every micro-batch, over the devices
  } else {
    // One autocast scope per step: the weights are cast once, even with --accum.
    AutocastGuard ac(st_.amp.value_or(DType::bf16), st_.amp.has_value());
    std::optional<distributed::DataParallel::NoSync> no_sync;
    auto micro_loss = [&](const nn::MicroBatch& mb) {
      // Micro-steps but the last only accumulate; the last one's backward
      // averages the sum across ranks (DataParallel::no_sync).
      no_sync.reset();
      if (dp_ && !mb.last) no_sync.emplace(dp_->no_sync());
      memory::TagScope tag(memory::Tag::activation);
      return m_.gpt->loss(mb.x, mb.y);
    };
    auto scale = [&](const Tensor& l) { return scaler_.scale(l); };  // f16: dynamic loss scaling
    loss = nn::accumulate_gradients(x, y, st_.accum, micro_loss, scale) / loss_scale;
  }
  if (!scaler_.step(opt_)) {  // an inf or NaN gradient: the step is skipped and the scale halves
    ++skipped_steps;
    if (st_.lead)
      std::fprintf(stderr, "%sstep %lld skipped: %s\n", tty_ ? "\n" : "", (long long)(step + 1),
                   scaler_.overflow_report().c_str());
  }
  scaler_.update();
  sched_.step();
  return loss;
}

void Trainer::after_step(nn::StepInfo& i) {
  recompute_ms.push_back(autograd::recompute_stats().ms);
  if (dp_) {  // the job's loss: the mean of the ranks' batch losses
    Tensor l = from_vector(std::vector<double>{i.loss});
    pg_.all_reduce(l, distributed::ReduceOp::avg);
    i.loss = l.item();
  }
  // Training-step peaks of the placement's devices (evaluation, which runs
  // the whole batch without a pipeline, is left out: the plan is for steps).
  for (size_t k = 0; k < st_.devices.size(); ++k)
    step_peaks[k] = std::max(step_peaks[k], memory::peak_allocated(st_.devices[k]));
  SNUG_CHECK(std::isfinite(i.loss), ValueError, "charlm: training loss became ", i.loss, " at step ", i.step - 1);
}

}  // namespace charlm

// SPDX-License-Identifier: MIT
// charlm's start-up line and its final JSON line (one object; docs/programs.md
// lists its fields).
#include <algorithm>
#include <cstdio>

#include <snug/core/cpu_isa.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>

#include "charlm/charlm.h"

namespace charlm {

void print_banner(nn::models::GPT& model, const Corpus& corpus, const Setup& st, distributed::ProcessGroup& pg) {
  const std::string ranks =
      st.world > 1 ? str(", ", st.world, " ranks (", pg.backend(), "), batch ", st.B, " per rank") : "";
  std::fprintf(stderr, "charlm: %s, %lld params, vocab %lld, train %zu / val %zu chars, %d threads%s\n",
               model.repr().c_str(), (long long)model.num_parameters(), (long long)corpus.itos.size(),
               corpus.train.size(), corpus.val.size(), get_num_threads(), ranks.c_str());
}

void print_json(const Results& r, const Setup& st, nn::models::GPT& model, const nn::optim::Optimizer& opt,
                const parallel::Pipeline* pipe, const nn::amp::GradScaler& scaler,
                const distributed::DataParallel* dp) {
  const bool placed = st.placed;
  const std::vector<Device>& devices = st.devices;
  const int64_t B = st.B, T = st.T, world = st.world;
  const double med = r.median_ms;
  int64_t ckpt_layers = 0;
  for (const auto& sg : model.checkpointing.segments) ckpt_layers += sg.checkpoint ? sg.end - sg.begin : 0;
  const Device dev = placed ? kCPU : st.device;  // the one device's memory (cpu:0's beside a pipeline)
  const memory::DeviceStats ds = memory::stats(dev);
  std::size_t param_bytes = 0;  // halved by --half-params
  for (const Tensor& p : model.parameters()) param_bytes += p.nbytes();
  // {"cpu:1": bytes, ...}: measured peaks (or the plan's predictions) of the
  // devices the model ran on.
  auto per_device = [&](bool predicted) {
    std::string out = "{";
    const std::vector<Device> ds_list = placed ? devices : std::vector<Device>{dev};
    for (size_t k = 0; k < ds_list.size(); ++k) {
      const long long v = predicted ? (pipe ? (long long)pipe->placement().predicted_peak[k] : -1)
                                    : (long long)(placed ? r.step_peaks[k] : memory::peak_allocated(ds_list[k]));
      out += str(k ? ", " : "", "\"", ds_list[k].str(), "\": ", v);
    }
    return out + "}";
  };
  const int act = static_cast<int>(memory::Tag::activation);
  // {"parameter": bytes, ...}: what each tag held at the device's peak.
  std::string at_peak = "{";
  for (int t = 0; t < memory::kNumTags; ++t)
    at_peak += str(t ? ", " : "", "\"", memory::tag_name(memory::Tag(t)), "\": ", ds.tag_at_peak[size_t(t)]);
  at_peak += "}";
  std::printf(
      "{\"val_loss\": %.6f, \"train_loss\": %.6f, \"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"params\": %lld, "
      "\"peak_allocated_bytes\": %zu, \"peak_reserved_bytes\": %zu, \"steps\": %lld, \"threads\": %d, "
      "\"checkpoint\": \"%s\", \"accum\": %lld, \"memory_budget\": %lld, \"peak_activation_bytes\": %lld, "
      "\"activation_bytes_at_peak\": %lld, \"recompute_ms_per_step\": %.3f, \"predicted_peak_bytes\": %lld, "
      "\"predicted_recompute_ms\": %.3f, \"minimum_budget_bytes\": %lld, \"checkpointed_segments\": %lld, "
      "\"checkpointed_layers\": %lld, \"devices\": %lld, \"micro_batches\": %lld, \"schedule\": \"%s\", "
      "\"peak_allocated_bytes_per_device\": %s, \"predicted_peak_bytes_per_device\": %s, \"optim\": \"%s\", "
      "\"optimizer_state_bytes\": %zu, \"amp\": \"%s\", \"loss_scale\": %.1f, \"skipped_steps\": %lld, "
      "\"world_size\": %d, \"dp_wait_ms_per_step\": %.3f, \"cpu_isa\": \"%s\", \"device\": \"%s\", "
      "\"param_bytes\": %zu, \"half_params\": %s, \"bytes_at_peak_by_tag\": %s}\n",
      r.val_loss, r.train_loss, med, med > 0 ? double(B * T * world) / (med / 1000.0) : 0.0,
      (long long)model.num_parameters(), memory::peak_allocated(dev), static_cast<size_t>(ds.reserved_bytes.peak),
      (long long)r.steps, get_num_threads(), r.checkpoint.c_str(), (long long)st.accum, (long long)st.budget,
      (long long)ds.tag_bytes[act].peak, (long long)ds.tag_at_peak[act], r.median_recompute_ms,
      (long long)r.plan.predicted_peak, r.plan.predicted_recompute_ms, (long long)r.plan.minimum_budget,
      (long long)model.checkpointing.num_checkpointed(), (long long)ckpt_layers,
      (long long)std::max<size_t>(devices.size(), 1), (long long)(placed ? st.micro_batches : st.accum),
      placed ? parallel::schedule_name(st.schedule) : "none", per_device(false).c_str(), per_device(true).c_str(),
      r.optim.c_str(), opt.state_bytes(), st.amp ? dtype_name(*st.amp) : "none", scaler.get_scale(),
      (long long)r.skipped_steps, st.world,
      dp ? dp->stats().wait_ms / double(std::max<int64_t>(dp->stats().syncs, 1)) : 0.0, cpu_isa().c_str(),
      placed ? "pipeline" : st.device.str().c_str(), param_bytes, st.half_params ? "true" : "false", at_peak.c_str());
}

}  // namespace charlm

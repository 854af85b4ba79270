// SPDX-License-Identifier: MIT
#include <snug/nn/training_state.h>

#include <optional>

#include <snug/core/safetensors.h>

namespace snug::nn {

namespace {
const char* kFormat = "snug.checkpoint.v1";

uint64_t parse_u64(const std::map<std::string, std::string>& md, const std::string& key, const std::string& path) {
  auto it = md.find(key);
  SNUG_CHECK(it != md.end(), IOError, "load_training_state: ", path, ": metadata has no \"", key, "\"");
  const std::string& s = it->second;
  bool ok = !s.empty() && s.size() <= 20;
  for (char c : s) ok = ok && c >= '0' && c <= '9';
  SNUG_CHECK(ok, IOError, "load_training_state: ", path, ": metadata \"", key, "\" is not an unsigned integer: \"", s,
             "\"");
  return std::stoull(s);
}
}  // namespace

void save_training_state(const std::string& path, const TrainingStateParts& parts, int64_t step,
                         const std::map<std::string, std::string>& extra) {
  SNUG_CHECK(parts.model != nullptr, ValueError, "save_training_state: no model given");
  TensorMap tensors;
  for (auto& [n, t] : parts.model->state_dict()) tensors.emplace_back("model." + n, t);
  if (parts.optimizer)
    for (auto& [n, t] : parts.optimizer->state_dict()) tensors.emplace_back("optim." + n, t);
  if (parts.scaler)
    for (auto& [n, t] : parts.scaler->state_dict()) tensors.emplace_back("scaler." + n, t);
  std::map<std::string, std::string> md = extra;
  md["format"] = kFormat;
  md["step"] = std::to_string(step);
  if (parts.scheduler) md["scheduler.step"] = std::to_string(parts.scheduler->last_step());
  for (auto& [name, g] : parts.generators) {
    PhiloxState st = g->get_state();
    md["rng." + name + ".seed"] = std::to_string(st.seed);
    md["rng." + name + ".offset"] = std::to_string(st.offset);
  }
  save_safetensors(path, tensors, md);
}

namespace {
void check_format(const SafetensorsFile& f, const std::string& path, const char* who) {
  auto fmt = f.metadata.find("format");
  SNUG_CHECK(fmt != f.metadata.end() && fmt->second == kFormat, IOError, who, ": ", path,
             " is not a snug checkpoint (metadata \"format\" is ",
             fmt == f.metadata.end() ? std::string("missing") : "\"" + fmt->second + "\"", ", expected \"", kFormat,
             "\")");
}
}  // namespace

std::map<std::string, std::string> read_training_state_metadata(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  check_format(f, path, "read_training_state_metadata");
  return std::move(f.metadata);
}

LoadedTrainingState load_training_state(const std::string& path, const TrainingStateParts& parts) {
  SNUG_CHECK(parts.model != nullptr, ValueError, "load_training_state: no model given");
  SafetensorsFile f = load_safetensors(path);
  check_format(f, path, "load_training_state");
  NamedTensors model_sd, optim_sd, scaler_sd;
  for (auto& [n, t] : f.tensors) {
    if (n.rfind("model.", 0) == 0)
      model_sd.emplace_back(n.substr(6), t);
    else if (n.rfind("optim.", 0) == 0)
      optim_sd.emplace_back(n.substr(6), t);
    else if (n.rfind("scaler.", 0) == 0)
      scaler_sd.emplace_back(n.substr(7), t);
    else
      throw IOError(str("load_training_state: ", path, ": unexpected tensor \"", n,
                        "\" (expected model.*, optim.* or scaler.*)"));
  }
  LoadedTrainingState out;
  out.metadata = f.metadata;
  out.step = static_cast<int64_t>(parse_u64(f.metadata, "step", path));
  // Check everything before modifying anything.
  uint64_t sched_step = parts.scheduler ? parse_u64(f.metadata, "scheduler.step", path) : 0;
  std::vector<PhiloxState> rng;
  for (auto& [name, g] : parts.generators)
    rng.push_back(
        {parse_u64(f.metadata, "rng." + name + ".seed", path), parse_u64(f.metadata, "rng." + name + ".offset", path)});
  SNUG_CHECK(!parts.scaler || !scaler_sd.empty(), IOError, "load_training_state: ", path,
             " holds no GradScaler state but a scaler was given");
  std::optional<amp::GradScaler> scaler_new;
  if (parts.scaler) {
    scaler_new.emplace(*parts.scaler);
    try {
      scaler_new->load_state_dict(scaler_sd);
    } catch (const Error& e) {
      throw IOError(str("load_training_state: ", path, ": bad GradScaler state: ", e.what()));
    }
  }
  SNUG_CHECK(!parts.optimizer || !optim_sd.empty(), IOError, "load_training_state: ", path,
             " holds no optimizer state but an optimizer was given");
  // Fix: a checkpoint whose optimizer state did not fit the optimizer threw
  // only after the model had been overwritten, leaving a half-loaded run.
  // The model's load is strict (checks before copying) and the optimizer's is
  // all-or-nothing, so keeping a copy of the model's values to put back if
  // the optimizer refuses makes the whole load all-or-nothing.
  NamedTensors model_backup;
  if (parts.optimizer)
    for (auto& [n, t] : parts.model->state_dict()) model_backup.emplace_back(n, t.clone());
  parts.model->load_state_dict(model_sd, /*strict=*/true);
  if (parts.optimizer) {
    try {
      parts.optimizer->load_state_dict(optim_sd);
    } catch (...) {
      parts.model->load_state_dict(model_backup, /*strict=*/true);
      throw;
    }
  }
  if (parts.scheduler) parts.scheduler->set_last_step(static_cast<int64_t>(sched_step));
  if (parts.scaler) *parts.scaler = *scaler_new;
  for (size_t i = 0; i < parts.generators.size(); ++i) parts.generators[i].second->set_state(rng[i]);
  return out;
}

}  // namespace snug::nn

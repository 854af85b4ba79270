// SPDX-License-Identifier: MIT
// Training state files (what PyTorch users save with torch.save as a
// "checkpoint"; in snug, "checkpoint" means recomputation, autograd/checkpoint.h):
// model, optimizer, scheduler, step and RNG states in
// one safetensors file, with the rest as string metadata in its header.
//
// Keys: "model.<name>" (Module::state_dict), "optim.<key>"
// (Optimizer::state_dict), "scaler.<key>" (GradScaler::state_dict; a file
// with scaler state loads without a scaler too, the state is then unused). Metadata: "format" = "snug.checkpoint.v1",
// "step", "scheduler.step", "rng.<name>.seed" / "rng.<name>.offset" (decimal
// u64), and the caller's extra entries, among them the model's configuration
// when the caller records it (GPTConfig::to_metadata: "gpt.layers", ...), so
// a program can build the model from the file before loading it
// (read_training_state_metadata). Written atomically (temporary file,
// fsync, rename): a crash or error mid-save leaves the previous file intact.
// Resuming restores everything a step depends on, so a resumed run equals an
// uninterrupted one bit for bit on the CPU.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <snug/core/generator.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/module.h>
#include <snug/nn/optim/optimizer.h>

namespace snug::nn {

struct TrainingStateParts {
  Module* model = nullptr;                                     // required
  optim::Optimizer* optimizer = nullptr;                       // optional
  optim::LRScheduler* scheduler = nullptr;                     // optional
  std::vector<std::pair<std::string, Generator*>> generators;  // e.g. {"default", &default_generator()}
  amp::GradScaler* scaler = nullptr;                           // optional (mixed precision)
};

void save_training_state(const std::string& path, const TrainingStateParts& parts, int64_t step,
                         const std::map<std::string, std::string>& extra = {});

struct LoadedTrainingState {
  int64_t step = 0;
  std::map<std::string, std::string> metadata;  // everything in the header
};
// Restores every part given (strictly: a missing, unexpected or mis-shaped
// tensor is an error listing the keys). Throws IOError for a file that is not
// a snug checkpoint or is corrupt, naming the file.
LoadedTrainingState load_training_state(const std::string& path, const TrainingStateParts& parts);

// The metadata of a checkpoint, restoring nothing: what a program reads to
// build the model (and optimizer) the file was saved from before calling
// load_training_state. Reads and validates the whole file; the same IOErrors as
// load_training_state for a file that is not a snug checkpoint or is corrupt.
std::map<std::string, std::string> read_training_state_metadata(const std::string& path);

}  // namespace snug::nn

// SPDX-License-Identifier: MIT
// libFuzzer target: the training-checkpoint reader (nn/training_state.h): its
// metadata (step, generator states, optimizer and scheduler hyper-parameters)
// and the strict layout check, on a small model with an optimizer, a
// scheduler and a generator.
#include <cstdint>
#include <memory>
#include <string>

#include <snug/base/error.h>
#include <snug/core/generator.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/training_state.h>
#include "fuzz_util.h"

using namespace snug;

namespace {
struct Parts {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::LayerNorm>(4)});
  nn::optim::AdamW opt{model->parameters(), {.lr = 1e-3}};
  nn::optim::WarmupCosine sched{opt, 2, 10, 0.1};
  Generator gen{7};
  nn::TrainingStateParts parts() { return {model.get(), &opt, &sched, {{"default", &gen}}}; }
};
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Parts p;
  // One step, so the optimizer has state to save.
  p.model->forward(ones({2, 3})).sum().backward();
  p.opt.step();
  p.sched.step();
  const std::string path = fuzz::scratch_file(nullptr, 0, ".seed");
  nn::save_training_state(path, p.parts(), 1, {{"note", "seed"}});
  fuzz::write_seed("adamw_step1.ckpt", fuzz::read_all(path));
  Parts q;
  nn::save_training_state(path, {q.model.get(), nullptr, nullptr, {}}, 0);
  fuzz::write_seed("model_only.ckpt", fuzz::read_all(path));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Parts p;  // built once: loading into it is what is fuzzed
  const std::string& path = fuzz::scratch_file(data, size, ".ckpt");
  try {
    nn::load_training_state(path, p.parts());
  } catch (const Error&) {
  }
  return 0;
}

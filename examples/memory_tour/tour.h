// SPDX-License-Identifier: MIT
// The pieces of the memory tour (main.cpp reads them top to bottom):
// strategies.cpp  the data, the model from fixed weights, and one run of each
//                 strategy with its memory measured
// chart.cpp       the bar chart of the peaks (examples/common/picture.h draws and writes it)
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <snug/memory/allocator.h>
#include <snug/nn/models/gpt.h>

#include "common/picture.h"

namespace memory_tour {

struct Flags {
  std::string data, chart, snapshot, device = "cpu";  // device: where the strategies run (int8: the CPU)
  int64_t steps = 8, batch = 16, block = 128, layers = 4, heads = 4, embd = 128, accum = 4;
  int64_t eval_batches = 8, threads = 2, seed = 1337;
  int64_t snapshot_steps = 0;  // with --snapshot: record the first N steps (passes) of each strategy; 0: all
  double lr = 1e-3, prune = 0.5;
  bool json = false;
};

// The allocator's history holds this many events at most (--snapshot).
inline constexpr std::size_t kHistoryEntries = std::size_t(1) << 22;

// Weights kept outside the allocator (plain vectors), so that holding the
// initial and the trained weights between strategies counts in no peak.
using Weights = std::map<std::string, std::vector<float>>;

// Windows of the text as plain token vectors: x (B*T) and y (B*T), y shifted by one.
struct Batch {
  std::vector<int64_t> x, y;
};

// Everything the strategies share: the same weights, the same batches.
struct Tour {
  Flags f;
  snug::nn::models::GPTConfig cfg;
  std::vector<Batch> train, val;  // f.steps training batches; f.eval_batches validation batches
  Weights init, trained;          // trained: baseline's weights after its steps
};

// The corpus read, cut 90/10, and the batches drawn from --seed.
Tour make_tour(const Flags& f);

// What one strategy measured (memory over its run, the model already built).
struct Result {
  std::string name, what;
  int64_t steps = 0;        // training steps, or evaluation passes
  double step_ms = 0;       // median
  double loss = 0;          // validation loss after the run (or of the run, for evaluations)
  double train_loss = -1;   // the last training step's loss (-1: an evaluation)
  int64_t peak_allocated = 0, peak_reserved = 0;
  int64_t params = 0, model_bytes = 0;  // parameters left in float; the model's bytes (int8 weights included)
  std::array<int64_t, snug::memory::kNumTags> tag_peak{};
};

// The strategies, in the order of the table; each starts from tour.init
// (no_grad, pruned and int8 from tour.trained, which baseline fills).
std::vector<Result> run_all(Tour& tour);

// ---- chart.cpp ----------------------------------------------------------------

// The peaks of each strategy as a bar chart (write it with picture::write_png).
picture::Image bar_chart(const std::vector<Result>& results);

}  // namespace memory_tour

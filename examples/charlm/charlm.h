// SPDX-License-Identifier: MIT
// The pieces of the charlm example (main.cpp reads them top to bottom):
// flags.cpp   the command line and the checks of what goes together
// corpus.cpp  the text, its vocabulary and the training / validation batches
// model.cpp   the model's shape (NOTE [ charlm resume ]), the optimizer,
//             evaluation and sampling
// memory.cpp  the pipeline placement and the --memory-budget check / planner
// step.cpp    the model as it trains, and one training step
// report.cpp  the start-up line and the final JSON line
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <snug/core/generator.h>
#include <snug/core/profiler.h>
#include <snug/data/dataloader.h>
#include <snug/data/dataset.h>
#include <snug/distributed/data_parallel.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/train_loop.h>
#include <snug/parallel/layer_stack.h>
#include <snug/parallel/pipeline.h>
#include <snug/parallel/placement.h>

#include "common/cli.h"

namespace charlm {

using namespace snug;

// ---- flags.cpp -------------------------------------------------------------

// The parsed command line (docs/programs.md): the values, and which flags were
// given (a --resume run takes the shape from the file unless a flag says
// otherwise, and then they must agree).
struct Flags {
  std::string data;
  int64_t steps = 3000, layers = 4, heads = 4, embd = 128, block = 128, batch = 16, seed = 1337;
  int64_t eval_every = 250, eval_batches = 50, save_every = 0, threads = 0, generate = 300, profile_steps = 5;
  int64_t accum = 1, micro_batches = 1, memory_budget = -1, capacity = -1, stop_at = 0;
  double lr = 1e-3, dropout = 0.0, bucket_mb = 25.0;
  std::string save, resume, profile, checkpoint = "none", devices, schedule = "gpipe", placement = "memory";
  std::string optim = "adamw", amp, device = "cpu";
  bool json = false, half_params = false;
  std::set<std::string> given;  // long names without "--"
  bool has(const std::string& k) const { return given.count(k) != 0; }
};

// The flags, their defaults and meanings (`charlm --help`). Values are checked
// here (exit 2 naming the flag); combinations by check_setup.
void add_flags(CLI::App& app, Flags& f);
// After cli::parse: which flags the command line gave.
void record_given(const CLI::App& app, Flags& f);

// amp: the autocast dtype, or nullopt for f32.
using Amp = std::optional<DType>;

// What the flags mean once checked against each other (exit 2 when they do not go together).
struct Setup {
  int world = 1, rank = 0;
  bool lead = true;      // rank 0: prints, evaluates and saves
  int64_t B = 0, T = 0;  // windows per step (per rank), characters per window
  int64_t accum = 1, micro_B = 0;
  bool placed = false;  // --devices: a pipeline over devices (docs/placement.md)
  std::vector<Device> devices;
  int64_t micro_batches = 1;  // of the pipeline
  parallel::Schedule schedule{};
  parallel::Policy placement{};
  int64_t budget = -1;  // --memory-budget in bytes, or -1
  Amp amp;
  bool half_params = false;  // --half-params: the model's weights in the --amp dtype, f32 masters in the optimizer
  Device device = kCPU;      // --device: where the model, its optimizer and the batches live (without --devices)
  uint64_t seed = 0;
};
Setup check_setup(const Flags& fl, int64_t block, int world, int rank);

// ---- corpus.cpp ------------------------------------------------------------

struct Corpus {
  std::vector<char> itos;
  std::map<char, int64_t> stoi;
  std::vector<int64_t> train, val;  // the first 90% of the characters, the last 10%
};
Corpus load_corpus(const std::string& path);

// Random windows of the training split as a data::Dataset: sample i is
// {x (T) i64, y (T) i64}, y shifted by one, at an offset drawn from
// data::sample_rng(), which the DataLoader seeds from (seed, epoch, i). An
// epoch is one batch, so step s is epoch s: a resumed run sets the epoch and
// gets exactly the batches an uninterrupted run would have had.
class TrainWindows : public data::Dataset {
 public:
  TrainWindows(const std::vector<int64_t>& tokens, int64_t block, int64_t batch);
  int64_t size() const override { return batch_; }
  data::Sample get(int64_t) const override;

 private:
  const std::vector<int64_t>& tokens_;
  int64_t block_, batch_;
};

// The training batches: step s is epoch s of this loader (see TrainWindows).
// With N ranks an epoch holds the N*B windows of the global batch and rank r
// takes windows r, r+N, ...: sample i is drawn from (seed, epoch, i) alone, so
// the union is what one process with --batch N*B would train on.
data::DataLoader train_loader(const Corpus& corpus, const Setup& st);

// B random windows of `data` from gen: x (B, T), y (B, T) (validation
// batches), on `device` (the windows are drawn on the host either way).
std::pair<Tensor, Tensor> get_batch(const std::vector<int64_t>& data, int64_t B, int64_t T, Generator& gen,
                                    Device device = kCPU);

// ---- model.cpp -------------------------------------------------------------

// The model's shape: from the flags, or from the --resume file's metadata (NOTE [ charlm resume ]).
nn::models::GPTConfig model_config(const Flags& fl, const Corpus& corpus,
                                   const std::map<std::string, std::string>& resume_md);

// AdamW (or AdamW8bit), weight decay 0.1 on matrices only; a resumed run keeps the file's optimizer.
struct Optimizer {
  std::unique_ptr<nn::optim::Optimizer> opt;
  std::string name;  // "adamw" or "adamw8bit"
};
Optimizer make_optimizer(nn::models::GPT& model, const Flags& fl, const std::map<std::string, std::string>& resume_md);

// tokens (B, T) -> logits (B, T, V), wherever the model's layers live.
using LogitsFn = std::function<Tensor(const Tensor&)>;

// Mean validation loss over `batches` batches of B windows (the same batches
// every time), each run through the model `chunk` windows at a time (the
// training micro-batch: with --accum the evaluation stays within the memory a
// training step plans for).
double evaluate(nn::models::GPT& model, const LogitsFn& logits_of, const std::vector<int64_t>& data, int64_t B,
                int64_t T, int64_t batches, uint64_t seed, Amp amp, int64_t chunk);
// n characters sampled from the model, starting from a newline.
// Under --amp's autocast scope, as evaluation (needed with --half-params).
std::string generate(nn::models::GPT& model, const LogitsFn& logits_of, const Corpus& c, int64_t n, uint64_t seed,
                     Amp amp);

// ---- memory.cpp ------------------------------------------------------------

// --devices: measures one micro-batch on cpu:0, chooses the split that fits
// every device's capacity, moves the layers and builds the pipeline.
void place_model(parallel::LayerStack& stack, const Corpus& corpus, const Setup& st, bool checkpoint_stages,
                 std::optional<parallel::Pipeline>& pipe);

// What the --memory-budget check predicted (-1 without a budget).
struct MemoryPlan {
  int64_t predicted_peak = -1;
  double predicted_recompute_ms = -1;
  int64_t minimum_budget = -1;
};
// The "will it fit" check and, with --checkpoint auto, the planner (it sets model.checkpointing).
MemoryPlan plan_memory(nn::models::GPT& model, const Corpus& corpus, nn::optim::Optimizer& opt, const Setup& st,
                       const std::string& ckpt_mode);

// --profile: records steps [from, to) and writes a Chrome trace.
class StepProfiler {
 public:
  StepProfiler(std::string path, int64_t from, int64_t to, int64_t steps, bool tty);
  void before_step(int64_t step);  // step: 0-based
  void after_step(int64_t done);   // done: steps done so far

 private:
  std::string path_;
  int64_t from_, to_, steps_;
  bool tty_;
  std::unique_ptr<profiler::Profile> prof_;
};

// ---- step.cpp --------------------------------------------------------------

// The model as it trains: on --device (cpu:0 by default), or its layer stack
// pipelined over --devices (place_model); with --half-params its weights in
// the --amp dtype; --checkpoint sqrt's segments are set here.
// Not movable: the stack and the pipeline point into it.
struct TrainModel {
  TrainModel(const nn::models::GPTConfig& cfg, const Flags& fl, const Corpus& corpus, const Setup& st);
  TrainModel(const TrainModel&) = delete;
  TrainModel& operator=(const TrainModel&) = delete;
  std::unique_ptr<nn::models::GPT> gpt;
  parallel::LayerStack stack;  // gpt's layers, as the pipeline runs them
  std::optional<parallel::Pipeline> pipe;
  LogitsFn logits_of;  // wherever the layers live
};

// One training step (for nn::TrainLoop::step) and what is kept of each
// (for nn::TrainLoop::after_step).
class Trainer {
 public:
  Trainer(TrainModel& m, nn::optim::Optimizer& opt, nn::optim::LRScheduler& sched, nn::amp::GradScaler& scaler,
          distributed::DataParallel* dp, distributed::ProcessGroup& pg, const Setup& st, bool tty);
  // Zeroes the gradients, runs forward and backward of batch (x, y) (B, T),
  // steps the optimizer through the scaler and the schedule; the batch's loss.
  double step(const Tensor& x, const Tensor& y, int64_t step);
  // Records the recomputation time and the devices' peaks; with several
  // ranks, makes i.loss the job's mean; stops on a non-finite loss.
  void after_step(nn::StepInfo& i);

  int64_t skipped_steps = 0;             // the loss scaler's (inf/NaN gradients)
  std::vector<double> recompute_ms;      // per step
  std::vector<std::size_t> step_peaks;   // per --devices device

 private:
  TrainModel& m_;
  nn::optim::Optimizer& opt_;
  nn::optim::LRScheduler& sched_;
  nn::amp::GradScaler& scaler_;
  distributed::DataParallel* dp_;
  distributed::ProcessGroup& pg_;
  const Setup& st_;
  bool tty_;
};

// ---- report.cpp ------------------------------------------------------------

// The start-up line on stderr: the model, its size, the data and the threads (and ranks).
void print_banner(nn::models::GPT& model, const Corpus& corpus, const Setup& st, distributed::ProcessGroup& pg);

// Everything the final JSON line reports beyond the model and the setup.
struct Results {
  double val_loss = 0, train_loss = 0, median_ms = 0, median_recompute_ms = 0;
  int64_t steps = 0, skipped_steps = 0;
  std::string checkpoint, optim;
  MemoryPlan plan;
  std::vector<std::size_t> step_peaks;  // per --devices device
};
void print_json(const Results& r, const Setup& st, nn::models::GPT& model, const nn::optim::Optimizer& opt,
                const parallel::Pipeline* pipe, const nn::amp::GradScaler& scaler, const distributed::DataParallel* dp);

}  // namespace charlm

// SPDX-License-Identifier: MIT
// charlm: trains the W-GPT character-level transformer on tiny shakespeare
// (docs/workloads.md), evaluates it, and prints generated text.
//
//   charlm [--data FILE] [--steps N] [--lr X] [--layers N] [--heads N] [--embd N]
//          [--block N] [--dropout X] [--batch N] [--seed N] [--eval-every N] [--eval-batches N]
//          [--save PATH] [--save-every N] [--resume PATH] [--threads N]
//          [--generate N] [--profile FILE [--profile-steps N]] [--json]
//          [--checkpoint none|sqrt|auto|stage] [--memory-budget BYTES] [--accum K]
//          [--devices cpu:1,cpu:2 [--micro-batches M] [--schedule gpipe|1f1b]
//           [--placement memory|time|fill] [--capacity BYTES]] [--optim adamw|adamw8bit]
//          [--amp f16|bf16 [--half-params]] [--device cpu|cuda|cuda:N] [--stop-at N] [--bucket-mb X]
//
// Defaults are the quality settings: AdamW lr 1e-3, betas (0.9, 0.99),
// weight decay 0.1 on matrices (not on biases and norms), 100 warmup steps
// then cosine to lr/10, first 90% of characters for training and the last
// 10% for validation, validation loss averaged over 50 batches. Model: 4
// layers, 4 heads, 128 channels, block 128, dropout 0. `charlm --help` lists
// every flag with its default. A bad flag or value, or flags that do not go
// together, stop with an error naming the flag and exit status 2
// (docs/programs.md). Progress (loss, tokens/s, memory now and at peak) goes
// to stderr; stdout gets the sample and a final JSON line, or with --json the
// JSON line alone.
//
// --save PATH writes the training state (model, optimizer, schedule, RNG) at
// the end and every --save-every steps, with the model's shape (layers,
// heads, embd, block, dropout, vocab) and --optim in the file's metadata.
// --resume PATH continues from such a file: the shape and the optimizer come
// from the file, so they need not be repeated; a shape flag or --optim that
// is given must agree with it ("--layers 4 contradicts the checkpoint's
// layers = 6"), and --data must have the file's vocabulary size. --steps is
// the total, counted from step 0, as in the run that saved the file.
//
// --profile FILE records --profile-steps steps (default 5) after two warm-up
// steps with snug's profiler, writes them to FILE as a Chrome trace (open it in
// Perfetto) and prints the per-op table on stderr.
//
// Memory (docs/checkpointing.md): --checkpoint sqrt recomputes sqrt(layers)
// balanced segments of blocks in backward; --checkpoint auto measures the
// model once and lets the planner pick the segments that fit --memory-budget
// (e.g. 150MiB) with the least recomputation. With a budget, any mode first
// checks that a step fits and stops with the minimum if it cannot. --accum K
// splits each batch of --batch rows into K micro-batches (token-weighted
// gradient accumulation): the same gradients at about 1/K of the activations.
//
// Mixed precision (docs/mixed_precision.md): --amp bf16|f16 runs forward
// passes (training and evaluation) under an autocast scope; parameters, their
// gradients and the optimizer stay f32. f16 adds a GradScaler (dynamic loss
// scaling; its state goes into --save checkpoints); bf16 has f32's exponent
// range and needs none. Not combined with --devices yet. --half-params keeps
// the weights themselves in that dtype (half the parameter bytes); the
// optimizer updates f32 master copies.
//
// Devices (docs/cuda.md "Training on a GPU"): --device cuda trains there (the
// model, the optimizer, the scaler, evaluation and sampling); the batches
// are staged in pinned memory and copied one step ahead on a copy stream
// (data::DevicePrefetcher). A --save file holds host copies, so a run saved on
// one device resumes on another. --stop-at N ends the run after step N, saved,
// as a preempted job would; --resume continues it to --steps.
//
// Data parallel (docs/distributed.md): run unchanged under `mpirun -np N
// charlm ...` (or srun). Each rank trains a replica on --batch windows of its
// own (windows r, r+N, ... of the N*--batch windows a single process would
// draw for that step, so N ranks of --batch B see exactly what one process
// with --batch N*B sees); gradients are averaged across ranks during
// backward (distributed::DataParallel). Rank 0 alone evaluates (on batches
// of N*B windows, as the single process would), prints and saves; every rank
// loads --resume. tokens/s counts all ranks' tokens. --bucket-mb X sets the
// gradient bucket size (default 25 MiB, as PyTorch's DDP).
//
// This file is the program, top to bottom: flags, data, model, optimizer, the
// training loop (nn::TrainLoop, nn/train_loop.h), the report. charlm.h lists
// the pieces beside it (flags.cpp, corpus.cpp, model.cpp, memory.cpp, step.cpp,
// report.cpp).
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include <snug/data/dataloader.h>
#include <snug/data/device_prefetch.h>
#include <snug/memory/allocator.h>
#include <snug/nn/train_loop.h>
#include <snug/nn/training_state.h>

#include "charlm/charlm.h"

using namespace snug;
using namespace charlm;

namespace {

int run(int argc, char** argv) {
  // The command line (flags.cpp).
  Flags fl;
  CLI::App app{
      "charlm: trains the W-GPT character-level transformer on a text corpus (tiny shakespeare by default), "
      "evaluates it and samples from it. See examples/charlm/main.cpp and docs/programs.md.",
      "charlm"};
  cli::init(app);
  add_flags(app, fl);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  record_given(app, fl);
  // One process, or one rank of an mpirun/srun job (the launcher's environment says which).
  auto pg = distributed::init_process_group();
  if (fl.has("threads")) set_num_threads(static_cast<int>(fl.threads));
  Corpus corpus = load_corpus(fl.data);
  SNUG_FLAG_CHECK(!fl.has("resume") || !fl.resume.empty(), "--resume needs a file name");
  SNUG_FLAG_CHECK(!fl.has("save") || !fl.save.empty(), "--save needs a file name");
  // NOTE [ charlm resume ]: the file's metadata first, for the model's shape and the optimizer.
  const std::map<std::string, std::string> resume_md =
      fl.has("resume") ? nn::read_training_state_metadata(fl.resume) : std::map<std::string, std::string>{};
  const nn::models::GPTConfig cfg = model_config(fl, corpus, resume_md);
  // NOTE [ charlm resume ]: a run saved with --half-params resumes with its 16-bit weights.
  if (const auto it = resume_md.find("charlm.half_params"); it != resume_md.end() && it->second != "none") {
    SNUG_FLAG_CHECK(fl.amp == it->second, "the checkpoint ", fl.resume, " was trained with --half-params --amp ",
                    it->second, "; resume it with --amp ", it->second);
    fl.half_params = true;
  }
  const Setup st = check_setup(fl, cfg.block, pg->size(), pg->rank());
  const int64_t B = st.B, T = st.T, steps = fl.steps, world = st.world;
  const bool lead = st.lead, tty = isatty(fileno(stderr));
  const uint64_t seed = st.seed;
  // f16 needs loss scaling; bf16 has f32's range (the scaler stays disabled).
  nn::amp::GradScaler scaler({.enabled = st.amp == DType::f16});

  // The model, on cpu:0 or pipelined over --devices (step.cpp, memory.cpp).
  manual_seed(seed);
  TrainModel m(cfg, fl, corpus, st);
  nn::models::GPT& model = *m.gpt;

  // The optimizer and its schedule: 100 warmup steps, then cosine to lr/10.
  const Optimizer optim = make_optimizer(model, fl, resume_md);
  nn::optim::Optimizer& opt = *optim.opt;
  nn::optim::WarmupCosine sched(opt, std::min<int64_t>(100, steps), steps, 0.1);
  data::DataLoader loader = train_loader(corpus, st);  // corpus.cpp

  // --save and --resume: the whole training state (nn/training_state.h).
  nn::TrainingStateParts parts{&model, &opt, &sched, {{"default", &default_generator()}}};
  if (scaler.is_enabled()) parts.scaler = &scaler;
  scaler.name_parameters(model.named_parameters());
  int64_t start = 0;
  if (fl.has("resume")) {
    start = nn::load_training_state(fl.resume, parts).step;
    if (lead) std::fprintf(stderr, "resumed from %s at step %lld\n", fl.resume.c_str(), (long long)start);
  }
  // Several ranks: average gradients across them during backward (rank 0's
  // parameters are copied to all first; with --resume they are the same anyway).
  std::optional<distributed::DataParallel> dp;
  if (world > 1)
    dp.emplace(model, pg,
               distributed::DataParallelOptions{.bucket_bytes = static_cast<int64_t>(fl.bucket_mb * 1048576.0)});
  if (lead) print_banner(model, corpus, st, *pg);
  // Will a step fit --memory-budget? With --checkpoint auto, the plan that does.
  const MemoryPlan plan = plan_memory(model, corpus, opt, st, fl.checkpoint);

  // The training loop (nn/train_loop.h): fetch the batch, take a step
  // (Trainer, step.cpp), then report, evaluate and save on their cadences.
  SNUG_FLAG_CHECK(!fl.has("profile") || !fl.profile.empty(), "--profile needs a file name");
  const int64_t prof_from = std::min(start + 2, steps - 1);  // after two warm-up steps
  StepProfiler profiler(fl.profile, prof_from, prof_from + fl.profile_steps, steps, tty);
  Trainer trainer(m, opt, sched, scaler, dp ? &*dp : nullptr, *pg, st, tty);
  memory::reset_peak(st.device);
  for (const Device& d : st.devices) memory::reset_peak(d);
  auto val_loss_now = [&] {
    return evaluate(model, m.logits_of, corpus.val, B * world, T, fl.eval_batches, seed + 2000, st.amp,
                    st.micro_B * world);
  };
  Tensor x, y;  // (B, T) each
  SNUG_FLAG_CHECK(fl.stop_at == 0 || fl.stop_at > start, "--stop-at ", fl.stop_at, " is not after the resumed step ",
                  start);
  nn::TrainLoop loop({.steps = steps, .start = start, .stop = fl.stop_at});
  // Batches reach --device one step ahead (data/device_prefetch.h): on a GPU
  // the copy of batch s+1 runs on a copy stream while step s computes. On
  // cpu:0 nothing is copied.
  data::DevicePrefetcher prefetch(st.device);
  auto host_batch = [&](int64_t step) -> data::Batch {
    loader.set_epoch(step);
    return *loader.begin();
  };
  const int64_t end = fl.stop_at > 0 ? std::min(fl.stop_at, steps) : steps;
  loop.before_step([&](int64_t step) {
    x = y = Tensor();  // the last step's batch is freed before this one is made
    profiler.before_step(step);  // first: a profile then sees this step's copy and compute streams
    if (prefetch.empty()) prefetch.push(host_batch(step));
    data::Batch b = prefetch.pop();
    x = b[0];
    y = b[1];
    if (step + 1 < end) prefetch.push(host_batch(step + 1));
  });
  loop.step([&](int64_t step) { return trainer.step(x, y, step); });
  loop.after_step([&](nn::StepInfo& i) {
    trainer.after_step(i);
    prefetch.end_step();  // a profile's GPU tracks get this step before the profile stops
    profiler.after_step(i.step);
  });
  if (lead) {
    loop.every(tty ? 1 : 50, [&](const nn::StepInfo& i) {
      const std::vector<Device> where = st.placed ? st.devices : std::vector<Device>{st.device};
      const double tok_s = double(B * T * world) / (i.ms / 1000.0);
      nn::print_progress(stderr, nn::progress_line(i.step, steps, i.loss, tok_s, "tok/s", where), tty);
    });
    loop.evaluate(fl.eval_every, [&](const nn::StepInfo& i) {
      const double v = val_loss_now();
      for (const Device& d : st.devices) memory::reset_peak(d);
      std::fprintf(stderr, "%sstep %lld: train loss %.4f, val loss %.4f\n", tty ? "\n" : "", (long long)i.step, i.loss,
                   v);
      return v;
    });
  }
  if (lead && fl.has("save"))
    loop.every(fl.save_every, [&](const nn::StepInfo& i) {
      // NOTE [ charlm resume ]: the shape and the optimizer, for --resume.
      std::map<std::string, std::string> md = cfg.to_metadata();
      md["model"] = model.repr();
      md["charlm.optim"] = optim.name;
      md["charlm.half_params"] = st.half_params ? fl.amp : "none";
      nn::save_training_state(fl.save, parts, i.step, md);
    });
  const nn::TrainSummary sum = loop.run();
  x = y = Tensor();

  // The report: rank 0 alone, for the job.
  if (!lead) return 0;
  const double val_loss = std::isnan(sum.eval) ? val_loss_now() : sum.eval;
  // The sample is text: on stdout, or on stderr when stdout is for JSON alone.
  if (fl.generate > 0)
    std::fprintf(fl.json ? stderr : stdout, "---- sample ----\n%s\n----------------\n",
                 generate(model, m.logits_of, corpus, fl.generate, seed + 3000, st.amp).c_str());
  const Results r{.val_loss = val_loss,
                  .train_loss = sum.loss,
                  .median_ms = sum.median_ms(),
                  .median_recompute_ms = nn::TrainSummary{.step_ms = trainer.recompute_ms}.median_ms(),
                  .steps = start + sum.steps_run,
                  .skipped_steps = trainer.skipped_steps,
                  .checkpoint = fl.checkpoint,
                  .optim = optim.name,
                  .plan = plan,
                  .step_peaks = trainer.step_peaks};
  print_json(r, st, model, opt, m.pipe ? &*m.pipe : nullptr, scaler, dp ? &*dp : nullptr);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    // NOTE [ Program exit status ]: 2 for a bad command line, 1 otherwise.
    const int status = cli::exit_status("charlm", e);
    auto pg = distributed::default_group();
    if (pg && pg->size() > 1) {
      // The other ranks would wait for this one; stop the whole job instead.
      std::fprintf(stderr, "charlm: rank %d stops the job\n", pg->rank());
      pg->abort(status);
    }
    return status;
  }
}

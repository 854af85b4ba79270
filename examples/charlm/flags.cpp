// SPDX-License-Identifier: MIT
// charlm's command line: the flags and their defaults (add_flags), and the
// checks of the flags that do not go together (check_setup), each an exit 2
// naming the flags (docs/programs.md).
#include <fstream>

#include <snug/core/backend.h>
#include <snug/memory/allocator.h>

#include "charlm/charlm.h"

namespace charlm {

namespace {

std::string default_data_path() {
  // The repository ships the corpus beside this example; find it from the
  // source tree recorded at build time, then relative to the working dir.
  std::vector<std::string> candidates = {std::string(SNUG_EXAMPLES_DIR) + "/charlm/data/tinyshakespeare.txt",
                                         "examples/charlm/data/tinyshakespeare.txt"};
  for (auto& c : candidates)
    if (std::ifstream(c).good()) return c;
  return candidates[0];
}

}  // namespace

void add_flags(CLI::App& app, Flags& f) {
  using cli::integer;
  using cli::number;
  f.data = default_data_path();
  f.threads = get_num_threads();
  app.add_option("--data", f.data, "text corpus to train on (first 90% train, last 10% validation)");
  app.add_option("--steps", f.steps, "training steps in total, counted from step 0 (also with --resume)")
      ->transform(integer(1));
  app.add_option("--lr", f.lr, "peak AdamW learning rate (100 warmup steps, then cosine to lr/10)")
      ->transform(number({.lo = 0}));
  app.add_option("--layers", f.layers, "transformer blocks")->transform(integer(1));
  app.add_option("--heads", f.heads, "attention heads (must divide --embd)")->transform(integer(1));
  app.add_option("--embd", f.embd, "channels")->transform(integer(1));
  app.add_option("--block", f.block, "context length in characters")->transform(integer(1));
  app.add_option("--dropout", f.dropout, "dropout probability")->transform(number({.lo = 0, .hi = 1, .hi_open = true}));
  app.add_option("--batch", f.batch, "windows per step (per rank under mpirun)")->transform(integer(1));
  app.add_option("--seed", f.seed, "seed of the weights, batches, evaluation and sampling")->transform(integer(0));
  app.add_option("--eval-every", f.eval_every, "validation loss every N steps (0: only at the end)")
      ->transform(integer(0));
  app.add_option("--eval-batches", f.eval_batches, "batches the validation loss averages")->transform(integer(1));
  app.add_option("--save", f.save, "write the training state to PATH at the end (and every --save-every steps)")
      ->type_name("PATH");
  app.add_option("--save-every", f.save_every, "with --save, also save every N steps (0: only at the end)")
      ->transform(integer(0));
  app.add_option("--resume", f.resume, "continue from a --save file (its model shape and --optim are used)")
      ->type_name("PATH");
  app.add_option("--stop-at", f.stop_at,
                 "end this run after step N (saving first with --save), as a preempted job would; --resume "
                 "continues to --steps [default: none]")
      ->transform(integer(1))
      ->default_str("");
  app.add_option("--threads", f.threads, "compute threads")->transform(integer(1, 65536));
  app.add_option("--generate", f.generate, "characters to sample at the end (0: none)")->transform(integer(0));
  app.add_option("--profile", f.profile, "write a Chrome trace of --profile-steps steps to FILE")->type_name("FILE");
  app.add_option("--profile-steps", f.profile_steps, "steps --profile records (after two warm-up steps)")
      ->transform(integer(1));
  app.add_flag("--json", f.json, "stdout holds only the final JSON line; progress and text go to stderr");
  app.add_option("--checkpoint", f.checkpoint,
                 "activation checkpointing: none, sqrt (sqrt(layers) segments), auto (the planner, needs "
                 "--memory-budget) or stage (pipeline stages, needs --devices)")
      ->check(CLI::IsMember({"none", "sqrt", "auto", "stage"}));
  app.add_option("--memory-budget", f.memory_budget,
                 "bytes a step may use (e.g. 150MiB): checked before training; --checkpoint auto plans for it "
                 "[default: none]")
      ->transform(cli::bytes())
      ->default_str("");
  app.add_option("--accum", f.accum, "micro-batches per step (gradient accumulation; must divide --batch)")
      ->transform(integer(1));
  app.add_option("--devices", f.devices, "pipeline the model over these devices, e.g. cpu:1,cpu:2")
      ->transform(cli::accepted_by([](const std::string& s) { parallel::parse_devices(s); }, "LIST"));
  app.add_option("--micro-batches", f.micro_batches, "with --devices: micro-batches per step (at most --batch)")
      ->transform(integer(1));
  app.add_option("--schedule", f.schedule, "with --devices: the pipeline schedule")
      ->check(CLI::IsMember({"gpipe", "1f1b"}));
  app.add_option("--placement", f.placement, "with --devices: how layers are split (by memory, time or fill)")
      ->check(CLI::IsMember({"memory", "time", "fill"}));
  app.add_option("--capacity", f.capacity,
                 "memory limit of each device (of cpu:0 without --devices), e.g. 64MiB [default: none]")
      ->transform(cli::bytes())
      ->default_str("");
  app.add_option("--optim", f.optim, "optimizer (adamw8bit keeps large tensors' moments in 8 bits)")
      ->check(CLI::IsMember({"adamw", "adamw8bit"}));
  app.add_option("--amp", f.amp,
                 "mixed precision: autocast forward passes to f16 (with loss scaling) or bf16 "
                 "[default: none, f32]")
      ->check(CLI::IsMember({"f16", "bf16"}))
      ->default_str("");
  app.add_option("--device", f.device,
                 "train on this device: cpu, cuda, cuda:N (or a virtual cpu:N); the model, the optimizer, the "
                 "loss scaler, evaluation and sampling all run there")
      ->transform(cli::device());
  app.add_flag("--half-params", f.half_params,
               "with --amp: keep the model's weights in the --amp dtype (half the parameter bytes); the optimizer "
               "updates f32 master copies");
  app.add_option("--bucket-mb", f.bucket_mb, "under mpirun: gradient all-reduce bucket size in MiB")
      ->transform(number({.lo = 0, .lo_open = true}));
}

void record_given(const CLI::App& app, Flags& f) {
  for (const CLI::Option* o : app.get_options())
    if (o->count() > 0 && !o->get_lnames().empty()) f.given.insert(o->get_lnames().front());
}

Setup check_setup(const Flags& fl, int64_t block, int world, int rank) {
  Setup st;
  st.world = world;
  st.rank = rank;
  st.lead = rank == 0;
  st.B = fl.batch;
  st.T = block;
  st.seed = static_cast<uint64_t>(fl.seed);
  st.accum = fl.accum;
  SNUG_FLAG_CHECK(st.B % st.accum == 0, "--accum ", st.accum, " must divide --batch ", st.B);
  st.micro_B = st.B / st.accum;
  const std::string& ckpt_mode = fl.checkpoint;
  // Placement over devices (docs/placement.md).
  st.placed = fl.has("devices");
  if (st.placed) st.devices = parallel::parse_devices(fl.devices);
  st.micro_batches = fl.micro_batches;
  st.schedule = parallel::parse_schedule(fl.schedule);
  st.placement = parallel::parse_policy(fl.placement);
  SNUG_FLAG_CHECK(st.placed || (!fl.has("micro-batches") && !fl.has("schedule") && !fl.has("placement")),
                  "--micro-batches, --schedule and --placement go with --devices");
  SNUG_FLAG_CHECK(
      !st.placed || (st.accum == 1 && (ckpt_mode == "none" || ckpt_mode == "stage") && !fl.has("memory-budget")),
      "with --devices, use --micro-batches instead of --accum and --checkpoint none or stage "
      "(no --memory-budget; --capacity limits each device)");
  SNUG_FLAG_CHECK(ckpt_mode != "stage" || st.placed, "--checkpoint stage needs --devices");
  SNUG_FLAG_CHECK(!st.placed || world == 1, "--devices is not supported with several processes (", world,
                  " ranks) yet");
  SNUG_FLAG_CHECK(st.micro_batches <= st.B, "--micro-batches ", st.micro_batches, " must be at most --batch ", st.B);
  if (fl.has("capacity"))
    for (const Device& d : st.placed ? st.devices : std::vector<Device>{Device(fl.device)})
      memory::set_capacity(d, static_cast<std::size_t>(fl.capacity));
  st.budget = fl.has("memory-budget") ? fl.memory_budget : -1;
  if (fl.has("amp")) {
    SNUG_FLAG_CHECK(!st.placed, "--amp is not supported with --devices yet");
    st.amp = fl.amp == "f16" ? DType::f16 : DType::bf16;
  }
  SNUG_FLAG_CHECK(ckpt_mode != "auto" || st.budget > 0, "--checkpoint auto needs --memory-budget BYTES");
  // One device, or a pipeline over several (--devices cuda:0,cpu offloads to the host).
  st.device = Device(fl.device);
  SNUG_FLAG_CHECK(!st.placed || !fl.has("device"), "--device and --devices do not go together: --devices ",
                  fl.devices, " already says where every layer goes");
  // Under mpirun, "--device cuda" gives each rank a GPU of its own: rank r takes cuda:(r mod GPUs).
  if (st.device.is_cuda() && world > 1 && fl.device == "cuda")
    st.device = Device(DeviceType::CUDA, rank % std::max(1, device_count(DeviceType::CUDA)));
  st.half_params = fl.half_params;
  SNUG_FLAG_CHECK(!st.half_params || st.amp, "--half-params needs --amp f16 or --amp bf16 (the weights' dtype)");
  SNUG_FLAG_CHECK(!st.half_params || fl.optim == "adamw", "--half-params needs --optim adamw (f32 masters)");
  return st;
}

}  // namespace charlm

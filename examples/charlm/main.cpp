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
//          [--amp f16|bf16] [--bucket-mb X]
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
// range and needs none. Not combined with --devices yet.
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
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <snug/autograd/checkpoint.h>
#include <snug/autograd/grad_mode.h>
#include <snug/core/generator.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/data/dataloader.h>
#include <snug/data/sampler.h>
#include <snug/distributed/data_parallel.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/autograd/autocast.h>
#include <snug/nn/accumulate.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/training_state.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/adamw8bit.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/planner.h>
#include <snug/parallel/layer_stack.h>
#include <snug/parallel/pipeline.h>
#include <snug/parallel/placement.h>

#include "common/cli.h"

using namespace snug;

namespace {

// The parsed command line (docs/programs.md): the values, and which flags were
// given (a --resume run takes the shape from the file unless a flag says
// otherwise, and then they must agree).
struct Flags {
  std::string data;
  int64_t steps = 3000, layers = 4, heads = 4, embd = 128, block = 128, batch = 16, seed = 1337;
  int64_t eval_every = 250, eval_batches = 50, save_every = 0, threads = 0, generate = 300, profile_steps = 5;
  int64_t accum = 1, micro_batches = 1, memory_budget = -1, capacity = -1;
  double lr = 1e-3, dropout = 0.0, bucket_mb = 25.0;
  std::string save, resume, profile, checkpoint = "none", devices, schedule = "gpipe", placement = "memory";
  std::string optim = "adamw", amp;
  bool json = false;
  std::set<std::string> given;  // long names without "--"
  bool has(const std::string& k) const { return given.count(k) != 0; }
};

std::string default_data_path() {
  // The repository ships the corpus beside this example; find it from the
  // source tree recorded at build time, then relative to the working dir.
  std::vector<std::string> candidates = {std::string(SNUG_EXAMPLES_DIR) + "/charlm/data/tinyshakespeare.txt",
                                         "examples/charlm/data/tinyshakespeare.txt"};
  for (auto& c : candidates)
    if (std::ifstream(c).good()) return c;
  return candidates[0];
}

// The flags, their defaults and meanings (`charlm --help`). Values are checked
// here (exit 2 naming the flag); combinations after parsing (SNUG_FLAG_CHECK).
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
  app.add_option("--amp", f.amp, "mixed precision: autocast forward passes to f16 (with loss scaling) or bf16 "
                                 "[default: none, f32]")
      ->check(CLI::IsMember({"f16", "bf16"}))
      ->default_str("");
  app.add_option("--bucket-mb", f.bucket_mb, "under mpirun: gradient all-reduce bucket size in MiB")
      ->transform(number({.lo = 0, .lo_open = true}));
}

struct Corpus {
  std::vector<char> itos;
  std::map<char, int64_t> stoi;
  std::vector<int64_t> train, val;
};

Corpus load_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SNUG_CHECK(in.good(), IOError, "charlm: cannot open data file \"", path, "\" (pass --data FILE)");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  SNUG_CHECK(text.size() > 1000, IOError, "charlm: data file \"", path, "\" has only ", text.size(),
             " bytes; need a text corpus of at least 1000 characters");
  Corpus c;
  std::set<char> chars(text.begin(), text.end());
  c.itos.assign(chars.begin(), chars.end());
  for (size_t i = 0; i < c.itos.size(); ++i) c.stoi[c.itos[i]] = static_cast<int64_t>(i);
  size_t n_train = text.size() * 9 / 10;
  for (size_t i = 0; i < text.size(); ++i) (i < n_train ? c.train : c.val).push_back(c.stoi[text[i]]);
  return c;
}

// A batch of B windows of T+1 tokens at random offsets: x (B, T), y (B, T).
// Random windows of the training split as a data::Dataset: sample i is
// {x (T) i64, y (T) i64}, y shifted by one, at an offset drawn from
// data::sample_rng(), which the DataLoader seeds from (seed, epoch, i). An
// epoch is one batch, so step s is epoch s: a resumed run sets the epoch and
// gets exactly the batches an uninterrupted run would have had.
class TrainWindows : public data::Dataset {
 public:
  TrainWindows(const std::vector<int64_t>& tokens, int64_t block, int64_t batch)
      : tokens_(tokens), block_(block), batch_(batch) {
    SNUG_CHECK(static_cast<int64_t>(tokens.size()) > block + 1, ValueError, "charlm: the training split has ",
               tokens.size(), " tokens, too few for block size ", block);
  }
  int64_t size() const override { return batch_; }
  data::Sample get(int64_t) const override {
    const int64_t hi = static_cast<int64_t>(tokens_.size()) - block_ - 1;
    const int64_t off = randint(0, hi, {1}, DType::i64, &data::sample_rng()).item<int64_t>();
    std::vector<int64_t> x(tokens_.begin() + off, tokens_.begin() + off + block_);
    std::vector<int64_t> y(tokens_.begin() + off + 1, tokens_.begin() + off + block_ + 1);
    return {from_vector(x), from_vector(y)};
  }

 private:
  const std::vector<int64_t>& tokens_;
  int64_t block_, batch_;
};

// B random windows of `data` from gen (validation batches).
std::pair<Tensor, Tensor> get_batch(const std::vector<int64_t>& data, int64_t B, int64_t T, Generator& gen) {
  int64_t hi = static_cast<int64_t>(data.size()) - T - 1;
  SNUG_CHECK(hi > 0, ValueError, "charlm: the split has ", data.size(), " tokens, too few for block size ", T);
  std::vector<int64_t> offs = randint(0, hi, {B}, DType::i64, &gen).to_vector<int64_t>();
  std::vector<int64_t> xs(B * T), ys(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      xs[b * T + t] = data[offs[b] + t];
      ys[b * T + t] = data[offs[b] + t + 1];
    }
  return {from_vector(xs, {B, T}), from_vector(ys, {B, T})};
}

// tokens (B, T) -> logits (B, T, V), wherever the model's layers live.
using LogitsFn = std::function<Tensor(const Tensor&)>;
// amp: the autocast dtype, or nullopt for f32.
using Amp = std::optional<DType>;

double evaluate(nn::models::GPT& model, const LogitsFn& logits_of, const std::vector<int64_t>& data, int64_t B,
                int64_t T, int64_t batches, uint64_t seed, Amp amp) {
  NoGradGuard ng;
  AutocastGuard ac(amp.value_or(DType::bf16), amp.has_value());
  model.eval();
  Generator gen(seed);  // the same batches at every evaluation
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    auto [x, y] = get_batch(data, B, T, gen);
    Tensor logits = logits_of(x);
    total += nn::functional::cross_entropy(logits.view({-1, model.cfg.vocab}), y.to(logits.device()).reshape({-1})).item();
  }
  model.train();
  return total / static_cast<double>(batches);
}

std::string generate(nn::models::GPT& model, const LogitsFn& logits_of, const Corpus& c, int64_t n, uint64_t seed) {
  NoGradGuard ng;
  model.eval();
  Generator gen(seed);
  std::vector<int64_t> ctx = {c.stoi.count('\n') ? c.stoi.at('\n') : 0};
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ctx.size()) - model.cfg.block);
    std::vector<int64_t> window(ctx.begin() + start, ctx.end());
    Tensor x = from_vector(window, {1, static_cast<int64_t>(window.size())});
    Tensor logits = logits_of(x).select(1, -1).select(0, 0).to(kCPU);  // (V)
    std::vector<float> p = softmax(logits, 0).to_vector<float>();
    double u = rand({1}, DType::f64, &gen).item(), acc = 0;
    int64_t pick = static_cast<int64_t>(p.size()) - 1;
    for (size_t k = 0; k < p.size(); ++k) {
      acc += p[k];
      if (u < acc) {
        pick = static_cast<int64_t>(k);
        break;
      }
    }
    ctx.push_back(pick);
    out.push_back(c.itos[pick]);
  }
  model.train();
  return out;
}

// One progress line on stderr: a bar, the step, the loss, throughput, and the
// memory the model's devices hold now and at most since training began
// (memory::allocated / peak_allocated, the caching allocator's counts).
void progress(int64_t step, int64_t total, double loss, double tok_s, const std::vector<Device>& devices, bool tty) {
  const int width = 30;
  int filled = static_cast<int>(width * step / std::max<int64_t>(total, 1));
  std::string mem;
  for (const Device& d : devices)
    mem += str(mem.empty() ? "" : ", ", devices.size() > 1 ? d.str() + " " : "",
               memory::format_bytes(memory::allocated(d)), " (peak ", memory::format_bytes(memory::peak_allocated(d)), ")");
  char line[512];
  std::snprintf(line, sizeof line, "[%.*s%.*s] step %lld/%lld  loss %.4f  %.0f tok/s  mem %s", filled,
                "##############################", width - filled, "..............................",
                static_cast<long long>(step), static_cast<long long>(total), loss, tok_s, mem.c_str());
  // \r redraws the line on a terminal; the clear-to-end erases a longer old one.
  if (tty) std::fprintf(stderr, "\r%s\033[K", line);
  else std::fprintf(stderr, "%s\n", line);
}

// NOTE [ charlm resume ]: the model's shape comes from the --resume file
// when it records one (nn::models::GPTConfig::to_metadata, written by
// --save), so a resumed run needs no shape flags; a shape flag given anyway
// must agree with the file. Without --resume, or for a file that records no
// shape (older charlm files have no gpt.dropout; that reads as 0), the flags
// and their defaults give it.
nn::models::GPTConfig model_config(const Flags& fl, const Corpus& corpus, const std::string& data_path,
                                   const std::map<std::string, std::string>& resume_md) {
  nn::models::GPTConfig cfg;
  cfg.vocab = static_cast<int64_t>(corpus.itos.size());
  cfg.layers = fl.layers;
  cfg.heads = fl.heads;
  cfg.embd = fl.embd;
  cfg.block = fl.block;
  cfg.dropout = fl.dropout;
  if (fl.has("resume")) {
    const std::string& path = fl.resume;
    if (auto saved = nn::models::GPTConfig::from_metadata(resume_md, path)) {
      auto agree = [&](const char* flag, const char* field, auto given, auto in_file) {
        SNUG_FLAG_CHECK(!fl.has(flag) || given == in_file, "--", flag, " ", given, " contradicts the checkpoint's ",
                        field, " = ", in_file, " (", path, "); drop the flag to use the file's");
      };
      agree("layers", "layers", cfg.layers, saved->layers);
      agree("heads", "heads", cfg.heads, saved->heads);
      agree("embd", "embd", cfg.embd, saved->embd);
      agree("block", "block", cfg.block, saved->block);
      agree("dropout", "dropout", cfg.dropout, saved->dropout);
      SNUG_FLAG_CHECK(saved->vocab == cfg.vocab, "--data \"", data_path, "\" has ", cfg.vocab,
                      " distinct characters but the checkpoint's vocab = ", saved->vocab, " (--resume ", path,
                      "); resume with the --data it was trained on");
      return *saved;
    }
  }
  SNUG_FLAG_CHECK(cfg.embd % cfg.heads == 0, "--embd ", cfg.embd, " must be a multiple of --heads ", cfg.heads);
  try {
    cfg.validate();
  } catch (const ValueError& e) {  // what the flags above did not catch is still a bad flag
    cli::fail("the model flags (--layers, --heads, --embd, --block, --dropout): ", e.what());
  }
  return cfg;
}

int run(int argc, char** argv) {
  Flags fl;
  CLI::App app{"charlm: trains the W-GPT character-level transformer on a text corpus (tiny shakespeare by default), "
               "evaluates it and samples from it. See examples/charlm/main.cpp and docs/programs.md.",
               "charlm"};
  cli::init(app);
  add_flags(app, fl);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  for (const CLI::Option* o : app.get_options())
    if (o->count() > 0 && !o->get_lnames().empty()) fl.given.insert(o->get_lnames().front());
  // One process, or one rank of an mpirun/srun job (the launcher's environment says which).
  auto pg = distributed::init_process_group();
  const int world = pg->size(), rank = pg->rank();
  const bool lead = rank == 0;  // prints, evaluates and saves
  const bool json = fl.json;
  if (fl.has("threads")) set_num_threads(static_cast<int>(fl.threads));
  const std::string& data_path = fl.data;
  Corpus corpus = load_corpus(data_path);

  SNUG_FLAG_CHECK(!fl.has("resume") || !fl.resume.empty(), "--resume needs a file name");
  SNUG_FLAG_CHECK(!fl.has("save") || !fl.save.empty(), "--save needs a file name");
  // NOTE [ charlm resume ]: the file's metadata first, for the model's shape and the optimizer.
  const std::map<std::string, std::string> resume_md =
      fl.has("resume") ? nn::read_checkpoint_metadata(fl.resume) : std::map<std::string, std::string>{};
  const nn::models::GPTConfig cfg = model_config(fl, corpus, data_path, resume_md);
  const int64_t B = fl.batch, T = cfg.block;
  const int64_t steps = fl.steps;
  const double lr = fl.lr;
  const uint64_t seed = static_cast<uint64_t>(fl.seed);
  const int64_t eval_every = fl.eval_every, eval_batches = fl.eval_batches;
  const int64_t save_every = fl.save_every;

  const int64_t accum = fl.accum;
  SNUG_FLAG_CHECK(B % accum == 0, "--accum ", accum, " must divide --batch ", B);
  const int64_t micro_B = B / accum;
  const std::string& ckpt_mode = fl.checkpoint;
  // Placement over devices (docs/placement.md).
  const bool placed = fl.has("devices");
  const std::vector<Device> devices = placed ? parallel::parse_devices(fl.devices) : std::vector<Device>{};
  const int64_t micro_batches = fl.micro_batches;
  const parallel::Schedule schedule = parallel::parse_schedule(fl.schedule);
  const parallel::Policy placement_policy = parallel::parse_policy(fl.placement);
  SNUG_FLAG_CHECK(placed || (!fl.has("micro-batches") && !fl.has("schedule") && !fl.has("placement")),
                  "--micro-batches, --schedule and --placement go with --devices");
  SNUG_FLAG_CHECK(!placed || (accum == 1 && (ckpt_mode == "none" || ckpt_mode == "stage") && !fl.has("memory-budget")),
                  "with --devices, use --micro-batches instead of --accum and --checkpoint none or stage "
                  "(no --memory-budget; --capacity limits each device)");
  SNUG_FLAG_CHECK(ckpt_mode != "stage" || placed, "--checkpoint stage needs --devices");
  SNUG_FLAG_CHECK(!placed || world == 1, "--devices is not supported with several processes (", world, " ranks) yet");
  SNUG_FLAG_CHECK(micro_batches <= B, "--micro-batches ", micro_batches, " must be at most --batch ", B);
  if (fl.has("capacity"))
    for (const Device& d : placed ? devices : std::vector<Device>{kCPU})
      memory::set_capacity(d, static_cast<std::size_t>(fl.capacity));
  const int64_t budget = fl.has("memory-budget") ? fl.memory_budget : -1;
  Amp amp;
  if (fl.has("amp")) {
    SNUG_FLAG_CHECK(!placed, "--amp is not supported with --devices yet");
    amp = fl.amp == "f16" ? DType::f16 : DType::bf16;
  }
  // f16 needs loss scaling; bf16 has f32's range (the scaler stays disabled).
  nn::amp::GradScaler scaler({.enabled = amp == DType::f16});
  SNUG_FLAG_CHECK(ckpt_mode != "auto" || budget > 0, "--checkpoint auto needs --memory-budget BYTES");

  manual_seed(seed);
  std::optional<nn::models::GPT> model_holder;
  {
    memory::TagScope tag(memory::Tag::parameter);
    model_holder.emplace(cfg);
  }
  nn::models::GPT& model = *model_holder;
  if (ckpt_mode == "sqrt") model.checkpointing = nn::sqrt_plan(cfg.layers);
  // Placement: measure one micro-batch on cpu:0, choose the split that fits
  // every device's capacity, move the layers, and pipeline each step.
  parallel::LayerStack stack = parallel::gpt_stack(model);
  std::optional<parallel::Pipeline> pipe;
  if (placed) {
    Generator sample_gen(seed + 4000);
    auto [sx, sy] = get_batch(corpus.train, B / micro_batches, T, sample_gen);
    const parallel::StepShape shape{
        .micro_batches = micro_batches, .schedule = schedule, .checkpoint_stages = ckpt_mode == "stage"};
    const parallel::StackProfile sp = parallel::profile_stack(stack, sx, sy, /*optimizer_slots=*/2);
    parallel::Placement pl = parallel::plan_placement(sp, devices, placement_policy, shape);
    parallel::place(stack, pl);
    pipe.emplace(stack, pl,
                 parallel::PipelineOptions{.micro_batches = micro_batches, .schedule = schedule,
                                           .checkpoint_stages = ckpt_mode == "stage",
                                           .threads_per_stage = std::max(1, get_num_threads() / static_cast<int>(devices.size()))});
    {
      std::fprintf(stderr, "placement (%s, %lld micro-batches): %s\n", parallel::schedule_name(schedule),
                   (long long)micro_batches, pl.str().c_str());
      for (size_t k = 0; k < devices.size(); ++k)
        std::fprintf(stderr, "  %s: predicted peak %s\n", devices[k].str().c_str(),
                     memory::format_bytes(static_cast<std::size_t>(pl.predicted_peak[k])).c_str());
    }
  }
  const LogitsFn logits_of = placed ? LogitsFn([&](const Tensor& t) { return parallel::run_stack(stack, t); })
                                    : LogitsFn([&](const Tensor& t) { return model.forward(t); });
  // Weight decay on matrices only (embeddings, Linear weights), as nanoGPT does.
  nn::optim::ParamGroup decay, no_decay;
  for (auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  decay.lr = no_decay.lr = lr;
  decay.weight_decay = 0.1;
  // --optim adamw8bit keeps the moments of tensors >= 4096 elements in 8 bits (nn/optim/adamw8bit.h).
  // NOTE [ charlm resume ]: a resumed run keeps the file's optimizer.
  const auto saved_optim = resume_md.find("charlm.optim");
  const std::string optim_name = fl.has("optim") || saved_optim == resume_md.end() ? fl.optim : saved_optim->second;
  SNUG_CHECK(optim_name == "adamw" || optim_name == "adamw8bit", ValueError,
             "charlm: the checkpoint's optim = ", optim_name, " is not adamw or adamw8bit (", fl.resume, ")");
  SNUG_FLAG_CHECK(saved_optim == resume_md.end() || saved_optim->second == optim_name, "--optim ", optim_name,
                  " contradicts the checkpoint's optim = ", saved_optim->second, " (", fl.resume,
                  "); drop the flag to use the file's");
  std::unique_ptr<nn::optim::Optimizer> opt_holder;
  if (optim_name == "adamw8bit")
    opt_holder = std::make_unique<nn::optim::AdamW8bit>(std::vector<nn::optim::ParamGroup>{decay, no_decay},
                                                        nn::optim::AdamW8bitOptions{lr, 0.9, 0.99, 1e-8, 0.1});
  else
    opt_holder = std::make_unique<nn::optim::AdamW>(std::vector<nn::optim::ParamGroup>{decay, no_decay},
                                                    nn::optim::AdamWOptions{lr, 0.9, 0.99, 1e-8, 0.1});
  nn::optim::Optimizer& opt = *opt_holder;
  nn::optim::WarmupCosine sched(opt, std::min<int64_t>(100, steps), steps, 0.1);
  // Training batches: step s is epoch s of this loader (see TrainWindows).
  // With N ranks an epoch holds the N*B windows of the global batch and rank
  // r takes windows r, r+N, ...: sample i is drawn from (seed, epoch, i)
  // alone, so the union is what one process with --batch N*B would train on.
  auto windows = std::make_shared<TrainWindows>(corpus.train, T, B * world);
  data::DataLoader loader(windows, {.batch_size = B, .seed = seed + 1000,
                                    .sampler = std::make_shared<data::ShardedSampler>(
                                        B * world, data::ShardOptions{.num_shards = world, .rank = rank, .shuffle = false})});
  nn::CheckpointParts parts{&model, &opt, &sched, {{"default", &default_generator()}}};
  if (scaler.is_enabled()) parts.scaler = &scaler;
  scaler.name_parameters(model.named_parameters());
  int64_t skipped_steps = 0;

  int64_t start = 0;
  if (fl.has("resume")) {
    auto ck = nn::load_checkpoint(fl.resume, parts);
    start = ck.step;
    if (lead) std::fprintf(stderr, "resumed from %s at step %lld\n", fl.resume.c_str(), (long long)start);
  }
  // Several ranks: average gradients across them during backward (rank 0's
  // parameters are copied to all first; with --resume they are the same anyway).
  std::optional<distributed::DataParallel> dp;
  const double bucket_mb = fl.bucket_mb;
  if (world > 1)
    dp.emplace(model, pg, distributed::DataParallelOptions{.bucket_bytes = static_cast<int64_t>(bucket_mb * 1048576.0)});
  if (lead)
    std::fprintf(stderr, "charlm: %s, %lld params, vocab %lld, train %zu / val %zu chars, %d threads%s\n",
                 model.repr().c_str(), (long long)model.num_parameters(), (long long)cfg.vocab, corpus.train.size(),
                 corpus.val.size(), get_num_threads(),
                 world > 1 ? str(", ", world, " ranks (", pg->backend(), "), batch ", B, " per rank").c_str() : "");

  // The "will it fit" check and the planner: one measuring pass on a sample
  // micro-batch (from its own generator, so training sees the same batches
  // whatever the flags), before the first step.
  int64_t predicted_peak = -1;
  double predicted_recompute_ms = -1;
  int64_t minimum_budget = -1;
  if (budget > 0) {
    Generator sample_gen(seed + 4000);
    auto [sx, sy] = get_batch(corpus.train, micro_B, T, sample_gen);
    // Measured as training will run: under the step's autocast scope (its
    // activations' dtypes and the cached 16-bit weight casts), with the
    // optimizer's real state (8-bit moments with --optim adamw8bit).
    nn::ChainProfile prof;
    {
      AutocastGuard ac(amp.value_or(DType::bf16), amp.has_value());
      prof = nn::profile_chain(model.chain(sx, sy), kCPU, opt, {.micro_batches = static_cast<int>(accum)});
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
                micro_B * accum, (accum > 1 ? str(" --accum ", accum) : std::string()), ": ", e.what());
    }
    nn::PlanCost pc = nn::evaluate_plan(prof, model.checkpointing);
    predicted_peak = pc.total_peak;
    predicted_recompute_ms = pc.recompute_ms * static_cast<double>(accum);
    minimum_budget = nn::minimum_budget(prof);
    if (lead)
      std::fprintf(stderr, "measured on a batch of %lld:\n%s", (long long)micro_B, prof.table().c_str());
    if (lead)
      std::fprintf(stderr, "memory budget %s (minimum %s): plan %s\n%spredicted peak %s, recomputation %.1f ms per step\n",
                   memory::format_bytes(budget).c_str(), memory::format_bytes(minimum_budget).c_str(),
                   model.checkpointing.str().c_str(),
                   nn::estimate_memory(prof, model.checkpointing).table().c_str(),
                   memory::format_bytes(pc.total_peak).c_str(), predicted_recompute_ms);
  } else if (lead && !model.checkpointing.empty()) {
    std::fprintf(stderr, "checkpointing: %s\n", model.checkpointing.str().c_str());
  }

  const bool tty = isatty(fileno(stderr));
  // Profiling window: [prof_from, prof_to), after two warm-up steps.
  const std::string& prof_path = fl.profile;
  const int64_t prof_from = std::min(start + 2, steps - 1), prof_to = prof_from + fl.profile_steps;
  SNUG_FLAG_CHECK(!fl.has("profile") || !prof_path.empty(), "--profile needs a file name");
  std::unique_ptr<profiler::Profile> prof;
  auto finish_profile = [&](int64_t recorded) {
    prof->stop();
    prof->write_chrome_trace(prof_path);
    std::fprintf(stderr, "%sprofile of %lld steps (trace in %s):\n%s", tty ? "\n" : "", (long long)recorded,
                 prof_path.c_str(), prof->summary().c_str());
    prof.reset();
  };
  std::vector<double> step_ms, recompute_ms;
  double train_loss = NAN, val_loss = NAN;
  memory::reset_peak(kCPU);
  for (const Device& d : devices) memory::reset_peak(d);
  // Training-step peaks of the placement's devices (evaluation, which runs
  // the whole batch without a pipeline, is left out: the plan is for steps).
  std::vector<std::size_t> step_peaks(devices.size(), 0);
  for (int64_t step = start; step < steps; ++step) {
    loader.set_epoch(step);
    auto batch_it = loader.begin();
    const Tensor x = (*batch_it)[0], y = (*batch_it)[1];  // (B, T) each
    if (!prof_path.empty() && step == prof_from) prof = std::make_unique<profiler::Profile>();
    auto t0 = std::chrono::steady_clock::now();
    autograd::reset_recompute_stats();
    opt.zero_grad();
    // Token-weighted accumulation: every micro-batch's mean loss is scaled by
    // its share of the batch's tokens (nn/accumulate.h).
    nn::GradAccumulator acc(static_cast<double>(nn::count_tokens(y)));
    double pipe_loss = NAN;
    const double loss_scale = scaler.get_scale();
    if (pipe) {
      pipe_loss = pipe->step(x, y);  // forward + backward of every micro-batch, over the devices
    } else {
      std::vector<Tensor> xs = nn::split_batch(x, accum), ys = nn::split_batch(y, accum);
      // One autocast scope per step: the weights are cast once, even with --accum.
      AutocastGuard ac(amp.value_or(DType::bf16), amp.has_value());
      for (int64_t k = 0; k < accum; ++k) {
        // Micro-steps but the last only accumulate; the last one's backward
        // averages the sum across ranks (DataParallel::no_sync).
        std::optional<distributed::DataParallel::NoSync> no_sync;
        if (dp && k + 1 < accum) no_sync.emplace(dp->no_sync());
        Tensor loss;
        {
          memory::TagScope tag(memory::Tag::activation);
          loss = model.loss(xs[k], ys[k]);
        }
        acc.backward(scaler.scale(loss), static_cast<double>(nn::count_tokens(ys[k])));
      }
    }
    if (!scaler.step(opt)) {
      ++skipped_steps;
      if (lead)
        std::fprintf(stderr, "%sstep %lld skipped: %s\n", tty ? "\n" : "", (long long)(step + 1),
                     scaler.overflow_report().c_str());
    }
    scaler.update();
    sched.step();
    auto t1 = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    step_ms.push_back(ms);
    recompute_ms.push_back(autograd::recompute_stats().ms);
    train_loss = pipe ? pipe_loss : acc.loss() / loss_scale;
    if (dp) {  // the job's loss: the mean of the ranks' batch losses
      Tensor l = from_vector(std::vector<double>{train_loss});
      pg->all_reduce(l, distributed::ReduceOp::avg);
      train_loss = l.item();
    }
    for (size_t k = 0; k < devices.size(); ++k) step_peaks[k] = std::max(step_peaks[k], memory::peak_allocated(devices[k]));
    if (prof && (step + 1 == prof_to || step + 1 == steps)) finish_profile(step + 1 - prof_from);
    SNUG_CHECK(std::isfinite(train_loss), ValueError, "charlm: training loss became ", train_loss, " at step ", step);
    bool last = step + 1 == steps;
    if (lead && (tty || (step + 1) % 50 == 0 || last))
      progress(step + 1, steps, train_loss, double(B * T * world) / (ms / 1000.0),
               placed ? devices : std::vector<Device>{kCPU}, tty);
    if (lead && ((eval_every > 0 && (step + 1) % eval_every == 0) || last)) {
      val_loss = evaluate(model, logits_of, corpus.val, B * world, T, eval_batches, seed + 2000, amp);
      for (const Device& d : devices) memory::reset_peak(d);
      std::fprintf(stderr, "%sstep %lld: train loss %.4f, val loss %.4f\n", tty ? "\n" : "",
                              (long long)(step + 1), train_loss, val_loss);
    }
    if (lead && fl.has("save") && ((save_every > 0 && (step + 1) % save_every == 0) || last)) {
      // NOTE [ charlm resume ]: the shape and the optimizer, for --resume.
      std::map<std::string, std::string> md = cfg.to_metadata();
      md["model"] = model.repr();
      md["charlm.optim"] = optim_name;
      nn::save_checkpoint(fl.save, parts, step + 1, md);
    }
  }
  if (lead && std::isnan(val_loss)) val_loss = evaluate(model, logits_of, corpus.val, B * world, T, eval_batches, seed + 2000, amp);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  const double med = median(step_ms);
  int64_t ckpt_layers = 0;
  for (const auto& sg : model.checkpointing.segments) ckpt_layers += sg.checkpoint ? sg.end - sg.begin : 0;
  const memory::DeviceStats ds = memory::stats(kCPU);
  // {"cpu:1": bytes, ...}: measured peaks (or the plan's predictions) of the
  // devices the model ran on.
  auto per_device = [&](bool predicted) {
    std::string out = "{";
    const std::vector<Device> ds_list = placed ? devices : std::vector<Device>{kCPU};
    for (size_t k = 0; k < ds_list.size(); ++k) {
      const long long v = predicted ? (pipe ? (long long)pipe->placement().predicted_peak[k] : -1)
                                    : (long long)(placed ? step_peaks[k] : memory::peak_allocated(ds_list[k]));
      out += str(k ? ", " : "", "\"", ds_list[k].str(), "\": ", v);
    }
    return out + "}";
  };
  const int act = static_cast<int>(memory::Tag::activation);
  const int64_t gen_n = fl.generate;
  if (!lead) return 0;  // rank 0 reports for the job
  // The sample is text: on stdout, or on stderr when stdout is for JSON alone.
  if (gen_n > 0)
    std::fprintf(json ? stderr : stdout, "---- sample ----\n%s\n----------------\n",
                 generate(model, logits_of, corpus, gen_n, seed + 3000).c_str());
  std::printf(
      "{\"val_loss\": %.6f, \"train_loss\": %.6f, \"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"params\": %lld, "
      "\"peak_allocated_bytes\": %zu, \"peak_reserved_bytes\": %zu, \"steps\": %lld, \"threads\": %d, "
      "\"checkpoint\": \"%s\", \"accum\": %lld, \"memory_budget\": %lld, \"peak_activation_bytes\": %lld, "
      "\"activation_bytes_at_peak\": %lld, \"recompute_ms_per_step\": %.3f, \"predicted_peak_bytes\": %lld, "
      "\"predicted_recompute_ms\": %.3f, \"minimum_budget_bytes\": %lld, \"checkpointed_segments\": %lld, "
      "\"checkpointed_layers\": %lld, \"devices\": %lld, \"micro_batches\": %lld, \"schedule\": \"%s\", "
      "\"peak_allocated_bytes_per_device\": %s, \"predicted_peak_bytes_per_device\": %s, \"optim\": \"%s\", "
      "\"optimizer_state_bytes\": %zu, \"amp\": \"%s\", \"loss_scale\": %.1f, \"skipped_steps\": %lld, "
      "\"world_size\": %d, \"dp_wait_ms_per_step\": %.3f}\n",
      val_loss, train_loss, med, med > 0 ? double(B * T * world) / (med / 1000.0) : 0.0, (long long)model.num_parameters(),
      memory::peak_allocated(kCPU), static_cast<size_t>(ds.reserved_bytes.peak), (long long)steps, get_num_threads(),
      ckpt_mode.c_str(), (long long)accum, (long long)budget, (long long)ds.tag_bytes[act].peak,
      (long long)ds.tag_at_peak[act], median(recompute_ms), (long long)predicted_peak, predicted_recompute_ms,
      (long long)minimum_budget, (long long)model.checkpointing.num_checkpointed(), (long long)ckpt_layers,
      (long long)std::max<size_t>(devices.size(), 1), (long long)(placed ? micro_batches : accum),
      placed ? parallel::schedule_name(schedule) : "none", per_device(false).c_str(), per_device(true).c_str(),
      optim_name.c_str(), opt.state_bytes(), amp ? dtype_name(*amp) : "none", scaler.get_scale(),
      (long long)skipped_steps, world, dp ? dp->stats().wait_ms / double(std::max<int64_t>(dp->stats().syncs, 1)) : 0.0);
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

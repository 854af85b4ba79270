// SPDX-License-Identifier: MIT
// mnist: trains an image classifier on MNIST and reports test accuracy.
//
//   mnist [--model cnn|mlp|mobilenet|resnet|vit] [--epochs N] [--batch B] [--lr X]
//         [--decay linear|none] [--workers W] [--data DIR] [--seed S] [--limit N]
//         [--threads T] [--every K] [--amp f16|bf16 [--half-params]] [--device cpu|cuda|cuda:N] [--json]
//
// cnn is W-CNN and mlp is W-MLP from docs/workloads.md with SGD, momentum 0.9, lr
// 0.03; mobilenet is nn/models/cnn.h's depthwise-separable network (SGD lr
// 0.05, momentum 0.9); resnet is nn/models/resnet.h's ResNet with widths
// {16, 32, 64} and one BasicBlock a stage (SGD lr 0.05, momentum 0.9; with
// --prune structured:F its channels are pruned by group, the skip-tied ones
// together, prune/channel_groups.h); vit is nn/models/vit.h's small vision transformer
// (AdamW lr 1e-3, weight decay 0.01). The learning rate falls linearly to 0
// over the run (--decay none keeps it fixed): with it the W-CNN reaches
// 98.8% in one epoch where a fixed lr 0.01 gives 98.2% (PyTorch, same model,
// bench/peers/mnist_torch.py; docs/cnn.md). Batches come from a
// data::DataLoader over the training set, shuffled from the seed every epoch,
// made by --workers threads (default 1) ahead of the step. The data directory defaults to datasets/mnist in the
// repository (where scripts/get_data.sh puts it), else ../shared/data/mnist next to it, found from the executable's
// location or the working directory. With --json the last line is one JSON object with the results.
//
// The command line (docs/programs.md): `mnist --help` lists every flag with
// its default; a bad flag or value exits 2 naming it. With --json stdout
// holds only the JSON line and the text goes to stderr.
//
// --amp f16|bf16 trains and evaluates under autocast (docs/mixed_precision.md);
// f16 adds a GradScaler. --half-params also stores the parameters in that
// dtype, with f32 master weights kept by the optimizer. (Not combined with
// --prune or --quantize.)
//
// --device cuda trains and evaluates on the GPU (docs/cuda.md "Training on a
// GPU"): the loader stages batches in pinned memory and a
// data::DevicePrefetcher copies each one step ahead on a copy stream, so the
// copy overlaps the step before it. --prune and --quantize run on the CPU.
//
// Data parallel (docs/distributed.md): run unchanged under `mpirun -np N
// mnist ...` (or srun). Each rank trains a replica on its own shard of every
// epoch (data::ShardedSampler: a disjoint 1/N of the shuffled order) with
// --batch images per step per rank; gradients are averaged across ranks
// during backward (distributed::DataParallel). Rank 0 alone prints.
// samples/s counts all ranks. Not combined with --prune or --quantize.
//
// This file is the program, top to bottom, with the training phases on
// nn::TrainLoop (nn/train_loop.h); mnist.h lists the pieces beside it
// (flags.cpp, model.cpp, compress.cpp).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <snug/snug.h>

#include <snug/data/dataloader.h>
#include <snug/data/device_prefetch.h>
#include <snug/data/mnist.h>
#include <snug/data/sampler.h>
#include <snug/distributed/data_parallel.h>
#include <snug/nn/functional.h>
#include <snug/nn/train_loop.h>
#include <snug/core/cpu_isa.h>
#include <snug/prune/prune.h>

#include "mnist/mnist.h"

using namespace snug;
using namespace mnist;
namespace F = snug::nn::functional;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One training phase's results (the training itself, or a fine-tuning after --prune / QAT).
struct Phase {
  std::vector<double> step_ms;
  double last_epoch_loss = 0, loss_first = -1, accuracy = 0;
  int64_t steps = 0;
};

// What every training phase shares: the data, the loader, the optimizer, the
// loss scaler, and the counts the JSON line reports.
struct Trainer {
  const Args& args;
  Model& m;
  data::DataLoader& loader;
  const data::MnistSplit& test;
  nn::amp::GradScaler& scaler;
  int world;
  bool lead;
  int64_t n_train;
  std::chrono::steady_clock::time_point t_start;
  int64_t skipped = 0;
  std::size_t train_peak = 0;  // bytes: the datasets plus training

  // `epochs` epochs over the loader with m.opt, the lr falling linearly from
  // lr0 to 0 (unless --decay none), printing the loss every --every steps and
  // the test accuracy after every epoch (nn/train_loop.h).
  Phase run(nn::Module& model, int epochs, double lr0, const char* label) {
    Phase ph;
    const int64_t per_epoch = loader.size();  // batches
    const int64_t total_steps = per_epoch * epochs;
    const bool decay = args.decay_name == "linear";
    const DType amp_dtype = args.amp == "f16" ? DType::f16 : DType::bf16;
    std::optional<data::DataLoader::Iterator> it;  // into the current epoch, one batch ahead of the step
    const Device dev(args.device);
    // Batches reach the device one step ahead (data/device_prefetch.h): on a
    // GPU the next batch's copy (from pinned memory) overlaps this step.
    data::DevicePrefetcher prefetch(dev);
    data::Batch batch;  // the step's, on dev
    double loss_sum = 0, epoch_loss = 0;           // since the last progress line, since the epoch began
    int64_t loss_count = 0, epoch_batches = 0, seen = 0, window_samples = 0;
    auto t_window = std::chrono::steady_clock::now();
    nn::TrainLoop loop({.steps = total_steps});
    loop.before_step([&](int64_t step) {
      if (step % per_epoch == 0) {
        it.emplace(loader.begin());  // the next epoch, shuffled from the seed
        epoch_loss = 0;
        epoch_batches = seen = window_samples = 0;
        t_window = std::chrono::steady_clock::now();
        SNUG_CHECK(*it != loader.end(), ValueError, "mnist: the loader has no batch");
        prefetch.push(**it);
      }
      SNUG_CHECK(!prefetch.empty(), ValueError, "mnist: the loader ended its epoch after ", step % per_epoch, " of ",
                 per_epoch, " batches");
      batch = prefetch.pop();
      if (++*it != loader.end()) prefetch.push(**it);  // the next batch starts its trip
      seen += batch.size();
      m.opt->set_lr(decay ? lr0 * (1.0 - double(step) / double(total_steps)) : lr0);
    });
    loop.step([&](int64_t) {
      const Tensor& x = batch[0];  // (B, 1, 28, 28), on dev
      const Tensor& y = batch[1];  // (B)
      m.opt->zero_grad();
      Tensor loss;
      {
        AutocastGuard ac(amp_dtype, !args.amp.empty());
        loss = F::cross_entropy(model.forward(x), y);
      }
      scaler.scale(loss).backward();
      if (!scaler.step(*m.opt)) ++skipped;
      scaler.update();
      return loss.item();
    });
    loop.after_step([&](nn::StepInfo& i) {
      if (ph.loss_first < 0) ph.loss_first = i.loss;
      loss_sum += i.loss;
      epoch_loss += i.loss;
      ++loss_count;
      ++epoch_batches;
      window_samples += batch.size();
    });
    loop.every(
        args.every,
        [&](const nn::StepInfo& i) {
          const double sps = double(window_samples * world) / seconds_since(t_window);
          if (lead)
            std::fprintf(g_text, "%s epoch %lld step %lld (%lld/%lld): loss %.4f, %.0f samples/s, peak allocated %s\n",
                         label, (long long)((i.step - 1) / per_epoch + 1), (long long)i.step, (long long)(seen * world),
                         (long long)n_train, loss_sum / double(loss_count), sps,
                         memory::format_bytes(memory::peak_allocated(dev)).c_str());
          std::fflush(g_text);
          loss_sum = 0;
          loss_count = 0;
          t_window = std::chrono::steady_clock::now();
          window_samples = 0;
        },
        /*and_last=*/false);
    loop.every(per_epoch, [&](const nn::StepInfo& i) {
      SNUG_CHECK(*it == loader.end() && prefetch.empty(), ValueError, "mnist: the loader has more than ", per_epoch,
                 " batches an epoch");
      it.reset();
      batch = data::Batch();
      ph.last_epoch_loss = epoch_loss / double(std::max<int64_t>(epoch_batches, 1));
      train_peak = std::max(train_peak, memory::peak_allocated(dev));  // the evaluation below is not counted
      ph.accuracy = accuracy(model, test, args.amp, dev);
      if (lead)
        std::fprintf(g_text, "%s epoch %lld: train loss %.4f, test accuracy %.2f%%, %.1f s so far\n", label,
                     (long long)(i.step / per_epoch), ph.last_epoch_loss, 100 * ph.accuracy, seconds_since(t_start));
      std::fflush(g_text);
    });
    const nn::TrainSummary sum = loop.run();
    ph.step_ms = sum.step_ms;
    ph.steps = sum.steps_run;
    return ph;
  }
};

int run(int argc, char** argv) {
  // The command line (flags.cpp).
  Args parsed;
  CLI::App app{
      "mnist: trains an image classifier on MNIST and reports its test accuracy; optionally prunes or "
      "quantizes it. See examples/mnist/main.cpp and docs/programs.md.",
      "mnist"};
  cli::init(app);
  add_flags(app, parsed);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  check_flags(parsed);
  const Args& args = parsed;
  if (args.json) g_text = stderr;
  // One process, or one rank of an mpirun/srun job (the launcher's environment says which).
  auto pg = distributed::init_process_group();
  const int world = pg->size(), rank = pg->rank();
  const bool lead = rank == 0;  // alone prints
  SNUG_FLAG_CHECK(world == 1 || (args.prune.empty() && args.quantize.empty()),
                  "--prune and --quantize are not supported with several processes (", world, " ranks) yet");
  set_num_threads(args.threads);
  manual_seed(static_cast<uint64_t>(args.seed));
  const std::string dir = find_data_dir(args.data);

  // The data: MNIST's training and test sets, normalized.
  data::MnistSplit train, test;
  try {
    train = data::load_mnist(dir, true, {.normalize = true});
    test = data::load_mnist(dir, false, {.normalize = true});
  } catch (const Error& e) {
    std::fprintf(stderr, "mnist: %s\n", e.what());
    return 1;
  }
  if (args.limit > 0 && args.limit < train.images.size(0)) {
    train.images = train.images.slice(0, 0, args.limit).contiguous();
    train.labels = train.labels.slice(0, 0, args.limit).contiguous();
  }
  const int64_t n_train = train.images.size(0);

  // The model and its optimizer (model.cpp).
  Model m = make_model(args);
  nn::Module& net = *m.net;
  const int64_t params = net.num_parameters();
  if (lead)
    std::fprintf(g_text,
                 "mnist: model %s, %lld parameters, %lld training / %lld test images from %s, batch %lld%s, lr %g, "
                 "%d threads\n",
                 args.model.c_str(), (long long)params, (long long)n_train, (long long)test.images.size(0), dir.c_str(),
                 (long long)args.batch, world > 1 ? str(" per rank, ", world, " ranks").c_str() : "", m.opt->lr(),
                 args.threads);

  // The loader shuffles from the seed every epoch; its order does not depend
  // on the number of workers (NOTE [ DataLoader order and determinism ]).
  auto dataset = std::make_shared<data::TensorDataset>(std::vector<Tensor>{train.images, train.labels});
  // With N ranks each takes a disjoint 1/N of every epoch's shuffled order
  // (the same order on every rank: a function of seed and epoch).
  std::shared_ptr<const data::Sampler> shard;
  if (world > 1)
    shard = std::make_shared<data::ShardedSampler>(
        n_train, data::ShardOptions{
                     .num_shards = world, .rank = rank, .shuffle = true, .seed = static_cast<uint64_t>(args.seed)});
  data::DataLoader loader(dataset, {.batch_size = args.batch,
                                    .shuffle = true,
                                    .seed = static_cast<uint64_t>(args.seed),
                                    .num_workers = args.workers,
                                    .persistent_workers = true,
                                    .pin_memory = Device(args.device).is_cuda(),
                                    .sampler = shard});
  const double base_lr = m.opt->lr();
  m.base_lr = base_lr;
  const DType amp_dtype = args.amp == "f16" ? DType::f16 : DType::bf16;
  const Device dev(args.device);
  if (dev != kCPU) net.to(dev);           // in place, as below (the optimizer's state is made on first use)
  if (args.half_params) net.to(amp_dtype);  // in place: the optimizer keeps its handles and makes f32 masters
  // Several ranks: rank 0's parameters everywhere, gradients averaged in backward.
  std::optional<distributed::DataParallel> dp;
  if (world > 1) dp.emplace(net, pg);
  // f16 needs loss scaling; bf16 has f32's exponent range.
  nn::amp::GradScaler scaler({.enabled = args.amp == "f16"});
  scaler.name_parameters(net.named_parameters());

  // Training, then --prune / --quantize (compress.cpp), which fine-tune with the same trainer.
  Trainer trainer{.args = args,
                  .m = m,
                  .loader = loader,
                  .test = test,
                  .scaler = scaler,
                  .world = world,
                  .lead = lead,
                  .n_train = n_train,
                  .t_start = std::chrono::steady_clock::now()};
  memory::reset_peak(dev);
  const Phase main_phase = trainer.run(net, args.epochs, base_lr, "train");
  const std::size_t model_bytes_before = prune::parameter_bytes(net) + prune::buffer_bytes(net);
  Compressed c = compress(args, m, train, test, [&](nn::Module& model, int epochs, double lr0, const char* label) {
    return trainer.run(model, epochs, lr0, label).step_ms;
  });

  // The JSON line.
  const double acc = c.done ? c.accuracy : main_phase.accuracy;
  const double median_ms = median(main_phase.step_ms);
  const double total_s = seconds_since(trainer.t_start);
  if (args.json && lead) {
    std::printf(
        "{\"model\": \"%s\", \"epochs\": %d, \"steps\": %lld, \"batch\": %lld, \"threads\": %d, "
        "\"test_accuracy\": %.4f, \"train_loss\": %.4f, \"loss_first\": %.4f, \"ms_per_step\": %.3f, "
        "\"samples_per_s\": %.1f, \"params\": %lld, \"peak_allocated_bytes\": %zu, \"seconds\": %.1f, "
        "\"test_accuracy_before\": %.4f, \"model_bytes\": %zu, \"model_bytes_before\": %zu, \"amp\": \"%s\", "
        "\"half_params\": %s, \"loss_scale\": %.1f, \"skipped_steps\": %lld, \"world_size\": %d, \"cpu_isa\": \"%s\", "
        "\"device\": \"%s\"%s}\n",
        args.model.c_str(), args.epochs, (long long)main_phase.steps, (long long)args.batch, args.threads, acc,
        main_phase.last_epoch_loss, main_phase.loss_first, median_ms,
        median_ms > 0 ? 1e3 * double(args.batch * world) / median_ms : 0, (long long)params, trainer.train_peak,
        total_s, main_phase.accuracy, c.done ? c.model_bytes : model_bytes_before, model_bytes_before,
        args.amp.empty() ? "none" : args.amp.c_str(), args.half_params ? "true" : "false", scaler.get_scale(),
        (long long)trainer.skipped, world, cpu_isa().c_str(), dev.str().c_str(), c.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    // NOTE [ Program exit status ]: 2 for a bad command line, 1 otherwise.
    const int status = cli::exit_status("mnist", e);
    auto pg = distributed::default_group();
    if (pg && pg->size() > 1) {
      // The other ranks would wait for this one; stop the whole job instead.
      std::fprintf(stderr, "mnist: rank %d stops the job\n", pg->rank());
      pg->abort(status);
    }
    return status;
  }
}

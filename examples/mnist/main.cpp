// SPDX-License-Identifier: MIT
// mnist: trains an image classifier on MNIST and reports test accuracy.
//
//   mnist [--model cnn|mlp|mobilenet|vit] [--epochs N] [--batch B] [--lr X]
//         [--decay linear|none] [--workers W] [--data DIR] [--seed S] [--limit N]
//         [--threads T] [--every K] [--amp f16|bf16 [--half-params]] [--json]
//
// cnn is W-CNN and mlp is W-MLP from docs/workloads.md with SGD, momentum 0.9, lr
// 0.03; mobilenet is nn/models/cnn.h's depthwise-separable network (SGD lr
// 0.05, momentum 0.9); vit is nn/models/vit.h's small vision transformer
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
// Data parallel (docs/distributed.md): run unchanged under `mpirun -np N
// mnist ...` (or srun). Each rank trains a replica on its own shard of every
// epoch (data::ShardedSampler: a disjoint 1/N of the shuffled order) with
// --batch images per step per rank; gradients are averaged across ranks
// during backward (distributed::DataParallel). Rank 0 alone prints.
// samples/s counts all ranks. Not combined with --prune or --quantize.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <snug/snug.h>

#include <snug/core/cpu/gemm.h>
#include <snug/data/dataloader.h>
#include <snug/data/mnist.h>
#include <snug/data/sampler.h>
#include <snug/distributed/data_parallel.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/cnn.h>
#include <snug/nn/models/vit.h>
#include <snug/nn/conv.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/core/safetensors.h>
#include <snug/prune/compact.h>
#include <snug/quant/convert.h>
#include <snug/core/raw_int8.h>
#include <snug/prune/prune.h>

#include "common/cli.h"

using namespace snug;
namespace fs = std::filesystem;
namespace F = snug::nn::functional;

namespace {

struct Args {
  std::string model = "cnn";
  int epochs = 1;
  int64_t batch = 64;
  double lr = 0;  // 0: the model's default
  std::string decay_name = "linear";  // linear decay of the lr to 0 over the run, or none
  int workers = 1;
  std::string data;
  int64_t seed = 1337;
  int64_t limit = 0;  // 0: all training images
  int threads = 2;
  int every = 100;
  bool json = false;
  std::string amp;  // "", "f16" or "bf16"
  bool half_params = false;
  // Compression (docs/compression.md).
  std::string prune;        // "l1:0.9", "random:0.5", "global:0.9", "structured:0.5", "2:4"
  bool compact = false;     // after structured pruning: physically remove the pruned channels
  int finetune_epochs = -1;  // after pruning or for QAT; -1: 1 when pruning or with qat, else 0
  double finetune_lr = 0;    // 0: after pruning the model's lr (a short retraining), for QAT a third of it
  std::string quantize;      // dynamic | static | qat
  std::string observer;      // static: minmax (default) | moving_average | percentile; qat: moving_average
  int64_t calib = 2000;      // static: calibration images (the first of the training set)
  std::string save_dir;      // keep the f32 and int8 files there (default: a temporary file, removed)
};

// Human text: stdout, or stderr with --json so that stdout holds only the
// JSON line (docs/programs.md).
FILE* g_text = stdout;

// --prune METHOD:FRACTION or 2:4, checked when the flags are parsed (not after
// the training it follows). Returns {method, fraction}; 2:4 is {"2", -1}.
std::pair<std::string, double> parse_prune(const std::string& spec) {
  if (spec == "2:4") return {"2", -1.0};
  const size_t colon = spec.find(':');
  SNUG_CHECK(colon != std::string::npos, ValueError, "expected METHOD:FRACTION or 2:4, got \"", spec, "\"");
  const std::string method = spec.substr(0, colon), frac = spec.substr(colon + 1);
  SNUG_CHECK(method == "l1" || method == "random" || method == "global" || method == "structured", ValueError,
             "unknown method \"", method, "\" in \"", spec, "\" (expected l1, random, global, structured or 2:4)");
  char* end = nullptr;
  const double amount = std::strtod(frac.c_str(), &end);
  SNUG_CHECK(!frac.empty() && *end == 0 && amount >= 0 && amount <= 1, ValueError, "the fraction in \"", spec,
             "\" must be a number in [0, 1]");
  return {method, amount};
}

// The flags, their defaults and meanings (`mnist --help`).
void add_flags(CLI::App& app, Args& a) {
  using cli::integer;
  using cli::number;
  app.add_option("--model", a.model, "cnn (W-CNN), mlp (W-MLP), mobilenet or vit")
      ->check(CLI::IsMember({"cnn", "mlp", "mobilenet", "vit"}));
  app.add_option("--epochs", a.epochs, "passes over the training set")->transform(integer(1));
  app.add_option("--batch", a.batch, "images per step (per rank under mpirun)")->transform(integer(1));
  app.add_option("--lr", a.lr, "learning rate (0: the model's default, 0.03 cnn and mlp, 0.05 mobilenet, 1e-3 vit)")
      ->transform(number({.lo = 0}));
  app.add_option("--decay", a.decay_name, "learning-rate schedule: linear (to 0 over the run) or none")
      ->check(CLI::IsMember({"linear", "none"}));
  app.add_option("--workers", a.workers, "DataLoader worker threads (0: batches made on the training thread)")
      ->transform(integer(0, 1024));
  app.add_option("--data", a.data,
                 "directory with the four MNIST files [default: found above the executable or the working "
                 "directory, see examples/mnist/main.cpp]")
      ->type_name("DIR");
  app.add_option("--seed", a.seed, "seed of the weights and the shuffling")->transform(integer(0));
  app.add_option("--limit", a.limit, "train on the first N images (0: all)")->transform(integer(0));
  app.add_option("--threads", a.threads, "compute threads")->transform(integer(1, 65536));
  app.add_option("--every", a.every, "print the loss every K steps")->transform(integer(1));
  app.add_flag("--json", a.json, "stdout holds only the final JSON line; the text goes to stderr");
  app.add_option("--amp", a.amp, "train and evaluate under autocast to f16 (with loss scaling) or bf16 [default: none]")
      ->check(CLI::IsMember({"f16", "bf16"}));
  app.add_flag("--half-params", a.half_params, "with --amp: store the parameters in that dtype (f32 master weights)");
  app.add_option("--prune", a.prune, "after training, prune: l1:F, random:F, global:F, structured:F (F in [0, 1]) or 2:4")
      ->check(cli::accepted_by([](const std::string& s) { parse_prune(s); }, "SPEC"));
  app.add_flag("--compact", a.compact, "with --prune structured:F: physically remove the pruned channels");
  app.add_option("--finetune-epochs", a.finetune_epochs,
                 "epochs after pruning or of QAT (-1: 1 when pruning or with qat, else 0)")
      ->transform(integer(-1));
  app.add_option("--finetune-lr", a.finetune_lr,
                 "lr of those epochs (0: the training lr after pruning, a third of it for QAT)")
      ->transform(number({.lo = 0}));
  app.add_option("--quantize", a.quantize, "after training, quantize to int8: dynamic, static or qat")
      ->check(CLI::IsMember({"dynamic", "static", "qat"}));
  app.add_option("--observer", a.observer,
                 "quantization observer [default: minmax for static, moving_average for qat]")
      ->check(CLI::IsMember({"minmax", "moving_average", "percentile"}));
  app.add_option("--calib", a.calib, "static: calibration images (the first of the training set)")
      ->transform(integer(1));
  app.add_option("--save-dir", a.save_dir, "keep the float and int8 files there [default: a temporary file, removed]")
      ->type_name("DIR");
}

// The combinations of flags that cannot work (exit 2, naming the flags).
void check_flags(const Args& a) {
  SNUG_FLAG_CHECK(!a.compact || a.prune.rfind("structured:", 0) == 0, "--compact needs --prune structured:F");
  SNUG_FLAG_CHECK(!a.half_params || !a.amp.empty(), "--half-params needs --amp f16 or --amp bf16");
  SNUG_FLAG_CHECK(a.amp.empty() || (a.prune.empty() && a.quantize.empty()),
                  "--amp does not combine with --prune or --quantize yet");
  SNUG_FLAG_CHECK(a.observer.empty() || a.quantize == "static" || a.quantize == "qat",
                  "--observer goes with --quantize static or qat");
}

// datasets/mnist (scripts/get_data.sh's default) or ../shared/data/mnist, in
// the nearest folder above the executable's directory, then above the working
// directory, that has one; datasets/ first in the same folder.
std::string find_data_dir(const std::string& given) {
  if (!given.empty()) {
    if (!fs::is_directory(given)) {
      std::fprintf(stderr, "mnist: --data %s: no such directory\n", given.c_str());
      std::exit(1);
    }
    return given;
  }
  std::vector<fs::path> starts;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  starts.push_back(fs::current_path());
  for (fs::path p : starts)
    for (; !p.empty(); p = p.parent_path()) {
      for (fs::path cand : {p / "datasets" / "mnist", p / ".." / "shared" / "data" / "mnist"})
        if (fs::is_directory(cand)) return fs::weakly_canonical(cand).string();
      if (p == p.parent_path()) break;
    }
  std::fprintf(stderr,
               "mnist: could not find the MNIST files: looked for datasets/mnist and ../shared/data/mnist above %s and "
               "above the working directory. Run scripts/get_data.sh mnist in the repository (it downloads the four "
               "files into datasets/mnist and checks their sha256), or pass --data DIR (a directory with "
               "train-images-idx3-ubyte.gz and the other three files, from "
               "https://ossci-datasets.s3.amazonaws.com/mnist/)\n",
               starts.front().string().c_str());
  std::exit(1);
}

struct Model {
  std::shared_ptr<nn::Module> net;
  std::unique_ptr<nn::optim::Optimizer> opt;
  double base_lr = 0;  // the lr training started from
};

Model make_model(const Args& a) {
  Model m;
  double lr = a.lr;
  if (a.model == "cnn") {
    m.net = nn::models::make_wcnn();
    if (lr == 0) lr = 0.03;
  } else if (a.model == "mlp") {
    m.net = nn::models::make_wmlp();
    if (lr == 0) lr = 0.03;
  } else if (a.model == "mobilenet") {
    m.net = nn::models::make_mobilenet();
    if (lr == 0) lr = 0.05;
  } else if (a.model == "vit") {
    m.net = nn::models::make_vit();
    m.opt = std::make_unique<nn::optim::AdamW>(m.net->parameters(),
                                               nn::optim::AdamWOptions{.lr = lr == 0 ? 1e-3 : lr, .weight_decay = 0.01});
    return m;
  } else {
    cli::fail("unknown --model ", a.model, " (expected cnn, mlp, mobilenet or vit)");  // add_flags checks it first
  }
  m.opt = std::make_unique<nn::optim::SGD>(m.net->parameters(), nn::optim::SGDOptions{.lr = lr, .momentum = 0.9});
  return m;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Fraction of `split` classified correctly, in batches of 500, eval mode, no grad.
double accuracy(nn::Module& net, const data::MnistSplit& split, const std::string& amp = "") {
  net.eval();
  NoGradGuard ng;
  AutocastGuard ac(amp == "f16" ? DType::f16 : DType::bf16, !amp.empty());
  const int64_t N = split.images.size(0);
  int64_t correct = 0;
  for (int64_t s = 0; s < N; s += 500) {
    const int64_t e = std::min(N, s + 500);
    Tensor pred = net.forward(split.images.slice(0, s, e)).argmax(1);
    correct += static_cast<int64_t>(sum(eq(pred, split.labels.slice(0, s, e)).to(DType::i64)).item());
  }
  net.train();
  return double(correct) / double(N);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// What --prune / --quantize did, for the JSON line.
struct Compressed {
  bool done = false;
  double accuracy = 0;
  std::size_t model_bytes = 0;
  std::string json;  // extra ", \"key\": value" fields
};
using Finetune = std::function<std::vector<double>(nn::Module& model, int epochs, double lr0, const char* label)>;

// The Linear and Conv2d layers of the model in order (the last is the output layer).
std::vector<std::pair<std::string, nn::Module*>> weight_layers(nn::Module& net) {
  std::vector<std::pair<std::string, nn::Module*>> out;
  for (auto& [name, mod] : net.named_modules())
    if (dynamic_cast<nn::Linear*>(mod.get()) || dynamic_cast<nn::Conv2d*>(mod.get())) out.emplace_back(name, mod.get());
  return out;
}

void prune_model(const Args& a, Model& m, const data::MnistSplit& test, const Finetune& finetune, Compressed& c) {
  nn::Module& net = *m.net;
  const auto [method, amount] = parse_prune(a.prune);  // checked when the flags were parsed
  auto layers = weight_layers(net);
  const std::size_t param_bytes_before = prune::parameter_bytes(net);
  if (method == "2") {
    for (auto& [name, l] : layers) {
      Tensor w = l->named_parameters(false).front().second;
      if ((w.numel() / w.size(0)) % 4 == 0) prune::n_m_unstructured(*l, "weight", 2, 4);
    }
  } else {
    if (method == "l1") {
      for (auto& [name, l] : layers) prune::l1_unstructured(*l, "weight", amount);
    } else if (method == "random") {
      for (auto& [name, l] : layers) prune::random_unstructured(*l, "weight", amount);
    } else if (method == "global") {
      std::vector<prune::ParamRef> refs;
      for (auto& [name, l] : layers) refs.emplace_back(l, "weight");
      prune::global_unstructured(refs, amount);
    } else if (method == "structured") {
      // Output channels of every layer but the output layer (its rows are the classes).
      for (size_t i = 0; i + 1 < layers.size(); ++i) prune::output_channels(*layers[i].second, amount);
    } else {
      throw ValueError(str("mnist: --prune ", a.prune, ": unknown method ", method,
                           " (expected l1, random, global, structured or 2:4)"));
    }
  }
  const double acc_pruned = accuracy(net, test);
  std::fprintf(g_text, "pruned (%s): test accuracy %.2f%% before fine-tuning\n", a.prune.c_str(), 100 * acc_pruned);
  if (a.compact) {
    auto rep = prune::compact(net, m.opt.get());
    for (auto& l : rep.layers)
      std::fprintf(g_text, "compact: layer %s: %lld -> %lld channels\n", l.name.c_str(), (long long)l.channels_before,
                  (long long)l.channels_after);
    std::fprintf(g_text, "compact: parameter bytes %zu -> %zu (%.3fx); test accuracy %.2f%%\n", rep.param_bytes_before,
                rep.param_bytes_after, double(rep.param_bytes_after) / double(rep.param_bytes_before),
                100 * accuracy(net, test));
  }
  const int ft_epochs = a.finetune_epochs < 0 ? 1 : a.finetune_epochs;
  // Retraining after heavy pruning wants the training lr: 90% L1 recovers to
  // 98.46% with lr 0.03 but only 98.12% with 0.01 (docs/compression.md).
  const double ft_lr = a.finetune_lr > 0 ? a.finetune_lr : m.base_lr;
  std::vector<double> ms = ft_epochs > 0 ? finetune(net, ft_epochs, ft_lr, "finetune") : std::vector<double>{};
  std::fprintf(g_text, "%s", prune::format_sparsity_report(prune::sparsity_report(net)).c_str());
  prune::remove_all(net);
  int64_t zeros = 0, numel = 0;
  for (auto& r : prune::sparsity_report(net)) {
    zeros += r.zeros;
    numel += r.numel;
  }
  c.done = true;
  c.accuracy = accuracy(net, test);
  c.model_bytes = prune::parameter_bytes(net) + prune::buffer_bytes(net);
  c.json += str(", \"prune\": \"", a.prune, "\", \"compact\": ", a.compact ? "true" : "false",
                ", \"test_accuracy_pruned\": ", acc_pruned, ", \"finetune_epochs\": ", ft_epochs,
                ", \"finetune_lr\": ", ft_lr, ", \"finetune_ms_per_step\": ", median(ms),
                ", \"param_bytes_before\": ", param_bytes_before, ", \"param_bytes\": ", prune::parameter_bytes(net),
                ", \"sparsity\": ", numel ? double(zeros) / double(numel) : 0.0);
}

// The same quantization procedure on `net` (m.net or a fresh model of the
// same architecture), in place; calibration uses the first training images.
quant::Report quantize_model(const Args& a, Model& m, nn::Module& net, const data::MnistSplit& train,
                             const Finetune& finetune, std::vector<double>* qat_ms) {
  auto calibrate = [&](nn::Module& p) {
    p.eval();
    NoGradGuard ng;
    const int64_t n = std::min<int64_t>(a.calib, train.images.size(0));
    for (int64_t s = 0; s < n; s += 500) p.forward(train.images.slice(0, s, std::min(n, s + 500)));
  };
  if (a.quantize == "dynamic") return quant::quantize_dynamic(net);
  if (a.quantize == "static") {
    quant::prepare_static(net, a.observer.empty() ? "minmax" : a.observer);
    calibrate(net);
    return quant::convert(net);
  }
  quant::prepare_qat(net, a.observer.empty() ? "moving_average" : a.observer);
  if (qat_ms) {
    const int ft_epochs = a.finetune_epochs < 0 ? 1 : a.finetune_epochs;
    const double ft_lr = a.finetune_lr > 0 ? a.finetune_lr : m.base_lr / 3;
    if (ft_epochs > 0) *qat_ms = finetune(net, ft_epochs, ft_lr, "qat");  // m.opt holds net's tensors
  } else {
    calibrate(net);  // a skeleton: its values are replaced by the loaded file
  }
  return quant::convert(net);
}

void quantize_model_and_save(const Args& a, Model& m, const data::MnistSplit& train, const data::MnistSplit& test,
                             const Finetune& finetune, Compressed& c) {
  const double acc_float = accuracy(*m.net, test);
  // Files: the float model's state_dict and the int8 model's, both safetensors.
  // The float one first: quantization converts m.net in place.
  const bool keep = !a.save_dir.empty();
  const fs::path dir = keep ? fs::path(a.save_dir) : fs::temp_directory_path();
  const std::string tag = keep ? std::string("mnist_") + a.model : str("snug_mnist_", ::getpid());
  const fs::path f32_path = dir / (tag + "_f32.safetensors"), q_path = dir / (tag + "_int8.safetensors");
  {
    TensorMap t;
    for (auto& [k, v] : m.net->state_dict()) t.emplace_back(k, v);
    save_safetensors(f32_path.string(), t);
  }
  std::vector<double> qat_ms;
  const quant::Report report = quantize_model(a, m, *m.net, train, finetune, &qat_ms);
  nn::Module& q = *m.net;
  const double acc_q = accuracy(q, test);
  std::fprintf(g_text, "quantized (%s): test accuracy %.2f%% (float %.2f%%)\n%s\n", a.quantize.c_str(), 100 * acc_q,
              100 * acc_float, q.pretty().c_str());
  quant::save_quantized(q_path.string(), q);
  const auto f32_bytes = fs::file_size(f32_path), q_bytes = fs::file_size(q_path);
  // Load into a model quantized the same way from fresh float weights.
  Model fresh = make_model(a);
  fresh.base_lr = m.base_lr;
  quantize_model(a, fresh, *fresh.net, train, finetune, nullptr);
  quant::load_quantized(q_path.string(), *fresh.net);
  const double acc_reload = accuracy(*fresh.net, test);
  std::fprintf(g_text, "saved: float %ju bytes, int8 %ju bytes (%.3fx); reloaded int8 model: test accuracy %.2f%%\n",
              (uintmax_t)f32_bytes, (uintmax_t)q_bytes, double(q_bytes) / double(f32_bytes), 100 * acc_reload);
  if (!keep) {
    fs::remove(f32_path);
    fs::remove(q_path);
  }
  c.done = true;
  c.accuracy = acc_q;
  c.model_bytes = quant::model_bytes(q);
  c.json += str(", \"quantize\": \"", a.quantize, "\", \"test_accuracy_float\": ", acc_float,
                ", \"file_bytes_f32\": ", f32_bytes, ", \"file_bytes_int8\": ", q_bytes,
                ", \"file_ratio\": ", double(q_bytes) / double(f32_bytes), ", \"reload_test_accuracy\": ", acc_reload,
                ", \"int8_gemm\": \"", raw::int8_gemm_kernel(), "\"", ", \"layers_quantized\": ",
                report.converted.size(), ", \"modules_left_float\": ", report.left_float.size());
  if (!qat_ms.empty()) c.json += str(", \"qat_ms_per_step\": ", median(qat_ms));
}

Compressed compress(const Args& a, Model& m, const data::MnistSplit& train, const data::MnistSplit& test,
                    const Finetune& finetune) {
  Compressed c;
  if (!a.prune.empty()) prune_model(a, m, test, finetune, c);
  if (!a.quantize.empty()) quantize_model_and_save(a, m, train, test, finetune, c);
  return c;
}

}  // namespace

int run(int argc, char** argv) {
  Args parsed;
  CLI::App app{"mnist: trains an image classifier on MNIST and reports its test accuracy; optionally prunes or "
               "quantizes it. See examples/mnist/main.cpp and docs/programs.md.",
               "mnist"};
  cli::init(app);
  add_flags(app, parsed);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  check_flags(parsed);
  const Args& args = parsed;
  if (args.json) g_text = stderr;
  const bool decay = args.decay_name == "linear";
  // One process, or one rank of an mpirun/srun job (the launcher's environment says which).
  auto pg = distributed::init_process_group();
  const int world = pg->size(), rank = pg->rank();
  const bool lead = rank == 0;  // alone prints
  SNUG_FLAG_CHECK(world == 1 || (args.prune.empty() && args.quantize.empty()),
                  "--prune and --quantize are not supported with several processes (", world, " ranks) yet");
  set_num_threads(args.threads);
  manual_seed(static_cast<uint64_t>(args.seed));
  const std::string dir = find_data_dir(args.data);

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

  Model m = make_model(args);
  nn::Module& net = *m.net;
  const int64_t params = net.num_parameters();
  if (lead)
    std::fprintf(g_text, "mnist: model %s, %lld parameters, %lld training / %lld test images from %s, batch %lld%s, lr %g, "
                "%d threads\n",
                args.model.c_str(), (long long)params, (long long)n_train, (long long)test.images.size(0),
                dir.c_str(), (long long)args.batch, world > 1 ? str(" per rank, ", world, " ranks").c_str() : "",
                m.opt->lr(), args.threads);

  // The loader shuffles from the seed every epoch; its order does not depend
  // on the number of workers (NOTE [ DataLoader order and determinism ]).
  auto dataset = std::make_shared<data::TensorDataset>(std::vector<Tensor>{train.images, train.labels});
  // With N ranks each takes a disjoint 1/N of every epoch's shuffled order
  // (the same order on every rank: a function of seed and epoch).
  std::shared_ptr<const data::Sampler> shard;
  if (world > 1)
    shard = std::make_shared<data::ShardedSampler>(
        n_train, data::ShardOptions{.num_shards = world, .rank = rank, .shuffle = true, .seed = static_cast<uint64_t>(args.seed)});
  data::DataLoader loader(dataset, {.batch_size = args.batch, .shuffle = true, .seed = static_cast<uint64_t>(args.seed),
                                    .num_workers = args.workers, .persistent_workers = true, .sampler = shard});
  const double base_lr = m.opt->lr();
  m.base_lr = base_lr;
  const DType amp_dtype = args.amp == "f16" ? DType::f16 : DType::bf16;
  if (args.half_params) net.to(amp_dtype);  // in place: the optimizer keeps its handles and makes f32 masters
  // Several ranks: rank 0's parameters everywhere, gradients averaged in backward.
  std::optional<distributed::DataParallel> dp;
  if (world > 1) dp.emplace(net, pg);
  // f16 needs loss scaling; bf16 has f32's exponent range.
  nn::amp::GradScaler scaler({.enabled = args.amp == "f16"});
  scaler.name_parameters(net.named_parameters());
  int64_t skipped = 0;
  std::size_t train_peak = 0;  // bytes: the datasets plus training
  const auto t_start = std::chrono::steady_clock::now();
  memory::reset_peak(kCPU);

  // `epochs` epochs over the loader with m.opt, the lr falling linearly from
  // lr0 to 0 (unless --decay none); each step's time goes into step_ms.
  struct Phase {
    std::vector<double> step_ms;
    double last_epoch_loss = 0, loss_first = -1, accuracy = 0;
    int64_t steps = 0;
  };
  auto run_epochs = [&](nn::Module& model, int epochs, double lr0, const char* label) {
    Phase ph;
    const int64_t per_rank = (n_train + world - 1) / world;
    const int64_t total_steps = ((per_rank + args.batch - 1) / args.batch) * epochs;
    double loss_sum = 0;
    int64_t loss_count = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      double epoch_loss = 0;
      int64_t epoch_batches = 0, seen = 0;
      auto t_window = std::chrono::steady_clock::now();
      int64_t window_samples = 0;
      for (data::Batch& batch : loader) {
        const Tensor& x = batch[0];  // (B, 1, 28, 28)
        const Tensor& y = batch[1];  // (B)
        seen += batch.size();
        m.opt->set_lr(decay ? lr0 * (1.0 - double(ph.steps) / double(total_steps)) : lr0);
        const auto t0 = std::chrono::steady_clock::now();
        m.opt->zero_grad();
        Tensor loss;
        {
          AutocastGuard ac(amp_dtype, !args.amp.empty());
          loss = F::cross_entropy(model.forward(x), y);
        }
        scaler.scale(loss).backward();
        if (!scaler.step(*m.opt)) ++skipped;
        scaler.update();
        const double l = loss.item();
        ph.step_ms.push_back(seconds_since(t0) * 1e3);

        if (ph.loss_first < 0) ph.loss_first = l;
        loss_sum += l;
        epoch_loss += l;
        ++loss_count;
        ++epoch_batches;
        ++ph.steps;
        window_samples += batch.size();
        if (ph.steps % args.every == 0) {
          const double sps = double(window_samples * world) / seconds_since(t_window);
          if (lead)
            std::fprintf(g_text, "%s epoch %d step %lld (%lld/%lld): loss %.4f, %.0f samples/s, peak allocated %s\n", label,
                        epoch + 1, (long long)ph.steps, (long long)(seen * world), (long long)n_train,
                        loss_sum / double(loss_count), sps, memory::format_bytes(memory::peak_allocated(kCPU)).c_str());
          std::fflush(g_text);
          loss_sum = 0;
          loss_count = 0;
          t_window = std::chrono::steady_clock::now();
          window_samples = 0;
        }
      }
      ph.last_epoch_loss = epoch_loss / double(std::max<int64_t>(epoch_batches, 1));
      train_peak = std::max(train_peak, memory::peak_allocated(kCPU));  // the evaluation below is not counted
      ph.accuracy = accuracy(model, test, args.amp);
      if (lead)
        std::fprintf(g_text, "%s epoch %d: train loss %.4f, test accuracy %.2f%%, %.1f s so far\n", label, epoch + 1,
                    ph.last_epoch_loss, 100 * ph.accuracy, seconds_since(t_start));
      std::fflush(g_text);
    }
    return ph;
  };

  const Phase main_phase = run_epochs(net, args.epochs, base_lr, "train");
  const std::size_t model_bytes_before = prune::parameter_bytes(net) + prune::buffer_bytes(net);
  Compressed c = compress(args, m, train, test, [&](nn::Module& model, int epochs, double lr0, const char* label) {
    return run_epochs(model, epochs, lr0, label).step_ms;
  });
  const double acc = c.done ? c.accuracy : main_phase.accuracy;
  const double median_ms = median(main_phase.step_ms);
  const double total_s = seconds_since(t_start);
  if (args.json && lead) {
    std::printf("{\"model\": \"%s\", \"epochs\": %d, \"steps\": %lld, \"batch\": %lld, \"threads\": %d, "
                "\"test_accuracy\": %.4f, \"train_loss\": %.4f, \"loss_first\": %.4f, \"ms_per_step\": %.3f, "
                "\"samples_per_s\": %.1f, \"params\": %lld, \"peak_allocated_bytes\": %zu, \"seconds\": %.1f, "
                "\"test_accuracy_before\": %.4f, \"model_bytes\": %zu, \"model_bytes_before\": %zu, \"amp\": \"%s\", "
                "\"half_params\": %s, \"loss_scale\": %.1f, \"skipped_steps\": %lld, \"world_size\": %d%s}\n",
                args.model.c_str(), args.epochs, (long long)main_phase.steps, (long long)args.batch, args.threads, acc,
                main_phase.last_epoch_loss, main_phase.loss_first, median_ms,
                median_ms > 0 ? 1e3 * double(args.batch * world) / median_ms : 0, (long long)params, train_peak, total_s,
                main_phase.accuracy, c.done ? c.model_bytes : model_bytes_before, model_bytes_before,
                args.amp.empty() ? "none" : args.amp.c_str(), args.half_params ? "true" : "false", scaler.get_scale(),
                (long long)skipped, world, c.json.c_str());
  }
  return 0;
}

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

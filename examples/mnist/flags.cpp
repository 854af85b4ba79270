// SPDX-License-Identifier: MIT
// mnist's command line: the flags and their defaults, the combinations that
// cannot work (exit 2 naming the flags, docs/programs.md), and where the data is.
#include <cstdlib>
#include <filesystem>

#include "mnist/mnist.h"

namespace mnist {

namespace fs = std::filesystem;

FILE* g_text = stdout;

// Checked when the flags are parsed (not after the training it follows).
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

void add_flags(CLI::App& app, Args& a) {
  using cli::integer;
  using cli::number;
  app.add_option("--model", a.model, "cnn (W-CNN), mlp (W-MLP), mobilenet, resnet or vit")
      ->check(CLI::IsMember({"cnn", "mlp", "mobilenet", "resnet", "vit"}));
  app.add_option("--epochs", a.epochs, "passes over the training set")->transform(integer(1));
  app.add_option("--batch", a.batch, "images per step (per rank under mpirun)")->transform(integer(1));
  app.add_option("--lr", a.lr, "learning rate (0: the model's default, 0.03 cnn and mlp, 0.05 mobilenet and resnet, 1e-3 vit)")
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
  app.add_option("--device", a.device,
                 "train on this device: cpu, cuda, cuda:N (or a virtual cpu:N); batches are staged in pinned "
                 "memory for a GPU")
      ->transform(cli::device());
  app.add_option("--prune", a.prune,
                 "after training, prune: l1:F, random:F, global:F, structured:F (F in [0, 1]) or 2:4")
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
  app.add_option("--observer", a.observer, "quantization observer [default: minmax for static, moving_average for qat]")
      ->check(CLI::IsMember({"minmax", "moving_average", "percentile"}));
  app.add_option("--calib", a.calib, "static: calibration images (the first of the training set)")
      ->transform(integer(1));
  app.add_option("--save-dir", a.save_dir, "keep the float and int8 files there [default: a temporary file, removed]")
      ->type_name("DIR");
}

void check_flags(const Args& a) {
  SNUG_FLAG_CHECK(!a.compact || a.prune.rfind("structured:", 0) == 0, "--compact needs --prune structured:F");
  SNUG_FLAG_CHECK(!a.half_params || !a.amp.empty(), "--half-params needs --amp f16 or --amp bf16");
  SNUG_FLAG_CHECK(a.amp.empty() || (a.prune.empty() && a.quantize.empty()),
                  "--amp does not combine with --prune or --quantize yet");
  SNUG_FLAG_CHECK(Device(a.device) == kCPU || (a.prune.empty() && a.quantize.empty()),
                  "--prune and --quantize run on the CPU (cpu:0) yet: drop --device ", a.device);
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

}  // namespace mnist

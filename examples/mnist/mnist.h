// SPDX-License-Identifier: MIT
// The pieces of the mnist example (main.cpp reads them top to bottom):
// flags.cpp     the command line, the checks of what goes together, the data directory
// model.cpp     the models, their optimizers and the test accuracy
// compress.cpp  --prune and --quantize after training (docs/compression.md)
#pragma once
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <snug/data/mnist.h>
#include <snug/nn/module.h>
#include <snug/nn/optim/optimizer.h>

#include "common/cli.h"

namespace mnist {

using namespace snug;

// ---- flags.cpp -------------------------------------------------------------

struct Args {
  std::string model = "cnn";
  int epochs = 1;
  int64_t batch = 64;
  double lr = 0;                      // 0: the model's default
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
  std::string device = "cpu";  // where the model, its optimizer and the batches live
  // Compression (docs/compression.md).
  std::string prune;         // "l1:0.9", "random:0.5", "global:0.9", "structured:0.5", "2:4"
  bool compact = false;      // after structured pruning: physically remove the pruned channels
  int finetune_epochs = -1;  // after pruning or for QAT; -1: 1 when pruning or with qat, else 0
  double finetune_lr = 0;    // 0: after pruning the model's lr (a short retraining), for QAT a third of it
  std::string quantize;      // dynamic | static | qat
  std::string observer;      // static: minmax (default) | moving_average | percentile; qat: moving_average
  int64_t calib = 2000;      // static: calibration images (the first of the training set)
  std::string save_dir;      // keep the f32 and int8 files there (default: a temporary file, removed)
};

// Human text: stdout, or stderr with --json so that stdout holds only the
// JSON line (docs/programs.md).
extern FILE* g_text;

// --prune METHOD:FRACTION or 2:4: {method, fraction}; 2:4 is {"2", -1}.
std::pair<std::string, double> parse_prune(const std::string& spec);
// The flags, their defaults and meanings (`mnist --help`).
void add_flags(CLI::App& app, Args& a);
// The combinations of flags that cannot work (exit 2, naming the flags).
void check_flags(const Args& a);
// --data, or datasets/mnist or ../shared/data/mnist above the executable or the working directory.
std::string find_data_dir(const std::string& given);

// ---- model.cpp -------------------------------------------------------------

struct Model {
  std::shared_ptr<nn::Module> net;
  std::unique_ptr<nn::optim::Optimizer> opt;
  double base_lr = 0;  // the lr training started from
};
// --model's network and its optimizer (SGD, or AdamW for vit) at --lr or the model's default.
Model make_model(const Args& a);
// Fraction of `split` classified correctly, in batches of 500 (each copied to
// `device`, the model's), eval mode, no grad.
double accuracy(nn::Module& net, const data::MnistSplit& split, const std::string& amp = "", Device device = kCPU);
// The upper median (0 for none).
double median(std::vector<double> v);

// ---- compress.cpp ----------------------------------------------------------

// What --prune / --quantize did, for the JSON line.
struct Compressed {
  bool done = false;
  double accuracy = 0;
  std::size_t model_bytes = 0;
  std::string json;  // extra ", \"key\": value" fields
};
using Finetune = std::function<std::vector<double>(nn::Module& model, int epochs, double lr0, const char* label)>;

// --prune, then --quantize, of the trained m (nothing without either flag).
Compressed compress(const Args& a, Model& m, const data::MnistSplit& train, const data::MnistSplit& test,
                    const Finetune& finetune);

}  // namespace mnist

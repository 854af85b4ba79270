// SPDX-License-Identifier: MIT
// snug-bench quant: int8 quantization of a GPT trained briefly on tiny
// shakespeare (char level), three ways, against the float model.
//
// 1. Train a GPT (--layers, --heads, --embd, --block) for --steps AdamW
//    steps (lr 1e-3) on random (B, T) windows of the first 90% of the text.
// 2. Evaluate the mean cross-entropy on --eval-batches fixed windows of the
//    last 10% (the same windows for every model).
// 3. For dynamic, static (minmax observers, --calib training batches) and
//    QAT (--qat-steps AdamW steps at lr 1e-4 through fake quantization):
//    a fresh GPT loaded with the float weights, quantized in place, then
//    evaluated the same way. Reported per model: validation loss,
//    quant::model_bytes (parameters + buffers + packed int8 weights), the
//    bytes of its safetensors file, and how many layers were quantized.
//   snug-bench quant [--data examples/charlm/data/tinyshakespeare.txt] [--steps 300] [--json]
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <snug/autograd/grad_mode.h>
#include <snug/core/cpu/gemm.h>
#include <snug/core/generator.h>
#include <snug/core/safetensors.h>
#include <snug/data/text.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/quant/convert.h>
#include "bench/bench.h"

namespace snug::bench {
namespace {

struct Windows {
  Tensor x, y;  // (B, T) i64
};

// B windows of T + 1 tokens at random offsets in ids[lo, hi).
Windows windows(const std::vector<int64_t>& ids, int64_t lo, int64_t hi, int64_t B, int64_t T, Generator& g) {
  const std::vector<int64_t> at = randint(lo, hi - T - 1, {B}, DType::i64, &g).to_vector<int64_t>();
  std::vector<int64_t> x, y;
  for (int64_t o : at)
    for (int64_t t = 0; t < T; ++t) {
      x.push_back(ids[size_t(o + t)]);
      y.push_back(ids[size_t(o + t + 1)]);
    }
  return {from_vector(x, {B, T}), from_vector(y, {B, T})};
}

double eval_loss(nn::models::GPT& m, const std::vector<Windows>& val) {
  NoGradGuard ng;
  m.eval();
  double s = 0;
  for (const Windows& w : val) s += m.loss(w.x, w.y).item();
  return s / double(val.size());
}

std::size_t file_bytes(const std::string& path, const nn::Module& m, bool quantized) {
  if (quantized) {
    quant::save_quantized(path, m);
  } else {
    TensorMap t;
    for (auto& [k, v] : m.state_dict()) t.emplace_back(k, v);
    save_safetensors(path, t);
  }
  const auto n = std::filesystem::file_size(path);
  std::filesystem::remove(path);
  return std::size_t(n);
}

struct Row {
  std::string model;
  double loss;
  std::size_t bytes, file;
  size_t quantized, left;
};

}  // namespace

SNUG_BENCH(quant, "int8 quantization (dynamic, static, QAT) of a GPT trained on tiny shakespeare: loss and bytes",
           text_flag("data", "",
                     "text corpus [default: $SNUG_SOURCE_DIR (else .)/examples/charlm/data/tinyshakespeare.txt]",
                     "FILE"),
           int_flag("steps", 300, "AdamW training steps of the float model", 0),
           int_flag("qat-steps", 50, "quantization-aware training steps", 0), int_flag("batch", 16, "batch size"),
           int_flag("calib", 8, "static: calibration batches"),
           int_flag("eval-batches", 20, "validation batches (the same for every model)"),
           int_flag("block", 64, "sequence length"), int_flag("layers", 4, "GPT layers"),
           int_flag("heads", 4, "attention heads"), int_flag("embd", 128, "channels (a multiple of --heads)"),
           int_flag("seed", 1337, "seed of the weights and batches", 0), int_flag("threads", 2, "compute threads")) {
  const std::string src = std::getenv("SNUG_SOURCE_DIR") ? std::getenv("SNUG_SOURCE_DIR") : ".";
  const std::string path = args.has("data") ? args.get("data") : src + "/examples/charlm/data/tinyshakespeare.txt";
  const int64_t steps = args.get_int("steps"), qat_steps = args.get_int("qat-steps");
  const int64_t B = args.get_int("batch"), calib = args.get_int("calib");
  const int64_t neval = args.get_int("eval-batches");
  nn::models::GPTConfig cfg;
  cfg.block = args.get_int("block");
  cfg.layers = args.get_int("layers");
  cfg.heads = args.get_int("heads");
  cfg.embd = args.get_int("embd");
  check_gpt_flags(cfg);
  const auto seed = uint64_t(args.get_int("seed"));
  set_num_threads(int(args.get_int("threads")));

  const std::string text = data::read_text_file(path);
  const data::CharTokenizer tok = data::CharTokenizer::fit(text);
  const std::vector<int64_t> ids = tok.encode(text);
  const auto n = int64_t(ids.size()), split = n * 9 / 10;
  cfg.vocab = tok.vocab_size();
  const int64_t T = cfg.block;
  Generator gval(seed + 1), gcal(seed + 2);
  std::vector<Windows> val, cal;
  for (int64_t i = 0; i < neval; ++i) val.push_back(windows(ids, split, n, B, T, gval));
  for (int64_t i = 0; i < calib; ++i) cal.push_back(windows(ids, 0, split, B, T, gcal));

  manual_seed(seed);
  nn::models::GPT gpt(cfg);
  {
    nn::optim::AdamW opt(gpt.parameters(), {.lr = 1e-3});
    Generator g(seed);
    gpt.train();
    const double t0 = now_seconds();
    for (int64_t s = 0; s < steps; ++s) {
      Windows w = windows(ids, 0, split, B, T, g);
      opt.zero_grad();
      Tensor loss = gpt.loss(w.x, w.y);
      loss.backward();
      opt.step();
      if (!args.json() && (s % 50 == 0 || s + 1 == steps))
        std::fprintf(stderr, "step %lld loss %.4f (%.1f s)\n", (long long)s, loss.item(), now_seconds() - t0);
    }
  }
  const std::string tmp = (std::filesystem::temp_directory_path() / str("snug_bench_quant_", ::getpid())).string();
  std::vector<Row> rows;
  rows.push_back({"float", eval_loss(gpt, val), quant::model_bytes(gpt), file_bytes(tmp, gpt, false), 0, 0});
  nn::NamedTensors float_state;
  for (auto& [k, v] : gpt.state_dict()) float_state.emplace_back(k, v.clone());

  for (const char* mode : {"dynamic", "static", "qat"}) {
    manual_seed(seed);
    nn::models::GPT m(cfg);
    m.load_state_dict(float_state);
    quant::Report r;
    if (std::string(mode) == "dynamic") {
      r = quant::quantize_dynamic(m);
    } else if (std::string(mode) == "static") {
      quant::prepare_static(m);
      NoGradGuard ng;
      for (const Windows& w : cal) m.forward(w.x);
      r = quant::convert(m);
    } else {
      nn::optim::AdamW opt(m.parameters(), {.lr = 1e-4});
      quant::prepare_qat(m);
      m.train();
      Generator g(seed + 3);
      for (int64_t s = 0; s < qat_steps; ++s) {
        Windows w = windows(ids, 0, split, B, T, g);
        opt.zero_grad();
        m.loss(w.x, w.y).backward();
        opt.step();
      }
      r = quant::convert(m);
    }
    rows.push_back({mode, eval_loss(m, val), quant::model_bytes(m), file_bytes(tmp, m, true), r.converted.size(),
                    r.left_float.size()});
  }

  if (args.json()) {
    std::string j = str("{\"bench\":\"quant\",\"model\":\"gpt\",\"vocab\":", cfg.vocab, ",\"block\":", cfg.block,
                        ",\"layers\":", cfg.layers, ",\"heads\":", cfg.heads, ",\"embd\":", cfg.embd,
                        ",\"steps\":", steps, ",\"qat_steps\":", qat_steps, ",\"batch\":", B);
    for (const Row& r : rows)
      j += str(",\"", r.model, "\":{\"val_loss\":", r.loss, ",\"model_bytes\":", r.bytes, ",\"file_bytes\":", r.file,
               ",\"layers_quantized\":", r.quantized, ",\"modules_left_float\":", r.left, "}");
    std::printf("%s}\n", j.c_str());
  } else {
    std::printf("GPT(vocab=%lld, block=%lld, layers=%lld, heads=%lld, embd=%lld), %lld steps on %s\n",
                (long long)cfg.vocab, (long long)cfg.block, (long long)cfg.layers, (long long)cfg.heads,
                (long long)cfg.embd, (long long)steps, path.c_str());
    std::printf("%-8s %9s %12s %12s %10s %6s\n", "model", "val_loss", "model_bytes", "file_bytes", "quantized",
                "float");
    for (const Row& r : rows)
      std::printf("%-8s %9.4f %12zu %12zu %10zu %6zu\n", r.model.c_str(), r.loss, r.bytes, r.file, r.quantized, r.left);
  }
  return 0;
}

}  // namespace snug::bench

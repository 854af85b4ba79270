// SPDX-License-Identifier: MIT
// After training: --prune (then fine-tuning) and --quantize (dynamic, static
// or QAT; saved, reloaded and checked), for the JSON line (docs/compression.md).
#include <unistd.h>

#include <filesystem>
#include <set>

#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_int8.h>
#include <snug/core/safetensors.h>
#include <snug/nn/conv.h>
#include <snug/nn/layers.h>
#include <snug/prune/channel_groups.h>
#include <snug/prune/compact.h>
#include <snug/prune/prune.h>
#include <snug/quant/convert.h>

#include "mnist/mnist.h"

namespace mnist {

namespace fs = std::filesystem;

namespace {

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
  const int64_t params_before = net.num_parameters();
  const double acc_before = accuracy(net, test);
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
      // A residual network's channels by group (prune/channel_groups.h): inside
      // each block freely, across a skip connection all its layers together.
      const auto groups = prune::channel_groups(net);
      std::set<const nn::Module*> grouped;
      for (const auto& g : groups) {
        prune::prune_group(g, amount);
        for (const auto& s : g.sources) grouped.insert(s.layer);
      }
      if (!groups.empty())
        std::fprintf(g_text, "structured: %zu channel groups (prune/channel_groups.h), %.0f%% of each pruned\n",
                     groups.size(), 100 * amount);
      // Output channels of every other layer but the output layer (its rows are the classes).
      for (size_t i = 0; i + 1 < layers.size(); ++i)
        if (!grouped.count(layers[i].second)) prune::output_channels(*layers[i].second, amount);
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
  const int64_t params_after = net.num_parameters();
  std::fprintf(g_text,
               "pruned (%s%s): parameters %lld -> %lld (%.1f%% fewer), parameter bytes %zu -> %zu, test accuracy "
               "%.2f%% -> %.2f%% (%+.2f points)\n",
               a.prune.c_str(), a.compact ? ", compacted" : "", (long long)params_before, (long long)params_after,
               100.0 * double(params_before - params_after) / double(params_before), param_bytes_before,
               prune::parameter_bytes(net), 100 * acc_before, 100 * c.accuracy, 100 * (c.accuracy - acc_before));
  c.json += str(", \"prune\": \"", a.prune, "\", \"compact\": ", a.compact ? "true" : "false",
                ", \"test_accuracy_pruned\": ", acc_pruned, ", \"finetune_epochs\": ", ft_epochs,
                ", \"finetune_lr\": ", ft_lr, ", \"finetune_ms_per_step\": ", median(ms),
                ", \"param_bytes_before\": ", param_bytes_before, ", \"param_bytes\": ", prune::parameter_bytes(net),
                ", \"params_before\": ", params_before, ", \"params_after\": ", params_after,
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
  c.json += str(
      ", \"quantize\": \"", a.quantize, "\", \"test_accuracy_float\": ", acc_float, ", \"file_bytes_f32\": ", f32_bytes,
      ", \"file_bytes_int8\": ", q_bytes, ", \"file_ratio\": ", double(q_bytes) / double(f32_bytes),
      ", \"reload_test_accuracy\": ", acc_reload, ", \"int8_gemm\": \"", raw::int8_gemm_kernel(), "\"",
      ", \"layers_quantized\": ", report.converted.size(), ", \"modules_left_float\": ", report.left_float.size());
  if (!qat_ms.empty()) c.json += str(", \"qat_ms_per_step\": ", median(qat_ms));
}

}  // namespace

Compressed compress(const Args& a, Model& m, const data::MnistSplit& train, const data::MnistSplit& test,
                    const Finetune& finetune) {
  Compressed c;
  if (!a.prune.empty()) prune_model(a, m, test, finetune, c);
  if (!a.quantize.empty()) quantize_model_and_save(a, m, train, test, finetune, c);
  return c;
}

}  // namespace mnist

// SPDX-License-Identifier: MIT
// Tutorial chapter 6 (docs/tutorial/06-fitting-in-memory.md): six ways to
// make training (or inference) take less memory, each measured here on the
// virtual device cpu:2: the peak bytes of a step (or the bytes held) without
// and with it. Exits 1 if a technique saves nothing or changes the result.
#include <snug/snug.h>

#include <cstdio>
#include <iostream>

using namespace snug;
using memory::format_bytes;

const Device dev("cpu:2");
// A batch much larger than the width: activations, not weights, fill the step.
constexpr int64_t kBatch = 1024, kWidth = 128, kDepth = 8;

// kDepth x (Linear + ReLU) and a Linear head; the same weights for the same seed.
std::shared_ptr<nn::Sequential> make_model(Device device = dev, uint64_t seed = 1) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  for (int i = 0; i < kDepth; ++i)
    m->push_back(std::make_shared<nn::Linear>(kWidth, kWidth)).push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(kWidth, 10));
  m->to(device);
  return m;
}

// The most bytes f adds on dev while it runs, above what was live before it.
template <class F>
int64_t peak_during(F&& f) {
  memory::reset_peak(dev);
  const auto base = int64_t(memory::allocated(dev));
  f();
  return int64_t(memory::peak_allocated(dev)) - base;
}
// A step's two numbers: what the forward keeps for backward (with the loss),
// and the peak of forward and backward together.
struct Cost {
  int64_t kept, peak;
};
template <class F>
Cost cost_of(F&& forward) {
  Tensor loss;
  int64_t kept = 0;
  const int64_t peak = peak_during([&] {
    const auto base = int64_t(memory::allocated(dev));
    loss = forward();
    kept = int64_t(memory::allocated(dev)) - base;
    loss.backward();
  });
  return {kept, peak};
}

double max_diff(const Tensor& a, const Tensor& b) { return amax(abs(a.to(kFloat32) - b.to(kFloat32))).item(); }

int failures = 0;
void expect(bool ok, const std::string& what) {
  std::cout << (ok ? "ok:   " : "FAIL: ") << what << "\n";
  failures += ok ? 0 : 1;
}
// One line of the table: the bytes without and with a technique; it must save some.
void report(const char* what, int64_t without, int64_t with) {
  std::printf("%-36s %10s -> %10s  saves %5.1f%%\n", what, format_bytes(without).c_str(), format_bytes(with).c_str(),
              100.0 * double(without - with) / double(without));
  if (with >= without) expect(false, std::string(what) + " saves nothing");
}

int main() {
  auto model = make_model();
  Tensor x = randn({kBatch, kWidth}).to(dev), y = randint(0, 10, {kBatch}).to(dev);
  auto loss_of = [&](const Tensor& logits, const Tensor& t) { return nn::functional::cross_entropy(logits, t); };
  // ---- the baseline: one forward and backward of the whole batch ----
  const Cost plain = cost_of([&] { return loss_of(model->forward(x), y); });
  std::vector<Tensor> g_plain;
  for (const Tensor& p : model->parameters()) g_plain.push_back(p.grad());
  model->zero_grad();  // set_to_none: each run starts without gradients
  // The largest difference between the gradients now and the baseline's; clears them.
  auto grad_diff = [&] {
    double d = 0;
    for (size_t i = 0; i < g_plain.size(); ++i) d = std::max(d, max_diff(g_plain[i], model->parameters()[i].grad()));
    model->zero_grad();
    return d;
  };

  // ---- 1. checkpointing: keep 4 segment inputs, recompute the rest in backward ----
  const Cost ckpt = cost_of([&] { return loss_of(nn::checkpoint_sequential(*model, 4, x), y); });
  expect(grad_diff() == 0, "checkpointed gradients are bit for bit the plain ones");
  report("checkpoint: kept by the forward", plain.kept, ckpt.kept);
  report("checkpoint: peak of the step", plain.peak, ckpt.peak);

  // ---- 2. gradient accumulation: 4 micro-batches of 256, the gradients of one batch of 1024 ----
  const int64_t accum = peak_during([&] {
    auto acc = nn::GradAccumulator::equal(4);  // each micro-batch loss is scaled by 1/4
    auto xs = nn::split_batch(x, 4), ys = nn::split_batch(y, 4);
    for (int k = 0; k < 4; ++k) acc.backward(loss_of(model->forward(xs[k]), ys[k]));
  });
  expect(grad_diff() < 1e-6, "accumulated gradients equal the big batch's (to rounding)");
  report("accumulation (4 micro-batches)", plain.peak, accum);

  // ---- 3. mixed precision: matmuls in bf16 (and f16 with a GradScaler) ----
  double loss16 = 0;
  const Cost bf16 = cost_of([&] {
    AutocastGuard autocast(kBFloat16);         // the forward only; backward follows the recorded dtypes
    Tensor l = loss_of(model->forward(x), y);  // the loss is computed in f32 (autocast widens it)
    loss16 = l.item();
    return l;
  });
  model->zero_grad();
  const double loss32 = loss_of(model->forward(x), y).item();
  report("autocast bf16: kept by the forward", plain.kept, bf16.kept);
  report("autocast bf16: peak of the step", plain.peak, bf16.peak);
  expect(std::abs(loss16 - loss32) < 0.02 * loss32, "the bf16 loss is within 2% of the f32 loss");
  {
    nn::optim::AdamW opt(model->parameters());
    nn::amp::GradScaler scaler;  // f16 has a narrow range: scale the loss up first
    for (int step = 0; step < 3; ++step) {
      Tensor l;
      {
        AutocastGuard autocast(kFloat16);
        l = loss_of(model->forward(x), y);
      }
      opt.zero_grad();
      scaler.scale(l).backward();
      scaler.step(opt);  // unscales; skips the step if a gradient overflowed
      scaler.update();
    }
    std::cout << "f16 + GradScaler: scale " << scaler.get_scale() << ", skipped steps " << scaler.skipped_steps()
              << "\n";
    expect(scaler.skipped_steps() == 0, "no f16 step overflowed");
  }

  // ---- 4. the 8-bit optimizer: AdamW's two moments in one byte each ----
  auto opt_bytes = [&](auto&& opt) {
    loss_of(model->forward(x), y).backward();
    opt.step();
    model->zero_grad();
    return int64_t(opt.state_bytes());
  };
  const int64_t adamw = opt_bytes(nn::optim::AdamW(model->parameters()));
  const int64_t adamw8 = opt_bytes(nn::optim::AdamW8bit(model->parameters()));
  report("AdamW8bit state (vs AdamW)", adamw, adamw8);

  // ---- 5. pruning: half of every hidden layer's outputs, then compaction ----
  auto pruned = make_model();
  for (int i = 0; i < kDepth; ++i) prune::output_channels(*(*pruned)[2 * i], 0.5);  // the Linears
  prune::remove_all(*pruned);                                                       // keep the zeros, drop the masks
  Tensor before = pruned->forward(x);
  prune::CompactReport r = prune::compact(*pruned);
  report("pruning 50% + compact: parameters", int64_t(r.param_bytes_before), int64_t(r.param_bytes_after));
  expect(max_diff(before, pruned->forward(x)) < 1e-4, "the compacted model computes what the pruned one did");
  const int64_t step_pruned = peak_during([&] { loss_of(pruned->forward(x), y).backward(); });
  report("pruning 50% + compact: a step", plain.peak, step_pruned);

  // ---- 6. quantization: int8 weights for inference ----
  auto q = make_model(kCPU);  // the int8 kernels run on the host (cpu:0)
  q->eval();
  NoGradGuard no_grad;
  const Tensor xc = x.to(kCPU), ref = q->forward(xc);
  const int64_t float_bytes = int64_t(quant::model_bytes(*q));
  quant::quantize_dynamic(*q);  // Linear -> QuantizedLinear, in place
  report("quantize_dynamic: model bytes", float_bytes, int64_t(quant::model_bytes(*q)));
  const double rel = max_diff(q->forward(xc), ref) / amax(abs(ref)).item();
  std::cout << "int8 output vs f32: largest difference " << rel * 100 << "% of the largest output\n";
  expect(rel < 0.05, "the int8 model's outputs are within 5% of the float model's");

  std::cout << (failures == 0 ? "PASS" : "FAILED") << "\n";
  return failures == 0 ? 0 : 1;
}

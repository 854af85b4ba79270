// SPDX-License-Identifier: MIT
// The models mnist trains (docs/workloads.md), their optimizers, and the test accuracy.
#include <algorithm>

#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_ops.h>
#include <snug/nn/fuse.h>
#include <snug/nn/models/cnn.h>
#include <snug/nn/models/resnet.h>
#include <snug/nn/models/vit.h>

#include "mnist/mnist.h"

namespace mnist {

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
  } else if (a.model == "resnet") {
    m.net = nn::models::make_resnet({.in_channels = 1, .classes = 10, .widths = {16, 32, 64}, .blocks = {1, 1, 1}});
    if (lr == 0) lr = 0.05;
  } else if (a.model == "vit") {
    m.net = nn::models::make_vit();
    m.opt = std::make_unique<nn::optim::AdamW>(
        m.net->parameters(), nn::optim::AdamWOptions{.lr = lr == 0 ? 1e-3 : lr, .weight_decay = 0.01});
    return m;
  } else {
    cli::fail("unknown --model ", a.model, " (expected cnn, mlp, mobilenet, resnet or vit)");  // add_flags checks it first
  }
  if (a.prune.empty() && a.quantize.empty()) nn::fuse(*m.net);  // fused layers (nn/fuse.h); prune/quant want plain ones
  m.opt = std::make_unique<nn::optim::SGD>(m.net->parameters(), nn::optim::SGDOptions{.lr = lr, .momentum = 0.9});
  return m;
}

// Fraction of `split` classified correctly, in batches of 500, eval mode, no grad.
double accuracy(nn::Module& net, const data::MnistSplit& split, const std::string& amp, Device device) {
  net.eval();
  NoGradGuard ng;
  AutocastGuard ac(amp == "f16" ? DType::f16 : DType::bf16, !amp.empty());
  const int64_t N = split.images.size(0);
  int64_t correct = 0;
  for (int64_t s = 0; s < N; s += 500) {
    const int64_t e = std::min(N, s + 500);
    Tensor pred = net.forward(split.images.slice(0, s, e).to(device)).argmax(1);
    correct += static_cast<int64_t>(sum(eq(pred, split.labels.slice(0, s, e).to(device)).to(DType::i64)).item());
  }
  net.train();
  return double(correct) / double(N);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace mnist

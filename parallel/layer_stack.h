// SPDX-License-Identifier: MIT
// A model seen as a stack of single-tensor layers plus a loss: the form that
// placement across devices and pipelining work on (docs/placement.md).
//
//   LayerStack s = gpt_stack(gpt);           // [embed, block 0..L-1, head]
//   Tensor loss = s.loss(run_stack(s, x), y); // layers may sit on different devices
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <snug/nn/models/gpt.h>
#include <snug/nn/module.h>

namespace snug::parallel {

struct LayerStack {
  std::vector<std::shared_ptr<nn::Module>> layers;  // layer i: forward(Tensor) -> Tensor
  std::vector<std::string> names;                   // one per layer, for plans and errors
  // (last layer's output, targets) -> scalar loss, a mean over the batch.
  std::function<Tensor(const Tensor& output, const Tensor& target)> loss;
  // Every trainable parameter once (tied weights once, owned by their first layer).
  std::vector<Tensor> parameters() const;
  size_t size() const { return layers.size(); }
};

// The device a layer's parameters live on (the first parameter's; cpu for a
// layer without parameters).
Device layer_device(const nn::Module& layer);

// Runs x through every layer, copying it to each layer's device first with
// the differentiable Tensor::to, so backward copies gradients back. Layers
// without parameters run where their input is.
Tensor run_stack(const LayerStack& stack, Tensor x);

// GPT as [embed (wte + wpe + dropout), block 0, ..., block L-1, head (ln_f +
// the tied output projection)], loss = cross-entropy over (B*T, vocab). The
// layers share the GPT's parameters. The head reads the tied embedding weight
// through a differentiable copy when it sits on another device, so the weight
// keeps one owner (the embed layer) and one optimizer entry.
LayerStack gpt_stack(nn::models::GPT& gpt);

// A Sequential's children as layers, loss = cross_entropy(logits, labels).
LayerStack sequential_stack(nn::Sequential& seq);

}  // namespace snug::parallel

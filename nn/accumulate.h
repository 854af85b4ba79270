// SPDX-License-Identifier: MIT
// Gradient accumulation: K micro-batches whose gradients add up to those of
// one batch made of all of them, at about 1/K of the activation memory.
//
// A mean loss weighs each of its n items (rows, tokens) 1/n. The big batch's
// mean over N = n_1 + ... + n_K items weighs each 1/N, so micro-batch k's
// mean loss must be scaled by n_k / N before its backward: 1/K when the
// micro-batches are equal, and the real token counts when they are not
// (variable-length sequences whose padding the loss ignores). Scaling every
// micro-batch by 1/K there would over-weight the tokens of short batches.
//
//   GradAccumulator acc(total_tokens);              // N, known before the first micro-batch
//   for (k...) acc.backward(model.loss(x[k], y[k]), count_tokens(y[k]));
//   opt.step();                                      // acc.loss() is the big batch's loss
#pragma once
#include <cstdint>
#include <vector>

#include <snug/core/tensor.h>

namespace snug::nn {

class GradAccumulator {
 public:
  // total_weight: N, the items (rows or tokens) over all micro-batches of the step.
  explicit GradAccumulator(double total_weight);
  // K equal micro-batches: each has weight 1 and N = K.
  static GradAccumulator equal(int64_t k) { return GradAccumulator(static_cast<double>(k)); }

  // Runs backward of mean_loss * weight / N (mean_loss: a one-element loss
  // averaged over the micro-batch's `weight` items) and returns that scaled
  // value. Throws ValueError if the weights seen so far exceed N.
  double backward(const Tensor& mean_loss, double weight = 1.0);
  // The loss of the whole batch so far: the sum of the scaled micro-batch losses.
  double loss() const { return loss_; }
  double weight_seen() const { return seen_; }
  double total_weight() const { return total_; }

 private:
  double total_;
  double seen_ = 0;
  double loss_ = 0;
};

// Targets that count toward a mean cross-entropy: those != ignore_index.
int64_t count_tokens(const Tensor& targets, int64_t ignore_index = -100);

// t split along dim 0 into k views whose sizes differ by at most one.
//   t (N, ...) -> k x (N/k or N/k+1, ...)
std::vector<Tensor> split_batch(const Tensor& t, int64_t k);

}  // namespace snug::nn

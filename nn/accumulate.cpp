// SPDX-License-Identifier: MIT
#include <snug/nn/accumulate.h>

#include <cmath>

#include <snug/autograd/ops.h>
#include <snug/core/raw_ops.h>

namespace snug::nn {

GradAccumulator::GradAccumulator(double total_weight) : total_(total_weight) {
  SNUG_CHECK(total_weight > 0 && std::isfinite(total_weight), ValueError,
             "GradAccumulator: the total weight must be positive, got ", total_weight);
}

double GradAccumulator::backward(const Tensor& mean_loss, double weight) {
  SNUG_CHECK(mean_loss.numel() == 1, ShapeError, "GradAccumulator: expected a one-element loss, got shape ",
             shape_str(mean_loss.shape()));
  SNUG_CHECK(weight >= 0, ValueError, "GradAccumulator: a micro-batch weight must be >= 0, got ", weight);
  // A little slack for weights summed in floating point.
  SNUG_CHECK(seen_ + weight <= total_ * (1 + 1e-12), ValueError, "GradAccumulator: micro-batch weights add up to ",
             seen_ + weight, ", more than the total ", total_, " given at construction");
  seen_ += weight;
  if (weight == 0) return 0;  // an all-padding micro-batch: its mean is 0/0, and it adds nothing
  Tensor scaled = mean_loss * (weight / total_);
  scaled.backward();
  const double v = scaled.item();
  loss_ += v;
  return v;
}

int64_t count_tokens(const Tensor& targets, int64_t ignore_index) {
  Tensor valid = raw::compare_scalar(CompareOp::ne, targets, static_cast<double>(ignore_index));
  return static_cast<int64_t>(
      std::llround(raw::reduce(ReduceOp::sum, raw::to_dtype(valid, DType::f64), {}, false).item()));
}

std::vector<Tensor> split_batch(const Tensor& t, int64_t k) {
  SNUG_CHECK(t.dim() >= 1, ShapeError, "split_batch: expected at least one dim, got a 0-d tensor");
  const int64_t n = t.size(0);
  SNUG_CHECK(k >= 1 && k <= n, ValueError, "split_batch: cannot split ", n, " rows into ", k, " micro-batches");
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t len = n / k + (i < n % k ? 1 : 0);
    out.push_back(t.slice(0, at, at + len));
    at += len;
  }
  return out;
}

}  // namespace snug::nn

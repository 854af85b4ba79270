// SPDX-License-Identifier: MIT
// Grad mode: whether ops record history. Thread-local, like PyTorch.
#pragma once

namespace snug::autograd {

bool is_grad_enabled();
void set_grad_enabled(bool on);

// Disables recording for its lifetime (torch::NoGradGuard).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Sets grad mode to `on` for its lifetime (torch::AutoGradMode).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool on);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

// Anomaly mode: every recorded op checks its outputs, and every backward
// node its gradients, for NaN/inf, and throws an AutogradError naming the
// forward op (and the tensor name, if set). Thread-local.
bool is_anomaly_enabled();
void set_anomaly_enabled(bool on);
class AnomalyGuard {
 public:
  explicit AnomalyGuard(bool on = true);
  ~AnomalyGuard();
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace snug::autograd

namespace snug {
using autograd::NoGradGuard;
}

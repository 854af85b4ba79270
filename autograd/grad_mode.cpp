// SPDX-License-Identifier: MIT
#include <snug/autograd/grad_mode.h>

namespace snug::autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly = false;
}  // namespace

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }
GradModeGuard::GradModeGuard(bool on) : prev_(t_grad_enabled) { t_grad_enabled = on; }
GradModeGuard::~GradModeGuard() { t_grad_enabled = prev_; }

bool is_anomaly_enabled() { return t_anomaly; }
void set_anomaly_enabled(bool on) { t_anomaly = on; }
AnomalyGuard::AnomalyGuard(bool on) : prev_(t_anomaly) { t_anomaly = on; }
AnomalyGuard::~AnomalyGuard() { t_anomaly = prev_; }

}  // namespace snug::autograd

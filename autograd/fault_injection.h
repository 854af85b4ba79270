// SPDX-License-Identifier: MIT
// Fault injection, for testing how training handles numerical faults
// (docs/reliability.md).
//
//   autograd::AnomalyGuard anomaly;
//   autograd::InjectNanGuard nan("gelu");   // every "gelu" output on this thread becomes NaN
//   model.loss(x, y);                        // throws AutogradError: forward op 'gelu' produced NaN ...
//
// Only ops that record history (an input requires grad, grad mode on) are
// affected: the NaN is written when the op is recorded, before anomaly mode
// checks its outputs. Thread-local; guards nest.
#pragma once
#include <string>

namespace snug::autograd {

class InjectNanGuard {
 public:
  explicit InjectNanGuard(std::string op_name);
  ~InjectNanGuard();
  InjectNanGuard(const InjectNanGuard&) = delete;
  InjectNanGuard& operator=(const InjectNanGuard&) = delete;

 private:
  std::string prev_;
};

// The op name whose outputs get NaN on this thread ("" when none).
const std::string& injected_nan_op();

}  // namespace snug::autograd

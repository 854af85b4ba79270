// SPDX-License-Identifier: MIT
#include <snug/autograd/fault_injection.h>

#include <utility>

namespace snug::autograd {

namespace {
thread_local std::string t_nan_op;
}

InjectNanGuard::InjectNanGuard(std::string op_name) : prev_(std::exchange(t_nan_op, std::move(op_name))) {}
InjectNanGuard::~InjectNanGuard() { t_nan_op = std::move(prev_); }
const std::string& injected_nan_op() { return t_nan_op; }

}  // namespace snug::autograd

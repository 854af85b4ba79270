// SPDX-License-Identifier: MIT
// The elementwise ops of a fused Linear's activation (Backend::Activation):
// the activation itself, and (g, z) -> g * act'(z) as the activation's own
// backward computes it. Shared by the composed defaults
// (core/fused_defaults.cpp) and the overrides that run part of a fused op
// as its elementwise kernel (cuda/linear_lt.cpp).
#pragma once
#include <snug/core/backend.h>

namespace snug {

inline UnaryOp activation_unary(Backend::Activation act) {
  switch (act) {
    case Backend::Activation::relu:
      return UnaryOp::relu;
    case Backend::Activation::gelu:
      return UnaryOp::gelu;
    case Backend::Activation::gelu_tanh:
      return UnaryOp::gelu_tanh;
    case Backend::Activation::none:
      break;
  }
  throw ValueError("linear_act: no activation to apply");
}

inline BinaryOp activation_derivative(Backend::Activation act) {
  switch (act) {
    case Backend::Activation::relu:
      return BinaryOp::relu_backward;
    case Backend::Activation::gelu:
      return BinaryOp::gelu_backward;
    case Backend::Activation::gelu_tanh:
      return BinaryOp::gelu_tanh_backward;
    case Backend::Activation::none:
      break;
  }
  throw ValueError("linear_backward_act: expected relu, gelu or gelu_tanh");
}

}  // namespace snug

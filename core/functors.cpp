// SPDX-License-Identifier: MIT
#include <snug/core/functors.h>

namespace snug {

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {"neg",  "exp",     "log",        "sqrt",  "rsqrt",     "abs",
                                "tanh", "sigmoid", "relu",       "gelu",  "gelu_tanh", "silu",
                                "sign", "square",  "reciprocal", "clamp", "pow",       "affine"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumUnaryOps);
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumUnaryOps ? names[i] : "unary?";
}
const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add",           "sub",
                                "mul",           "div",
                                "pow",           "maximum",
                                "minimum",       "relu_backward",
                                "gelu_backward", "gelu_tanh_backward",
                                "silu_backward", "sigmoid_backward",
                                "tanh_backward"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumBinaryOps);
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumBinaryOps ? names[i] : "binary?";
}
const char* compare_op_name(CompareOp op) {
  static const char* names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumCompareOps);
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumCompareOps ? names[i] : "compare?";
}
const char* reduce_op_name(ReduceOp op) {
  static const char* names[] = {"sum", "mean", "max", "min", "prod"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumReduceOps);
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumReduceOps ? names[i] : "reduce?";
}

}  // namespace snug

// SPDX-License-Identifier: MIT
// The CPU backend (Eigen + OpenMP + snug's GEMM). Serves "cpu" and every
// virtual device "cpu:N". Its methods are spread over core/cpu/*.cpp by
// family, each file named like its CUDA twin in cuda/: elementwise, reduce,
// softmax, index, matmul, random, layer_norm, conv, pool; linear (the Linear
// layer's fused entries) and attention.
#pragma once
#include <snug/core/cpu/level.h>
#include <snug/core/backend.h>

namespace snug::inline SNUG_CPU_LEVEL {

struct CpuBackend final : Backend {
  const char* name() const override { return "cpu"; }
  void copy(const Tensor& src, const Tensor& dst) override;                                      // cpu/elementwise.cpp
  void fill(const Tensor& dst, double value) override;                                           // cpu/elementwise.cpp
  void unary(UnaryOp op, double a, double b, const Tensor& x, const Tensor& out) override;       // cpu/elementwise.cpp
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;        // cpu/elementwise.cpp
  void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;      // cpu/elementwise.cpp
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;  // cpu/elementwise.cpp
  void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims,
              const Tensor& out) override;                                                 // cpu/reduce.cpp
  void arg_reduce(bool is_max, const Tensor& x, int64_t dim, const Tensor& out) override;  // cpu/reduce.cpp
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out) override;               // cpu/matmul.cpp
  void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) override;        // cpu/softmax.cpp
  void softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim, bool log,
                        const Tensor& grad_in) override;                                              // cpu/softmax.cpp
  void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;   // cpu/index.cpp
  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;    // cpu/index.cpp
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;         // cpu/index.cpp
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;  // cpu/index.cpp
  void random(RandomKind kind, PhiloxState state, double a, double b, const Tensor& out) override;    // cpu/random.cpp
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                  const Tensor& mean, const Tensor& rstd) override;  // cpu/layer_norm.cpp
  void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                           const Tensor& grad_bias) override;                      // cpu/layer_norm.cpp
  void causal_softmax(const Tensor& x, double scale, const Tensor& out) override;  // cpu/softmax.cpp
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
              const Tensor& out) override;  // cpu/conv.cpp
  void conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                       const Tensor& grad_x, const Tensor& grad_weight,
                       const Tensor& grad_bias) override;  // cpu/conv.cpp
  void pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out,
              const Tensor& indices) override;  // cpu/pool.cpp
  void pool2d_backward(const Tensor& grad_out, const Pool2dParams& p, const Tensor& indices,
                       const Tensor& grad_x) override;  // cpu/pool.cpp
  // Fused ops (NOTE [ Fused ops are backend entries ] in core/fused_defaults.cpp): the fast kernels where
  // they apply, Backend's composed defaults elsewhere.
  void linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act, const Tensor& out,
                  const Tensor& pre) override;  // cpu/linear.cpp
  void linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& grad_x,
                       const Tensor& grad_weight, const Tensor& grad_bias) override;  // cpu/linear.cpp
  void linear_backward_act(const Tensor& grad_out, const Tensor& weight, Activation act, const Tensor& z,
                           const Tensor& grad_z) override;  // cpu/linear.cpp
  void attention(const Tensor& qkv, int64_t heads, double scale, const AttentionMask& mask, const Tensor& y,
                 const Tensor& lse) override;  // cpu/attention.cpp
  void attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& grad_y, int64_t heads,
                          double scale, const AttentionMask& mask, const Tensor& grad_qkv) override;  // cpu/attention.cpp
  void conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                   const Tensor& out) override;  // cpu/conv.cpp
  void conv2d_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x, const Tensor& weight,
                            const Conv2dParams& p, const Tensor& grad_x, const Tensor& grad_weight,
                            const Tensor& grad_bias) override;      // cpu/conv.cpp
  void copy_across(const Tensor& src, const Tensor& dst) override;  // cpu/elementwise.cpp
  void synchronize(Device) override {}

  // ---- fused ops: optimizer updates, loss-scaler unscale
  // (NOTE [ Composed defaults, fused overrides ]), in cpu/update.cpp. Batch
  // norm is the composed default (core/batch_norm.cpp).
  void adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                   const update::AdamArgs& a) override;
  void sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const update::SgdArgs& a) override;
  void unscale_and_check(const Tensor& g, const Tensor& out, double inv, const Tensor& flags, int64_t slot) override;
};

}  // namespace snug::SNUG_CPU_LEVEL

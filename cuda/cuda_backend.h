// SPDX-License-Identifier: MIT
// CudaBackend: core/backend.h for "cuda:N". Internal to cuda/ (it is reached
// through backend_for(DeviceType::CUDA) once cuda/register.cpp has run).
// Methods are spread by family: cuda_backend.cpp (elementwise, reductions,
// softmax, norms, index, random, copies), matmul.cpp (matmul via cuBLAS),
// conv.cpp (convolution via cuDNN), pool.cu and pool_cudnn.cpp (pooling),
// batch_norm.cpp (cuDNN), update.cpp (optimizer updates, unscale), attention.cpp
// (the fused attention).
// Every kernel is queued on the device's current stream (memory/stream.h; the
// default stream unless a memory::StreamGuard says otherwise); copies to the
// host wait for that stream.
#pragma once
#include <cstddef>
#include <cstdint>

#include <snug/core/backend.h>

namespace snug::cuda {

struct CudaBackend final : Backend {
  const char* name() const override { return "cuda"; }
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void unary(UnaryOp op, double a, double b, const Tensor& x, const Tensor& out) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) override;
  void arg_reduce(bool is_max, const Tensor& x, int64_t dim, const Tensor& out) override;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out) override;  // matmul.cpp
  void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) override;
  void softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim, bool log, const Tensor& grad_in) override;
  void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;
  void random(RandomKind kind, PhiloxState state, double a, double b, const Tensor& out) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                  const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                           const Tensor& grad_bias) override;
  void causal_softmax(const Tensor& x, double scale, const Tensor& out) override;
  void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
              const Tensor& out) override;  // conv.cpp (cuDNN)
  void conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                       const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) override;  // conv.cpp
  void pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) override;   // pool.cu
  void pool2d_backward(const Tensor& grad_out, const Pool2dParams& p, const Tensor& indices,
                       const Tensor& grad_x) override;  // pool.cu
  // Fused ops (NOTE [ Fused ops are backend entries ] in core/fused_defaults.cpp): attention goes
  // through cuDNN's flash attention or the kernels of cuda/attention.cu (attention.cpp); the
  // Linear's GEMMs through cuBLASLt with their bias, GELU and bias-gradient epilogues
  // (linear_lt.cpp); conv2d_relu uses Backend's composed default (cuDNN and the elementwise kernels).
  void linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act, const Tensor& out,
                  const Tensor& pre) override;  // linear_lt.cpp
  void linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& grad_x,
                       const Tensor& grad_weight, const Tensor& grad_bias) override;  // linear_lt.cpp
  void linear_backward_act(const Tensor& grad_out, const Tensor& weight, Activation act, const Tensor& z,
                           const Tensor& grad_z) override;  // linear_lt.cpp
  // The residual add and layer norm in layer_norm.cu's kernels (cuda_backend.cpp).
  void add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps,
                      const Tensor& h, const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void add_layer_norm_backward(const Tensor& grad_y, const Tensor& grad_h, const Tensor& h, const Tensor& weight,
                               const Tensor& mean, const Tensor& rstd, const Tensor& grad_sum,
                               const Tensor& grad_weight, const Tensor& grad_bias) override;
  // The kernels of dropout.cu (cuda_backend.cpp).
  void dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out, const Tensor& keep) override;
  void dropout_backward(const Tensor& grad_out, const Tensor& keep, double scale, const Tensor& grad_x) override;
  // The kernels of cross_entropy.cu (cuda_backend.cpp).
  void cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double smoothing,
                     const Tensor& loss, const Tensor& lse) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse, const Tensor& w,
                              int64_t ignore_index, double smoothing, const Tensor& grad_logits) override;
  void attention(const Tensor& qkv, int64_t heads, double scale, const AttentionMask& mask, const Tensor& y,
                 const Tensor& lse) override;  // attention.cpp
  void attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& grad_y, int64_t heads,
                          double scale, const AttentionMask& mask, const Tensor& grad_qkv) override;  // attention.cpp
  void copy_across(const Tensor& src, const Tensor& dst) override;
  void copy_across_async(const Tensor& src, const Tensor& dst) override;
  void synchronize(Device d) override;

  // ---- fused ops: batch norm, optimizer updates, loss-scaler unscale
  // (NOTE [ Composed defaults, fused overrides ]) ----
  // batch_norm.cpp (cuDNN):
  void batch_norm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                                   const Tensor& y, const Tensor& mean, const Tensor& invstd) override;
  void batch_norm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var, double eps,
                                    const Tensor& y) override;
  void batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& invstd, bool training, double eps, const Tensor& gx, const Tensor& gweight,
                           const Tensor& gbias) override;
  // update.cpp (the kernels of update.cu):
  void adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                   const update::AdamArgs& a) override;
  void sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const update::SgdArgs& a) override;
  void unscale_and_check(const Tensor& g, const Tensor& out, double inv, const Tensor& flags, int64_t slot) override;
};

CudaBackend& cuda_backend();

// Pooling forward through cuDNN (pool_cudnn.cpp) when it applies: average
// pooling, or max pooling without indices, in f32/f16/f64. Returns false, having
// done nothing, otherwise. Queued on `stream`; the device must be current.
bool cudnn_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices,
                  std::uintptr_t stream);

// matmul.cpp: the workspace of device's cuBLAS handle for `stream`, which
// cuBLASLt calls on that stream share (a stream runs one GEMM at a time);
// and whether an f32 GEMM on this thread may use TF32 now (set_allow_tf32
// or a Tf32Scope).
struct GemmWorkspace {
  void* ptr;
  std::size_t bytes;
};
GemmWorkspace gemm_workspace(int device, std::uintptr_t stream);
bool tf32_here();

// Makes `device` current for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// A DeviceGuard that also reads the device's current stream (memory/stream.h),
// on which the scope's kernels, copies and library calls are queued.
class OnDevice {
 public:
  explicit OnDevice(int device);
  std::uintptr_t stream() const { return stream_; }

 private:
  DeviceGuard guard_;
  std::uintptr_t stream_;
};

// f32 GEMMs on this thread may use TF32 for the scope (on = true), whatever
// set_allow_tf32 says; for internal products whose inputs were 16-bit anyway
// (the attention of an autocast region). Nests; off leaves the setting alone.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool on);
  ~Tf32Scope();
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool prev_;
};

}  // namespace snug::cuda

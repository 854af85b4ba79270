// SPDX-License-Identifier: MIT
// The backend table: core/ calls these through the tensor's device type, so
// no #ifdef SNUG_CUDA appears outside cuda/ and the one place that registers
// it. Kernels receive outputs already allocated with the right shape and
// dtype; checks of shapes/dtypes/devices happen once, in core/raw_ops.cpp.
//
// Conventions: `out` is written, never read (unless the method says so);
// inputs may be strided and broadcast (stride 0); shapes are in comments.
#pragma once
#include <cstdint>
#include <vector>

#include <snug/core/functors.h>
#include <snug/core/philox.h>
#include <snug/core/pool_window.h>
#include <snug/core/tensor.h>

namespace snug {

enum class RandomKind { uniform, normal };

// Geometry of a 2-D convolution (index 0 = height, 1 = width). Output sizes
// follow PyTorch: Ho = (H + 2 padding - dilation (kH - 1) - 1) / stride + 1.
struct Conv2dParams {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};

// PoolKind and Pool2dParams, the geometry of a 2-D pooling window: core/pool_window.h.

struct Backend {
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // dst[...] = src[...] converting dtype; src is broadcast to dst's shape.
  // Both on this backend's device type.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  // out = op(x); x and out have the same shape and dtype.
  virtual void unary(UnaryOp op, double a, double b, const Tensor& x, const Tensor& out) = 0;
  // out = op(a, b); a, b broadcast to out's shape and share out's dtype.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out (bool) = a <op> b; a and b share a dtype, broadcast to out's shape.
  virtual void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = cond ? a : b; cond is bool; all broadcast to out.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out has x's shape with the reduced dims set to 1 (keepdim form).
  virtual void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) = 0;
  // out (i64) has x's shape with `dim` set to 1: index of the max (or min).
  virtual void arg_reduce(bool is_max, const Tensor& x, int64_t dim, const Tensor& out) = 0;
  // a (B,M,K) @ b (B,K,N) -> out (B,M,N), out contiguous; a/b any strides.
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // Softmax or log-softmax of x along dim; out like x, contiguous.
  virtual void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) = 0;
  // Gradient of (log)softmax: from grad_out and the forward output y.
  virtual void softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim, bool log,
                                const Tensor& grad_in) = 0;
  // out = x.index_select(dim, index); index is i64 1-D, already bounds-checked.
  virtual void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = 0;
  // out[.., i, ..] += src[.., j, ..] for index[j] = i along dim (out is read).
  virtual void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = 0;
  // out = gather(x, dim, index); index is i64 with out's shape.
  virtual void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = 0;
  // out[index[i]] along dim += src[i] (out is read).
  virtual void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = 0;
  // Fills out (contiguous, floating) from the Philox stream: element i uses the
  // counter mapping documented in core/philox.h, so every device agrees.
  virtual void random(RandomKind kind, PhiloxState state, double a, double b, const Tensor& out) = 0;
  // Layer norm over the last dim. x (R, C) contiguous; weight/bias (C) or
  // undefined; out (R, C) like x; mean/rstd (R) f32, saved for backward.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                          const Tensor& mean, const Tensor& rstd) = 0;
  // grad_out (R, C) -> grad_x (R, C), grad_weight/grad_bias (C) (undefined when not wanted).
  virtual void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                                   const Tensor& grad_bias) = 0;
  // Causal softmax of scale * x over the last dim. x (..., Tq, Tk)
  // contiguous; row i sees columns j <= i + (Tk - Tq), the rest are 0 in
  // out. No mask tensor is built.
  virtual void causal_softmax(const Tensor& x, double scale, const Tensor& out) = 0;
  // 2-D convolution (cross-correlation). x (N, C, H, W), weight (Cout, C/groups,
  // kH, kW), bias (Cout) or undefined, all contiguous with out's dtype;
  // out (N, Cout, Ho, Wo) contiguous. Shapes are checked by the caller.
  virtual void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                      const Tensor& out) {
    throw DeviceError(str("conv2d: not implemented on backend ", name()));
  }
  // grad_out (N, Cout, Ho, Wo) contiguous -> grad_x like x, grad_weight like
  // weight, grad_bias (Cout); each undefined when not wanted (then its input
  // may be undefined too: x is only read for grad_weight, weight for grad_x).
  virtual void conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                               const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
    throw DeviceError(str("conv2d_backward: not implemented on backend ", name()));
  }
  // Pooling over (H, W). x (N, C, H, W) contiguous -> out (N, C, Ho, Wo)
  // contiguous. max: indices (i64, out's shape) gets the argmax as h * W + w
  // within its plane (first maximum; NaN wins); undefined for other kinds.
  virtual void pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
    throw DeviceError(str("pool2d: not implemented on backend ", name()));
  }
  // grad_out (N, C, Ho, Wo) contiguous -> grad_x (N, C, H, W) contiguous,
  // written whole (zeros where no window reaches). indices as from pool2d.
  virtual void pool2d_backward(const Tensor& grad_out, const Pool2dParams& p, const Tensor& indices,
                               const Tensor& grad_x) {
    throw DeviceError(str("pool2d_backward: not implemented on backend ", name()));
  }
  // Copies between devices (at least one on this backend's type). Contiguous.
  virtual void copy_across(const Tensor& src, const Tensor& dst) = 0;
  // Blocks until queued work on device finishes (CPU: no-op).
  virtual void synchronize(Device d) = 0;
};

// The backend for a device type; throws DeviceError if none is registered
// (e.g. "cuda:0" in a build without CUDA, or no GPU present).
Backend& backend_for(DeviceType t);
inline Backend& backend_for(Device d) { return backend_for(d.type); }
void register_backend(DeviceType t, Backend* b);  // b lives forever
bool has_backend(DeviceType t);

// A backend that loads on first use (the CUDA plugin: NOTE [ The CUDA plugin ]
// in cuda/plugin_loader.cpp, which registers this hook). The first request for
// device type t calls load(), which registers the backend when it can; when it
// could not, why_absent() says why, for backend_for's error. core/ knows no
// more of CUDA than this.
struct LazyBackend {
  void (*load)() = nullptr;
  std::string (*why_absent)() = nullptr;  // empty: loaded, but no device present
};
void register_lazy_backend(DeviceType t, LazyBackend hook);

}  // namespace snug

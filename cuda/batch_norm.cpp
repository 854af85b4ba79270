// SPDX-License-Identifier: MIT
// CudaBackend's batch norm entries (core/backend.h) through cuDNN: on a GPU,
// one call each way in place of the composed default's ten or so raw ops
// (core/batch_norm.cpp), which takes the cases cuDNN does not (more than 4
// dims, bf16, per-channel tensors in another dtype; NOTE [ Composed defaults,
// fused overrides ]).
//
// cuDNN 9 marks the batch-norm entry points deprecated in favour of its graph
// API, but ships and supports them; they are one call each way with the
// per-channel statistics kept in f32 (f64 for f64 data), which is the whole
// job here. The deprecation warnings are silenced for this file only.
#include <initializer_list>

#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/cuda/cudnn_util.h>

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

namespace snug::cuda {

namespace {

// x viewed as NCHW: (N, C) -> (N, C, 1, 1), (N, C, L) -> (N, C, L, 1).
struct Nchw {
  int64_t n, c, h, w;
};

DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

struct Param {
  const char* name;
  const Tensor* t;
};

// x and y: same shape, contiguous, f32/f16/f64, on one CUDA device. Each
// defined parameter: (C), contiguous, the statistics' dtype, on that device.
Nchw check(const char* op, const Tensor& x, const Tensor& y, std::initializer_list<Param> params) {
  SNUG_CHECK(x.device().is_cuda(), DeviceError, "cuda::", op, ": x is on ", x.device().str(), ", not on a CUDA device");
  SNUG_CHECK(x.dim() >= 2 && x.dim() <= 4, ShapeError, "cuda::", op,
             ": expected x (N, C), (N, C, L) or (N, C, H, W), got ", shape_str(x.shape()));
  SNUG_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f16 || x.dtype() == DType::f64, DTypeError, "cuda::", op,
             ": x must be f32, f16 or f64, got ", dtype_name(x.dtype()));
  SNUG_CHECK(x.is_contiguous() && y.is_contiguous(), ValueError, "cuda::", op, ": x and y must be contiguous");
  SNUG_CHECK(y.shape() == x.shape() && y.dtype() == x.dtype() && y.device() == x.device(), ValueError, "cuda::", op,
             ": y ", shape_str(y.shape()), " ", dtype_name(y.dtype()), " on ", y.device().str(), " does not match x ",
             shape_str(x.shape()), " ", dtype_name(x.dtype()), " on ", x.device().str());
  const int64_t C = x.size(1);
  const DType pd = stats_dtype(x.dtype());
  for (const Param& p : params) {
    if (!p.t->defined()) continue;
    SNUG_CHECK(p.t->dim() == 1 && p.t->size(0) == C && p.t->is_contiguous() && p.t->dtype() == pd &&
                   p.t->device() == x.device(),
               ValueError, "cuda::", op, ": ", p.name, " must be a contiguous (", C, ") ", dtype_name(pd),
               " tensor on ", x.device().str(), ", got ", shape_str(p.t->shape()), " ", dtype_name(p.t->dtype()),
               " on ", p.t->device().str());
  }
  return {x.size(0), C, x.dim() > 2 ? x.size(2) : 1, x.dim() > 3 ? x.size(3) : 1};
}

// Whether cuDNN takes x (2 to 4 dims, f32/f16/f64, contiguous, on a GPU)
// and the given per-channel tensors: each undefined or (C), contiguous, in
// the statistics' dtype, on x's device.
bool cudnn_takes(const Tensor& x, std::initializer_list<const Tensor*> per_channel) {
  if (!x.device().is_cuda() || x.dim() < 2 || x.dim() > 4 || !x.is_contiguous()) return false;
  if (x.dtype() != DType::f32 && x.dtype() != DType::f16 && x.dtype() != DType::f64) return false;
  for (const Tensor* t : per_channel)
    if (t->defined() && (t->dim() != 1 || t->size(0) != x.size(1) || !t->is_contiguous() ||
                         t->dtype() != stats_dtype(x.dtype()) || t->device() != x.device()))
      return false;
  return true;
}

// t, or `fill` in the statistics' dtype when t is undefined (cuDNN takes no
// null weight or bias, and writes every gradient).
Tensor or_full(const Tensor& t, const Tensor& x, double fill) {
  return t.defined() ? t : full({x.size(1)}, fill, TensorOptions(stats_dtype(x.dtype()), x.device()));
}

// What every call needs, in this order: x's device current, the device's cuDNN
// handle pointed at its current stream, and the descriptors of x (NCHW) and
// of the per-channel tensors (1, C, 1, 1).
struct Call {
  OnDevice guard;
  LockedCudnn handle;
  TensorDesc xd, pd;
  Call(const char* op, const Tensor& x, const Nchw& s)
      : guard(x.device().index),
        handle(cudnn_for(x.device().index, guard.stream())),
        xd(x.dtype(), s.n, s.c, s.h, s.w, op),
        pd(stats_dtype(x.dtype()), 1, s.c, 1, 1, op) {}
};

}  // namespace

void CudaBackend::batch_norm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                              const Tensor& running_mean, const Tensor& running_var, double momentum,
                                              double eps, const Tensor& y, const Tensor& mean, const Tensor& invstd) {
  if (!cudnn_takes(x, {&weight, &bias, &running_mean, &running_var, &mean, &invstd}) || !mean.defined() ||
      !invstd.defined() || running_mean.defined() != running_var.defined())
    return Backend::batch_norm_forward_training(x, weight, bias, running_mean, running_var, momentum, eps, y, mean,
                                                invstd);
  const char* op = "batch_norm_forward_training";
  const Tensor w = or_full(weight, x, 1), b = or_full(bias, x, 0);
  const Nchw s = check(op, x, y, {});
  profiler::RecordOp rec("batch_norm", x.device());
  if (x.numel() == 0) return;
  const DType t = x.dtype();
  Call c(op, x, s);
  SNUG_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      c.handle.h, CUDNN_BATCHNORM_SPATIAL, kOne.get(t), kZero.get(t), c.xd.d, x.data_ptr(), c.xd.d, y.data_ptr(),
      c.pd.d, w.data_ptr(), b.data_ptr(), momentum, running_mean.defined() ? running_mean.data_ptr() : nullptr,
      running_var.defined() ? running_var.data_ptr() : nullptr, eps, mean.data_ptr(), invstd.data_ptr()));
}

void CudaBackend::batch_norm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                               const Tensor& running_mean, const Tensor& running_var, double eps,
                                               const Tensor& y) {
  if (!cudnn_takes(x, {&weight, &bias, &running_mean, &running_var}))
    return Backend::batch_norm_forward_inference(x, weight, bias, running_mean, running_var, eps, y);
  const char* op = "batch_norm_forward_inference";
  const Tensor w = or_full(weight, x, 1), b = or_full(bias, x, 0);
  const Nchw s = check(op, x, y, {{"running_mean", &running_mean}, {"running_var", &running_var}});
  profiler::RecordOp rec("batch_norm", x.device());
  if (x.numel() == 0) return;
  const DType t = x.dtype();
  Call c(op, x, s);
  SNUG_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      c.handle.h, CUDNN_BATCHNORM_SPATIAL, kOne.get(t), kZero.get(t), c.xd.d, x.data_ptr(), c.xd.d, y.data_ptr(),
      c.pd.d, w.data_ptr(), b.data_ptr(), running_mean.data_ptr(), running_var.data_ptr(), eps));
}

// cuDNN's backward is the training forward's; evaluation composes.
void CudaBackend::batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                      const Tensor& invstd, bool training, double eps, const Tensor& gx,
                                      const Tensor& gweight, const Tensor& gbias) {
  if (!training || !cudnn_takes(x, {&weight, &mean, &invstd, &gweight, &gbias}) || !mean.defined() ||
      !invstd.defined() || gy.dtype() != x.dtype() || !gy.is_contiguous() || (gx.defined() && !gx.is_contiguous()))
    return Backend::batch_norm_backward(gy, x, weight, mean, invstd, training, eps, gx, gweight, gbias);
  const char* op = "batch_norm_backward";
  // cuDNN writes all three gradients: scratch for the unwanted ones.
  const Tensor w = or_full(weight, x, 1);
  const Tensor dx = gx.defined() ? gx : empty(x.shape(), x.options());
  const Tensor dw = gweight.defined() ? gweight : empty({x.size(1)}, mean.options());
  const Tensor db = gbias.defined() ? gbias : empty({x.size(1)}, mean.options());
  const Nchw s = check(op, x, gy, {});
  check(op, x, dx, {});
  profiler::RecordOp rec("batch_norm_backward", x.device());
  if (x.numel() == 0) return;
  const DType t = x.dtype();
  Call c(op, x, s);
  // Data and parameter gradients are written, not accumulated (beta = 0).
  SNUG_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      c.handle.h, CUDNN_BATCHNORM_SPATIAL, kOne.get(t), kZero.get(t), kOne.get(t), kZero.get(t), c.xd.d, x.data_ptr(),
      c.xd.d, gy.data_ptr(), c.xd.d, dx.data_ptr(), c.pd.d, w.data_ptr(), dw.data_ptr(), db.data_ptr(), eps,
      mean.data_ptr(), invstd.data_ptr()));
}

}  // namespace snug::cuda

// SPDX-License-Identifier: MIT
// CudaBackend, host side: turns tensors into the geometry and pointers the
// kernels of cuda/*.cu take (cuda/kernels.h). Shapes and dtypes were checked
// by core/raw_ops.cpp; what is left here is the same preparation the CPU
// backend does (core/cpu/*.cpp), so a method here reads like its CPU twin.
#include <snug/cuda/cuda_backend.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <snug/core/raw_ops.h>
#include <snug/cuda/check.h>
#include <snug/cuda/geometry.h>
#include <snug/cuda/kernels.h>
#include <snug/cuda/plan.h>
#include <snug/memory/stream.h>

namespace snug::cuda {

DeviceGuard::DeviceGuard(int device) {
  int cur = 0;
  SNUG_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device) {
    SNUG_CUDA_CHECK(cudaSetDevice(device));
    prev_ = cur;
  }
}
DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) (void)cudaSetDevice(prev_);
}

OnDevice::OnDevice(int device) : guard_(device), stream_(memory::current_stream(Device(DeviceType::CUDA, device))) {}

CudaBackend& cuda_backend() {
  static CudaBackend b;
  return b;
}

namespace {

// t's strides seen over `shape` (t broadcast to it).
std::vector<int64_t> over(const Tensor& t, const Shape& shape) {
  return broadcast_strides(t.shape(), t.strides(), shape);
}

template <int N>
Geometry<N> geometry(const Shape& shape, const std::array<const Tensor*, N>& ops) {
  std::array<std::vector<int64_t>, N> st;
  for (int k = 0; k < N; ++k) st[k] = over(*ops[k], shape);
  return make_geometry<N>(shape, st);
}

// NOTE [ Rounding wide values to 16 bits ] (core/cpu/elementwise.cpp), for
// the fill value computed here on the host.
float to_float_round_odd(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(x)) return f;
  const long double wx = x, wf = f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (wf == wx || (bits & 1u)) return f;
  return std::nextafter(f, wx > wf ? INFINITY : -INFINITY);
}

// The bytes of `value` stored as dtype t (the CPU fill's conversion).
uint64_t fill_bits(DType t, double value) {
  uint64_t bits = 0;
  dispatch_all(t, "fill", [&]<class T>() {
    T v;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      v = T(to_float_round_odd(value));
    else
      v = static_cast<T>(static_cast<compute_t<T>>(value));
    std::memcpy(&bits, &v, sizeof(T));
  });
  return bits;
}

int dev(const Tensor& t) { return t.device().index; }

}  // namespace

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  OnDevice g(dev(dst));
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() && dst.is_contiguous()) {
    if (dst.nbytes())
      SNUG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice,
                                      reinterpret_cast<cudaStream_t>(g.stream())));
    return;
  }
  kernels::copy(dst.dtype(), src.dtype(), geometry<2>(dst.shape(), {&dst, &src}), dst.data_ptr(), src.data_ptr(),
                g.stream());
}

void CudaBackend::fill(const Tensor& dst, double value) {
  OnDevice g(dev(dst));
  kernels::fill(dst.element_size(), fill_bits(dst.dtype(), value), geometry<1>(dst.shape(), {&dst}), dst.data_ptr(),
                g.stream());
}

void CudaBackend::unary(UnaryOp op, double a, double b, const Tensor& x, const Tensor& out) {
  OnDevice g(dev(out));
  kernels::unary(op, a, b, out.dtype(), geometry<2>(out.shape(), {&out, &x}), out.data_ptr(), x.data_ptr(), g.stream());
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  OnDevice g(dev(out));
  kernels::binary(op, out.dtype(), geometry<3>(out.shape(), {&out, &a, &b}), out.data_ptr(), a.data_ptr(), b.data_ptr(),
                  g.stream());
}

void CudaBackend::compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  OnDevice g(dev(out));
  kernels::compare(op, a.dtype(), geometry<3>(out.shape(), {&out, &a, &b}), static_cast<bool*>(out.data_ptr()),
                   a.data_ptr(), b.data_ptr(), g.stream());
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  OnDevice g(dev(out));
  kernels::where(out.dtype(), geometry<4>(out.shape(), {&out, &cond, &a, &b}), out.data_ptr(),
                 static_cast<const bool*>(cond.data_ptr()), a.data_ptr(), b.data_ptr(), g.stream());
}

// x any shape and strides; out has x's shape with the reduced dims set to 1.
void CudaBackend::reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) {
  OnDevice g(dev(out));
  const ReducePlan p = plan_reduce(x.shape(), x.strides(), out.strides(), dims);
  kernels::reduce(op, x.dtype(), out.dtype(), p.kept, p.red, x.data_ptr(), out.data_ptr(), g.stream());
}

// out (i64) has x's shape with `dim` set to 1.
void CudaBackend::arg_reduce(bool is_max, const Tensor& x, int64_t dim, const Tensor& out) {
  if (out.numel() == 0) return;
  OnDevice g(dev(out));
  const RowPlan<2> p = plan_rows<2>(x.shape(), {x.strides(), out.strides()}, dim);
  kernels::arg_reduce(is_max, x.dtype(), p.rows, p.len, p.step[0], x.data_ptr(), static_cast<int64_t*>(out.data_ptr()),
                      g.stream());
}

void CudaBackend::softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  OnDevice g(dev(out));
  const RowPlan<2> p = plan_rows<2>(x.shape(), {x.strides(), out.strides()}, dim);
  kernels::softmax(x.dtype(), log, p.rows, p.len, p.step[0], p.step[1], x.data_ptr(), out.data_ptr(), g.stream());
}

void CudaBackend::softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim, bool log,
                                   const Tensor& grad_in) {
  OnDevice g(dev(grad_in));
  const RowPlan<3> p = plan_rows<3>(y.shape(), {over(grad_out, y.shape()), y.strides(), grad_in.strides()}, dim);
  kernels::softmax_backward(y.dtype(), log, p.rows, p.len, p.step[0], p.step[1], p.step[2], grad_out.data_ptr(),
                            y.data_ptr(), grad_in.data_ptr(), g.stream());
}

// ---- index ops: the geometry of core/cpu/index.cpp (cuda/plan.h) -------------------

void CudaBackend::index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  OnDevice g(dev(out));
  const int64_t is = index.dim() == 0 ? 0 : index.strides()[0];
  const GatherPlan p =
      plan_gather(out.shape(), out.strides(), index_strides_along(out.shape(), dim, is), x.strides(), dim);
  kernels::gather(x.element_size(), p.g, p.jump, out.data_ptr(), static_cast<const int64_t*>(index.data_ptr()),
                  x.data_ptr(), g.stream());
}

void CudaBackend::index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (src.numel() == 0) return;
  OnDevice g(dev(out));
  const int64_t is = index.dim() == 0 ? 0 : index.strides()[0];
  const ScatterPlan p =
      plan_scatter(src.shape(), out.strides(), index_strides_along(src.shape(), dim, is), src.strides(), dim);
  kernels::scatter_add(out.dtype(), p.outer, p.len, p.ostep, p.istep, p.sstep, out.data_ptr(),
                       static_cast<const int64_t*>(index.data_ptr()), src.data_ptr(), g.stream());
}

void CudaBackend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  OnDevice g(dev(out));
  const GatherPlan p = plan_gather(out.shape(), out.strides(), index.strides(), x.strides(), dim);
  kernels::gather(x.element_size(), p.g, p.jump, out.data_ptr(), static_cast<const int64_t*>(index.data_ptr()),
                  x.data_ptr(), g.stream());
}

void CudaBackend::scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (index.numel() == 0) return;
  OnDevice g(dev(out));
  const ScatterPlan p = plan_scatter(index.shape(), out.strides(), index.strides(), src.strides(), dim);
  kernels::scatter_add(out.dtype(), p.outer, p.len, p.ostep, p.istep, p.sstep, out.data_ptr(),
                       static_cast<const int64_t*>(index.data_ptr()), src.data_ptr(), g.stream());
}

void CudaBackend::random(RandomKind kind, PhiloxState st, double a, double b, const Tensor& out) {
  SNUG_CHECK(out.is_contiguous(), ValueError, "random: output must be contiguous");
  OnDevice g(dev(out));
  kernels::random(kind == RandomKind::normal, out.dtype(), st, a, b, out.numel(), out.data_ptr(), g.stream());
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                             const Tensor& mean, const Tensor& rstd) {
  OnDevice g(dev(out));
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  kernels::layer_norm(x.dtype(), R, C, eps, x.data_ptr(), nullptr, weight.defined() ? weight.data_ptr() : nullptr,
                      bias.defined() ? bias.data_ptr() : nullptr, nullptr, out.data_ptr(),
                      static_cast<float*>(mean.data_ptr()), static_cast<float*>(rstd.data_ptr()), g.stream());
}

namespace {
// layer_norm_backward with gadd (add_layer_norm_backward's gradient of h) or without.
void layer_norm_backward_into(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                              const Tensor& rstd, const Tensor& gadd, const Tensor& grad_x, const Tensor& grad_weight,
                              const Tensor& grad_bias) {
  OnDevice g(x.device().index);
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  Tensor scratch;  // per-chunk column sums for the weight and bias gradients
  if (grad_weight.defined() || grad_bias.defined())
    scratch = empty({std::max<int64_t>(2 * kernels::layer_norm_wb_chunks(R) * C, 1)},
                    TensorOptions(x.dtype() == DType::f64 ? DType::f64 : DType::f32, x.device()));
  kernels::layer_norm_backward(
      x.dtype(), R, C, grad_out.data_ptr(), x.data_ptr(), weight.defined() ? weight.data_ptr() : nullptr,
      static_cast<const float*>(mean.data_ptr()), static_cast<const float*>(rstd.data_ptr()),
      gadd.defined() ? gadd.data_ptr() : nullptr, grad_x.defined() ? grad_x.data_ptr() : nullptr,
      grad_weight.defined() ? grad_weight.data_ptr() : nullptr, grad_bias.defined() ? grad_bias.data_ptr() : nullptr,
      scratch.defined() ? scratch.data_ptr() : nullptr, g.stream());
}
}  // namespace

void CudaBackend::layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                                      const Tensor& grad_bias) {
  layer_norm_backward_into(grad_out, x, weight, mean, rstd, Tensor(), grad_x, grad_weight, grad_bias);
}

// h = x + r, y = layer_norm(h): one kernel (cuda/layer_norm.cu).
void CudaBackend::add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias,
                                 double eps, const Tensor& h, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  if (!x.is_contiguous() || !r.is_contiguous() || r.dtype() != x.dtype() || r.shape() != x.shape())
    return Backend::add_layer_norm(x, r, weight, bias, eps, h, y, mean, rstd);
  OnDevice g(dev(y));
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  kernels::layer_norm(x.dtype(), R, C, eps, x.data_ptr(), r.data_ptr(), weight.defined() ? weight.data_ptr() : nullptr,
                      bias.defined() ? bias.data_ptr() : nullptr, h.data_ptr(), y.data_ptr(),
                      static_cast<float*>(mean.data_ptr()), static_cast<float*>(rstd.data_ptr()), g.stream());
}

// grad_sum = grad_h + layer norm's grad_x, in the store of layer norm's backward kernel.
void CudaBackend::add_layer_norm_backward(const Tensor& grad_y, const Tensor& grad_h, const Tensor& h,
                                          const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                          const Tensor& grad_sum, const Tensor& grad_weight, const Tensor& grad_bias) {
  if (grad_h.defined() && (!grad_h.is_contiguous() || grad_h.dtype() != h.dtype() || grad_h.shape() != h.shape()))
    return Backend::add_layer_norm_backward(grad_y, grad_h, h, weight, mean, rstd, grad_sum, grad_weight, grad_bias);
  layer_norm_backward_into(grad_y, h, weight, mean, rstd, grad_h, grad_sum, grad_weight, grad_bias);
}

// x -> out, keep (bool); one kernel (dropout.cu). The caller passes contiguous tensors.
void CudaBackend::dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out, const Tensor& keep) {
  if (!x.is_contiguous() || !out.is_contiguous() || !keep.is_contiguous())
    return Backend::dropout(x, p, state, out, keep);
  OnDevice g(dev(x));
  kernels::dropout(x.dtype(), state, p, x.numel(), x.data_ptr(), out.data_ptr(), static_cast<bool*>(keep.data_ptr()),
                   g.stream());
}

void CudaBackend::dropout_backward(const Tensor& grad_out, const Tensor& keep, double scale, const Tensor& grad_x) {
  if (!grad_out.is_contiguous() || !keep.is_contiguous() || !grad_x.is_contiguous())
    return Backend::dropout_backward(grad_out, keep, scale, grad_x);
  OnDevice g(dev(grad_out));
  kernels::dropout_backward(grad_out.dtype(), scale, grad_out.numel(), grad_out.data_ptr(),
                            static_cast<const bool*>(keep.data_ptr()), grad_x.data_ptr(), g.stream());
}

// logits (N, C), target (N) -> loss (N), lse (N); NOTE [ Fused cross-entropy ].
void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double smoothing,
                                const Tensor& loss, const Tensor& lse) {
  if (!logits.is_contiguous() || !target.is_contiguous())
    return Backend::cross_entropy(logits, target, ignore_index, smoothing, loss, lse);
  OnDevice g(dev(logits));
  kernels::cross_entropy(logits.dtype(), logits.size(0), logits.size(1), ignore_index, smoothing, logits.data_ptr(),
                         static_cast<const int64_t*>(target.data_ptr()), loss.data_ptr(), lse.data_ptr(), g.stream());
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                         const Tensor& w, int64_t ignore_index, double smoothing,
                                         const Tensor& grad_logits) {
  if (!logits.is_contiguous() || !target.is_contiguous() || !w.is_contiguous())
    return Backend::cross_entropy_backward(logits, target, lse, w, ignore_index, smoothing, grad_logits);
  OnDevice g(dev(logits));
  kernels::cross_entropy_backward(logits.dtype(), logits.size(0), logits.size(1), ignore_index, smoothing,
                                  logits.data_ptr(), static_cast<const int64_t*>(target.data_ptr()), lse.data_ptr(),
                                  w.data_ptr(), grad_logits.data_ptr(), g.stream());
}

void CudaBackend::causal_softmax(const Tensor& x, double scale, const Tensor& out) {
  OnDevice g(dev(out));
  const int64_t Tk = x.size(-1), Tq = x.size(-2);
  const int64_t rows = Tk ? x.numel() / Tk : 0;
  kernels::causal_softmax(x.dtype(), rows, Tq, Tk, scale, x.data_ptr(), out.data_ptr(), g.stream());
}

// ---- pooling: the windows of core/pool_window.h, kernels in pool.cu ----------------

// x (N, C, H, W) -> out (N, C, Ho, Wo), indices (max pooling that will be
// differentiated); contiguous. cuDNN takes average pooling, and max pooling
// when no indices are wanted (pool_cudnn.cpp); max pooling with indices and
// adaptive pooling run the own kernels of pool.cu.
void CudaBackend::pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
  OnDevice g(dev(out));
  if (cudnn_pool2d(x, p, out, indices, g.stream())) return;
  kernels::pool2d(x.dtype(), pool_geometry(p, x.size(0) * x.size(1), x.size(2), x.size(3), out.size(2), out.size(3)),
                  x.data_ptr(), out.data_ptr(), indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr,
                  g.stream());
}

void CudaBackend::pool2d_backward(const Tensor& grad_out, const Pool2dParams& p, const Tensor& indices,
                                  const Tensor& grad_x) {
  OnDevice g(dev(grad_x));
  kernels::pool2d_backward(grad_x.dtype(),
                           pool_geometry(p, grad_x.size(0) * grad_x.size(1), grad_x.size(2), grad_x.size(3),
                                         grad_out.size(2), grad_out.size(3)),
                           grad_out.data_ptr(),
                           indices.defined() ? static_cast<const int64_t*>(indices.data_ptr()) : nullptr,
                           grad_x.data_ptr(), g.stream());
}

// ---- copies between devices ----------------------------------------------------------
// src and dst are contiguous with the same dtype and shape (raw::to_device).
// Host <-> device copies are queued on the GPU's current stream and waited
// for, so a device-to-host copy sees every kernel queued before it on that
// stream and the host may reuse its buffer right after a host-to-device copy.
// On the default stream (the usual case) they are plain cudaMemcpy calls,
// which also wait for the other (blocking) streams' earlier work.
namespace {
void copy_and_wait(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, std::uintptr_t stream) {
  if (stream == 0) {
    SNUG_CUDA_CHECK(cudaMemcpy(dst, src, n, kind));
    return;
  }
  const auto st = reinterpret_cast<cudaStream_t>(stream);
  SNUG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, st));
  SNUG_CUDA_CHECK(cudaStreamSynchronize(st));
}
}  // namespace

namespace {
// What both copies across devices require of their tensors.
void check_across(const char* who, const Tensor& src, const Tensor& dst) {
  SNUG_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel() && src.is_contiguous() && dst.is_contiguous(),
             ValueError, who, ": expected contiguous tensors of one dtype and size, got ", dtype_name(src.dtype()), " ",
             shape_str(src.shape()), " -> ", dtype_name(dst.dtype()), " ", shape_str(dst.shape()));
}
}  // namespace

void CudaBackend::copy_across(const Tensor& src, const Tensor& dst) {
  check_across("copy_across", src, dst);
  const std::size_t n = dst.nbytes();
  const Device s = src.device(), d = dst.device();
  if (n == 0) return;
  if (s.is_cpu() && d.is_cuda()) {
    OnDevice g(d.index);
    copy_and_wait(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyHostToDevice, g.stream());
  } else if (s.is_cuda() && d.is_cpu()) {
    OnDevice g(s.index);
    copy_and_wait(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToHost, g.stream());
  } else if (s.is_cuda() && d.is_cuda()) {
    if (s.index == d.index) {
      OnDevice g(d.index);
      SNUG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToDevice,
                                      reinterpret_cast<cudaStream_t>(g.stream())));
    } else {
      // Across GPUs: direct over NVLink/PCIe when peer access is possible,
      // staged through the host by the driver otherwise. Synchronous: the
      // source's current stream is drained first (its pending writes), then
      // the copy runs on the destination's current stream and is waited for.
      const std::uintptr_t src_stream = memory::current_stream(s);
      OnDevice g(d.index);
      if (src_stream == 0 && g.stream() == 0) {
        SNUG_CUDA_CHECK(cudaMemcpyPeer(dst.data_ptr(), d.index, src.data_ptr(), s.index, n));
      } else {
        {
          DeviceGuard gs(s.index);
          SNUG_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(src_stream)));
        }
        const auto st = reinterpret_cast<cudaStream_t>(g.stream());
        SNUG_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), d.index, src.data_ptr(), s.index, n, st));
        SNUG_CUDA_CHECK(cudaStreamSynchronize(st));
      }
    }
  } else {
    throw DeviceError(str("copy_across: CUDA backend cannot copy ", s.str(), " -> ", d.str()));
  }
}

void CudaBackend::copy_across_async(const Tensor& src, const Tensor& dst) {
  const Device s = src.device(), d = dst.device();
  if (!(s.is_cpu() && d.is_cuda())) return copy_across(src, dst);  // only host -> device is worth queuing
  check_across("copy_across_async", src, dst);
  if (dst.nbytes() == 0) return;
  OnDevice g(d.index);
  SNUG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyHostToDevice,
                                  reinterpret_cast<cudaStream_t>(g.stream())));
}

void CudaBackend::synchronize(Device d) {
  DeviceGuard g(d.index);
  SNUG_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace snug::cuda

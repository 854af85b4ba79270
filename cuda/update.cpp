// SPDX-License-Identifier: MIT
// CudaBackend's optimizer updates and loss-scaler unscale (core/backend.h), the
// CUDA twin of core/cpu/update.cpp: each checks that the kernels of
// cuda/update.cu take the tensors (else the composed default of core/update.cpp
// runs), makes their device current and queues the kernel on its current
// stream (memory/stream.h). The math is core/update_math.h's.
#include <cstdint>
#include <initializer_list>

#include <snug/core/backend.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/cuda/kernels.h>

namespace snug::cuda {

namespace {

struct Named {
  const char* name;
  const Tensor* t;
};

// The kernels mark their arrays __restrict__: distinct state tensors must not share bytes.
void check_disjoint(const char* op, std::initializer_list<Named> ts) {
  for (auto a = ts.begin(); a != ts.end(); ++a)
    for (auto b = a + 1; b != ts.end(); ++b) {
      if (!a->t->defined() || !b->t->defined() || a->t->nbytes() == 0 || b->t->nbytes() == 0) continue;
      const auto a0 = reinterpret_cast<std::uintptr_t>(a->t->data_ptr()), a1 = a0 + a->t->nbytes();
      const auto b0 = reinterpret_cast<std::uintptr_t>(b->t->data_ptr()), b1 = b0 + b->t->nbytes();
      SNUG_CHECK(a1 <= b0 || b1 <= a0, ValueError, "cuda::", op, ": ", a->name, " and ", b->name, " overlap in memory");
    }
}

// Whether the kernels take these: all on the first one's CUDA device,
// contiguous, of its n elements; target and state f32, the gradient f32, f16
// or bf16. Undefined state (no momentum buffer) is fine.
bool kernels_take(const Tensor& target, const Tensor& grad, std::initializer_list<const Tensor*> state) {
  const Device d = target.device();
  auto f32_here = [&](const Tensor& t) {
    return t.device() == d && t.dtype() == DType::f32 && t.is_contiguous() && t.numel() == target.numel();
  };
  if (!d.is_cuda() || !f32_here(target) || grad.device() != d || !grad.is_contiguous() ||
      grad.numel() != target.numel())
    return false;
  if (grad.dtype() != DType::f32 && grad.dtype() != DType::f16 && grad.dtype() != DType::bf16) return false;
  for (const Tensor* s : state)
    if (s->defined() && !f32_here(*s)) return false;
  return true;
}
}  // namespace

void CudaBackend::adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                              const update::AdamArgs& a) {
  if (!m.defined() || !v.defined() || !kernels_take(p, g, {&m, &v})) return Backend::adam_update(p, g, m, v, a);
  check_disjoint("adam_update", {{"parameter", &p}, {"gradient", &g}, {"exp_avg", &m}, {"exp_avg_sq", &v}});
  profiler::RecordOp rec("fused_adam", p.device());
  OnDevice guard(p.device().index);
  kernels::fused_adam(g.dtype(), p.numel(), static_cast<float*>(p.data_ptr()), g.data_ptr(),
                      static_cast<float*>(m.data_ptr()), static_cast<float*>(v.data_ptr()), update::make_adam_consts(a),
                      guard.stream());
}

void CudaBackend::sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const update::SgdArgs& a) {
  if ((a.momentum != 0 && !buf.defined()) || !kernels_take(p, g, {&buf})) return Backend::sgd_update(p, g, buf, a);
  check_disjoint("sgd_update", {{"parameter", &p}, {"gradient", &g}, {"momentum_buffer", &buf}});
  profiler::RecordOp rec("fused_sgd", p.device());
  OnDevice guard(p.device().index);
  kernels::fused_sgd(g.dtype(), p.numel(), static_cast<float*>(p.data_ptr()), g.data_ptr(),
                     buf.defined() ? static_cast<float*>(buf.data_ptr()) : nullptr, update::make_sgd_consts(a),
                     guard.stream());
}

// A strided gradient is unscaled in a contiguous copy, written back when the
// unscale is in place.
void CudaBackend::unscale_and_check(const Tensor& g, const Tensor& out, double inv, const Tensor& flags, int64_t slot) {
  const DType cd = g.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const bool floating =
      cd == DType::f64 || g.dtype() == DType::f32 || g.dtype() == DType::f16 || g.dtype() == DType::bf16;
  const bool in_place = out.is_same(g);
  const bool takes = floating && g.device().is_cuda() && out.device() == g.device() && out.dtype() == cd &&
                     out.numel() == g.numel() && (in_place || out.storage() != g.storage()) && flags.defined() &&
                     flags.device() == g.device() && flags.dtype() == DType::i32 && flags.is_contiguous() &&
                     slot >= 0 && slot < flags.numel();
  if (!takes) return Backend::unscale_and_check(g, out, inv, flags, slot);
  const Tensor src = raw::contiguous(g);
  const Tensor dst = in_place ? src : (out.is_contiguous() ? out : empty(out.shape(), out.options()));
  profiler::RecordOp rec("unscale_check", g.device());
  {
    OnDevice guard(g.device().index);
    kernels::unscale_check(src.dtype(), dst.dtype(), src.numel(), src.data_ptr(), dst.data_ptr(), inv,
                           static_cast<int32_t*>(flags.data_ptr()) + slot, guard.stream());
  }
  if (!dst.is_same(out)) raw::copy_(out, dst);
  out.bump_version();
}

}  // namespace snug::cuda

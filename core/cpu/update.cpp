// SPDX-License-Identifier: MIT
// The CPU's fused optimizer updates and loss-scaler unscale (core/backend.h;
// the CUDA twins are in cuda/update.cpp and cuda/update.cu): one allocation-free pass over a
// parameter, its gradient and its state, per element the math of
// core/update_math.h, which the CUDA kernels share. Tensors the loops do not
// take go to the composed default (core/update.cpp; NOTE [ Composed
// defaults, fused overrides ]).
//
// Why fused: the op-by-op update makes several temporaries per parameter and
// passes over memory five or six times. These loops make none and pass once,
// so an optimizer step that has created its state cannot run out of memory
// halfway (NOTE [ Failure-atomic optimizer steps ] in nn/optim/optimizer.cpp).
#include <cstdint>
#include <initializer_list>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/half.h>
#include <snug/core/profiler.h>
#include <snug/core/update_math.h>

namespace snug::inline SNUG_CPU_LEVEL {

namespace {

// Large tensors split across threads; small ones are not worth a fork.
constexpr int64_t kParallelGrain = 1 << 15;

template <class G>
// k by value: no aliasing with p.
void adam_loop(float* p, const G* g, float* m, float* v, int64_t n, const update::AdamConsts k) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) update::adam(p[i], static_cast<float>(g[i]), m[i], v[i], k);
}

template <class G>
void sgd_loop(float* p, const G* g, float* buf, int64_t n, const update::SgdConsts k) {  // k by value, as above
  if (buf) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) update::sgd_momentum(p[i], static_cast<float>(g[i]), buf[i], k);
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) update::sgd_plain(p[i], static_cast<float>(g[i]), k);
  }
}

// out[i] = g[i] * inv in C (f32, or f64 for f64 g); true when all are finite.
template <class C, class G>
bool unscale_loop(const G* g, C* out, int64_t n, C inv) {
  int bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    bool finite = true;
    out[i] = update::unscale(static_cast<C>(g[i]), inv, finite);
    bad |= !finite;
  }
  return bad == 0;
}

// Whether the loops take these tensors: all on CPU devices (they share host
// memory), contiguous, of n elements; the target and state f32, the gradient
// f32, f16 or bf16. Undefined state (no momentum buffer) is fine.
bool loops_take(const Tensor& target, const Tensor& grad, std::initializer_list<const Tensor*> state) {
  auto f32_host = [&](const Tensor& t) {
    return t.device().is_cpu() && t.dtype() == DType::f32 && t.is_contiguous() && t.numel() == target.numel();
  };
  if (!f32_host(target) || !grad.device().is_cpu() || !grad.is_contiguous() || grad.numel() != target.numel())
    return false;
  if (grad.dtype() != DType::f32 && grad.dtype() != DType::f16 && grad.dtype() != DType::bf16) return false;
  for (const Tensor* s : state)
    if (s->defined() && !f32_host(*s)) return false;
  return true;
}

}  // namespace

void CpuBackend::adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                             const update::AdamArgs& a) {
  if (!m.defined() || !v.defined() || !loops_take(p, g, {&m, &v})) return Backend::adam_update(p, g, m, v, a);
  profiler::RecordOp rec("fused_adam", p.device());
  const update::AdamConsts k = update::make_adam_consts(a);
  auto* pp = static_cast<float*>(p.data_ptr());
  auto* mp = static_cast<float*>(m.data_ptr());
  auto* vp = static_cast<float*>(v.data_ptr());
  const int64_t n = p.numel();
  switch (g.dtype()) {
    case DType::f16:
      adam_loop(pp, static_cast<const Half*>(g.data_ptr()), mp, vp, n, k);
      break;
    case DType::bf16:
      adam_loop(pp, static_cast<const BFloat16*>(g.data_ptr()), mp, vp, n, k);
      break;
    default:
      adam_loop(pp, static_cast<const float*>(g.data_ptr()), mp, vp, n, k);
      break;
  }
}

void CpuBackend::sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const update::SgdArgs& a) {
  if ((a.momentum != 0 && !buf.defined()) || !loops_take(p, g, {&buf})) return Backend::sgd_update(p, g, buf, a);
  profiler::RecordOp rec("fused_sgd", p.device());
  const update::SgdConsts k = update::make_sgd_consts(a);
  auto* pp = static_cast<float*>(p.data_ptr());
  float* bp = buf.defined() ? static_cast<float*>(buf.data_ptr()) : nullptr;
  const int64_t n = p.numel();
  switch (g.dtype()) {
    case DType::f16:
      sgd_loop(pp, static_cast<const Half*>(g.data_ptr()), bp, n, k);
      break;
    case DType::bf16:
      sgd_loop(pp, static_cast<const BFloat16*>(g.data_ptr()), bp, n, k);
      break;
    default:
      sgd_loop(pp, static_cast<const float*>(g.data_ptr()), bp, n, k);
      break;
  }
}

void CpuBackend::unscale_and_check(const Tensor& g, const Tensor& out, double inv, const Tensor& flags, int64_t slot) {
  const DType cd = g.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const bool in_place = out.is_same(g);
  const bool floating =
      cd == DType::f64 || g.dtype() == DType::f32 || g.dtype() == DType::f16 || g.dtype() == DType::bf16;
  const bool takes = floating && g.device().is_cpu() && out.device() == g.device() && flags.device() == g.device() &&
                     g.is_contiguous() && out.is_contiguous() && out.dtype() == cd && out.numel() == g.numel() &&
                     (in_place || out.storage() != g.storage()) && flags.defined() && flags.dtype() == DType::i32 &&
                     flags.is_contiguous() && slot >= 0 && slot < flags.numel();
  if (!takes) return Backend::unscale_and_check(g, out, inv, flags, slot);
  profiler::RecordOp rec("unscale_check", g.device());
  const int64_t n = g.numel();
  bool finite = true;
  switch (g.dtype()) {
    case DType::f64:
      finite = unscale_loop(static_cast<const double*>(g.data_ptr()), static_cast<double*>(out.data_ptr()), n, inv);
      break;
    case DType::f32:
      finite = unscale_loop(static_cast<const float*>(g.data_ptr()), static_cast<float*>(out.data_ptr()), n,
                            static_cast<float>(inv));
      break;
    case DType::f16:
      finite = unscale_loop(static_cast<const Half*>(g.data_ptr()), static_cast<float*>(out.data_ptr()), n,
                            static_cast<float>(inv));
      break;
    case DType::bf16:
      finite = unscale_loop(static_cast<const BFloat16*>(g.data_ptr()), static_cast<float*>(out.data_ptr()), n,
                            static_cast<float>(inv));
      break;
    default:
      break;  // not reached: `takes` checked the dtype
  }
  if (!finite) static_cast<int32_t*>(flags.data_ptr())[slot] = 1;
  out.bump_version();
}

}  // namespace snug::SNUG_CPU_LEVEL

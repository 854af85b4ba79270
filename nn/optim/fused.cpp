#include "nn/optim/fused.h"

#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/profiler.h"

namespace snug::nn::optim::fused {

namespace {

// Large tensors split across threads; small ones are not worth a fork.
constexpr int64_t kParallelGrain = 1 << 15;

template <class G>
void adam_loop(float* p, const G* g, float* m, float* v, int64_t n, const AdamArgs& a) {
  const float b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2);
  const float c1 = static_cast<float>(1 - a.beta1), c2 = static_cast<float>(1 - a.beta2);
  const float eps = static_cast<float>(a.eps), wd = static_cast<float>(a.weight_decay);
  const float decay = static_cast<float>(1 - a.lr * a.weight_decay);
  const float inv_sqrt_bc2 = static_cast<float>(1 / std::sqrt(a.bias_correction2));
  const float step = static_cast<float>(a.lr / a.bias_correction1);
  const bool decoupled = a.decoupled;
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    float gi = static_cast<float>(g[i]);
    if (decoupled) pi *= decay;
    else gi += wd * pi;
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step * (mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps));
  }
}

template <class G>
void sgd_loop(float* p, const G* g, float* buf, int64_t n, const SgdArgs& a) {
  const float lr = static_cast<float>(a.lr), mom = static_cast<float>(a.momentum);
  const float damp = static_cast<float>(1 - a.dampening), wd = static_cast<float>(a.weight_decay);
  const bool first = a.first, nesterov = a.nesterov;
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    float d = static_cast<float>(g[i]) + wd * p[i];
    if (buf) {
      const float b = first ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      d = nesterov ? d + mom * b : b;
    }
    p[i] = p[i] - lr * d;
  }
}

bool cpu_f32_contiguous(const Tensor& t) {
  return t.device().is_cpu() && t.dtype() == DType::f32 && t.is_contiguous();
}

}  // namespace

bool supported(const Tensor& target, const Tensor& grad, const Tensor& s1, const Tensor& s2) {
  if (!cpu_f32_contiguous(target) || !grad.device().is_cpu() || !grad.is_contiguous()) return false;
  if (grad.dtype() != DType::f32 && grad.dtype() != DType::f16 && grad.dtype() != DType::bf16) return false;
  if (grad.numel() != target.numel()) return false;
  for (const Tensor* s : {&s1, &s2})
    if (s->defined() && (!cpu_f32_contiguous(*s) || s->numel() != target.numel())) return false;
  return true;
}

void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamArgs& a) {
  SNUG_CHECK(supported(p, g, m, v) && m.defined() && v.defined(), ValueError,
             "fused::adam: expected contiguous CPU f32 parameter and state and an f32/f16/bf16 gradient of the same size");
  profiler::RecordOp rec("fused_adam", p.device());
  auto* pp = static_cast<float*>(p.data_ptr());
  auto* mp = static_cast<float*>(m.data_ptr());
  auto* vp = static_cast<float*>(v.data_ptr());
  const int64_t n = p.numel();
  switch (g.dtype()) {
    case DType::f16: adam_loop(pp, static_cast<const Half*>(g.data_ptr()), mp, vp, n, a); break;
    case DType::bf16: adam_loop(pp, static_cast<const BFloat16*>(g.data_ptr()), mp, vp, n, a); break;
    default: adam_loop(pp, static_cast<const float*>(g.data_ptr()), mp, vp, n, a); break;
  }
}

void sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdArgs& a) {
  SNUG_CHECK(supported(p, g, buf), ValueError,
             "fused::sgd: expected contiguous CPU f32 parameter and buffer and an f32/f16/bf16 gradient of the same size");
  profiler::RecordOp rec("fused_sgd", p.device());
  auto* pp = static_cast<float*>(p.data_ptr());
  float* bp = buf.defined() ? static_cast<float*>(buf.data_ptr()) : nullptr;
  const int64_t n = p.numel();
  switch (g.dtype()) {
    case DType::f16: sgd_loop(pp, static_cast<const Half*>(g.data_ptr()), bp, n, a); break;
    case DType::bf16: sgd_loop(pp, static_cast<const BFloat16*>(g.data_ptr()), bp, n, a); break;
    default: sgd_loop(pp, static_cast<const float*>(g.data_ptr()), bp, n, a); break;
  }
}

}  // namespace snug::nn::optim::fused

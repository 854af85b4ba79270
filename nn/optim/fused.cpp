// SPDX-License-Identifier: MIT
#include <snug/nn/optim/fused.h>

#include <cmath>
#include <cstdint>

#include <snug/core/half.h>
#include <snug/core/profiler.h>
#include <snug/core/update_math.h>
#include <snug/cuda/fused_api.h>

namespace snug::nn::optim::fused {

namespace {

// Large tensors split across threads; small ones are not worth a fork.
constexpr int64_t kParallelGrain = 1 << 15;

template <class G>
void adam_loop(float* p, const G* g, float* m, float* v, int64_t n, const update::AdamConsts k) {  // by value: no aliasing with p
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) update::adam(p[i], static_cast<float>(g[i]), m[i], v[i], k);
}

template <class G>
void sgd_loop(float* p, const G* g, float* buf, int64_t n, const update::SgdConsts k) {  // by value: no aliasing with p
  if (buf) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) update::sgd_momentum(p[i], static_cast<float>(g[i]), buf[i], k);
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) update::sgd_plain(p[i], static_cast<float>(g[i]), k);
  }
}

// Where the loop can reach t: any CPU device for a CPU update (they share
// host memory), the same GPU for a CUDA one.
bool on(const Tensor& t, Device d) { return d.is_cpu() ? t.device().is_cpu() : t.device() == d; }
bool f32_contiguous_on(const Tensor& t, Device d) { return on(t, d) && t.dtype() == DType::f32 && t.is_contiguous(); }

}  // namespace

bool supported(const Tensor& target, const Tensor& grad, const Tensor& s1, const Tensor& s2) {
  const Device d = target.device();
  if (!d.is_cpu() && !d.is_cuda()) return false;
  if (!f32_contiguous_on(target, d) || !on(grad, d) || !grad.is_contiguous()) return false;
  if (grad.dtype() != DType::f32 && grad.dtype() != DType::f16 && grad.dtype() != DType::bf16) return false;
  if (grad.numel() != target.numel()) return false;
  for (const Tensor* s : {&s1, &s2})
    if (s->defined() && (!f32_contiguous_on(*s, d) || s->numel() != target.numel())) return false;
  return true;
}

void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamArgs& a) {
  SNUG_CHECK(supported(p, g, m, v) && m.defined() && v.defined(), ValueError,
             "fused::adam: expected a contiguous f32 parameter and state and an f32/f16/bf16 gradient of the same "
             "size, all on one CPU or CUDA device");
  profiler::RecordOp rec("fused_adam", p.device());
  const update::AdamConsts k = update::make_adam_consts(a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                                                        a.bias_correction1, a.bias_correction2, a.decoupled);
  if (p.device().is_cuda()) {
    cuda::fused_adam(p, g, m, v, k);
    return;
  }
  auto* pp = static_cast<float*>(p.data_ptr());
  auto* mp = static_cast<float*>(m.data_ptr());
  auto* vp = static_cast<float*>(v.data_ptr());
  const int64_t n = p.numel();
  switch (g.dtype()) {
    case DType::f16: adam_loop(pp, static_cast<const Half*>(g.data_ptr()), mp, vp, n, k); break;
    case DType::bf16: adam_loop(pp, static_cast<const BFloat16*>(g.data_ptr()), mp, vp, n, k); break;
    default: adam_loop(pp, static_cast<const float*>(g.data_ptr()), mp, vp, n, k); break;
  }
}

void sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdArgs& a) {
  SNUG_CHECK(supported(p, g, buf), ValueError,
             "fused::sgd: expected a contiguous f32 parameter and buffer and an f32/f16/bf16 gradient of the same "
             "size, all on one CPU or CUDA device");
  profiler::RecordOp rec("fused_sgd", p.device());
  const update::SgdConsts k =
      update::make_sgd_consts(a.lr, a.momentum, a.dampening, a.weight_decay, a.nesterov, a.first);
  if (p.device().is_cuda()) {
    cuda::fused_sgd(p, g, buf, k);
    return;
  }
  auto* pp = static_cast<float*>(p.data_ptr());
  float* bp = buf.defined() ? static_cast<float*>(buf.data_ptr()) : nullptr;
  const int64_t n = p.numel();
  switch (g.dtype()) {
    case DType::f16: sgd_loop(pp, static_cast<const Half*>(g.data_ptr()), bp, n, k); break;
    case DType::bf16: sgd_loop(pp, static_cast<const BFloat16*>(g.data_ptr()), bp, n, k); break;
    default: sgd_loop(pp, static_cast<const float*>(g.data_ptr()), bp, n, k); break;
  }
}

}  // namespace snug::nn::optim::fused

// SPDX-License-Identifier: MIT
// The kernels of the fused optimizer updates and of the loss scaler's
// unscale-and-check; their host side, CudaBackend's entries, is
// cuda/update.cpp. The math is core/update_math.h, the functions the CPU
// loops of core/cpu/update.cpp call, so only the launch is CUDA's (NOTE [ One
// definition of each op's math ]).
// Every kernel is a grid-stride loop over contiguous arrays of n elements:
// element i is touched by exactly one thread, whatever the grid.
#include <cuda_runtime.h>

#include <type_traits>

#include <snug/core/update_math.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

// Thread t of the grid visits i = t, t + step, t + 2 step, ... < n.
__device__ SNUG_INLINE int64_t first_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ SNUG_INLINE int64_t grid_step() { return int64_t(gridDim.x) * blockDim.x; }

// p, m, v f32 (n); g (n) in its storage type, widened to f32 per element.
// No two of the arrays overlap (distinct tensors of the optimizer).
template <class G>
__global__ void adam_kernel(int64_t n, float* __restrict__ p, const G* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, update::AdamConsts k) {
  for (int64_t i = first_index(); i < n; i += grid_step()) update::adam(p[i], static_cast<float>(g[i]), m[i], v[i], k);
}

// buf null without momentum (the same for every thread, so no divergence).
template <class G>
__global__ void sgd_kernel(int64_t n, float* __restrict__ p, const G* __restrict__ g, float* __restrict__ buf,
                           update::SgdConsts k) {
  if (buf) {
    for (int64_t i = first_index(); i < n; i += grid_step())
      update::sgd_momentum(p[i], static_cast<float>(g[i]), buf[i], k);
  } else {
    for (int64_t i = first_index(); i < n; i += grid_step()) update::sgd_plain(p[i], static_cast<float>(g[i]), k);
  }
}

// out[i] = g[i] * inv in C (f32, or f64 for f64); *flag = 1 when any result
// is inf/NaN. out may be g itself (in place): each thread reads its element
// before writing it, so no __restrict__ here. Every thread of a block reaches
// __syncthreads_or (the loop has no early exit), then one thread per block
// that saw a non-finite value stores the 1; concurrent stores of the same
// value from several blocks are harmless, and a clean block stores nothing,
// so the flag set by another gradient's launch is never cleared.
template <class G, class C>
__global__ void unscale_kernel(int64_t n, const G* g, C* out, C inv, int32_t* flag) {
  int all_finite = 1;
  for (int64_t i = first_index(); i < n; i += grid_step()) {
    bool finite = true;
    out[i] = update::unscale<C>(static_cast<C>(g[i]), inv, finite);
    all_finite &= finite ? 1 : 0;
  }
  if (__syncthreads_or(!all_finite) && threadIdx.x == 0) *flag = 1;
}

template <class F>
void dispatch_grad(DType gt, const char* op, F&& f) {
  switch (gt) {
    case DType::f32:
      f(static_cast<const float*>(nullptr));
      break;
    case DType::f16:
      f(static_cast<const Half*>(nullptr));
      break;
    case DType::bf16:
      f(static_cast<const BFloat16*>(nullptr));
      break;
    default:
      throw DTypeError(::snug::str("cuda ", op, ": gradient must be f32, f16 or bf16, got ", dtype_name(gt)));
  }
}

}  // namespace

void fused_adam(DType gt, int64_t n, float* p, const void* g, float* m, float* v, const update::AdamConsts& k,
                StreamHandle s) {
  if (n == 0) return;
  dispatch_grad(gt, "fused_adam", [&](auto tag) {
    using G = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    adam_kernel<G><<<grid_for(n), kThreads, 0, as_stream(s)>>>(n, p, static_cast<const G*>(g), m, v, k);
  });
  check_launch("fused_adam");
}

void fused_sgd(DType gt, int64_t n, float* p, const void* g, float* buf, const update::SgdConsts& k, StreamHandle s) {
  if (n == 0) return;
  dispatch_grad(gt, "fused_sgd", [&](auto tag) {
    using G = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    sgd_kernel<G><<<grid_for(n), kThreads, 0, as_stream(s)>>>(n, p, static_cast<const G*>(g), buf, k);
  });
  check_launch("fused_sgd");
}

void unscale_check(DType gt, DType out_t, int64_t n, const void* g, void* out, double inv, int32_t* flag,
                   StreamHandle s) {
  if (n == 0) return;
  const unsigned grid = grid_for(n);
  if (gt == DType::f64 && out_t == DType::f64) {
    unscale_kernel<double, double>
        <<<grid, kThreads, 0, as_stream(s)>>>(n, static_cast<const double*>(g), static_cast<double*>(out), inv, flag);
  } else if (out_t == DType::f32) {
    // The CPU multiplies by the scalar as an f32 tensor (raw::binary_scalar): float(inv).
    const float finv = static_cast<float>(inv);
    dispatch_grad(gt, "unscale_check", [&](auto tag) {
      using G = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      unscale_kernel<G, float>
          <<<grid, kThreads, 0, as_stream(s)>>>(n, static_cast<const G*>(g), static_cast<float*>(out), finv, flag);
    });
  } else {
    throw DTypeError(
        ::snug::str("cuda unscale_check: cannot unscale a ", dtype_name(gt), " gradient into ", dtype_name(out_t)));
  }
  check_launch("unscale_check");
}

}  // namespace snug::cuda::kernels

// SPDX-License-Identifier: MIT
// detail::apply_act: the activation of kernels::gemm_f32_bias_act, applied to
// rows of C just stored (NOTE [ The activation in the GEMM's store ] in
// core/cpu/gemm_avx512.cpp). A file of its own so that CMakeLists.txt can compile
// it with 512-bit vectors, like the elementwise kernels whose functors it
// uses: GELU is compute-bound, and on GCC's default 256-bit vectors the fused
// pass was slower than the separate elementwise one.
#include <algorithm>

#include <snug/core/cpu/gemm_detail.h>
#include <snug/core/functors.h>

namespace snug::inline SNUG_CPU_LEVEL::kernels::detail {

namespace {
template <class F>
void act_rows(F f, int64_t rows, int64_t n, float* c, float* pre, int64_t ld) {
  for (int64_t i = 0; i < rows; ++i) {
    float* r = c + i * ld;
    if (pre) {
      float* p = pre + i * ld;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        const float v = r[j];
        p[j] = v;
        r[j] = f(v);
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) r[j] = f(r[j]);
    }
  }
}
// c[j] = f(c[j], z[j]): the incoming gradient times the activation's derivative at z.
template <class F>
void grad_rows(F f, int64_t rows, int64_t n, float* c, const float* z, int64_t ld) {
  for (int64_t i = 0; i < rows; ++i) {
    float* r = c + i * ld;
    const float* zr = z + i * ld;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) r[j] = f(r[j], zr[j]);
  }
}
}  // namespace

void apply_act(GemmAct act, int64_t rows, int64_t n, float* c, float* pre, int64_t ld) {
  switch (act) {
    case GemmAct::none:  // only the copy
      if (pre)
        for (int64_t i = 0; i < rows; ++i) std::copy_n(c + i * ld, n, pre + i * ld);
      return;
    case GemmAct::relu:
      return act_rows(ReluF{}, rows, n, c, pre, ld);
    case GemmAct::gelu:
      return act_rows(GeluF{}, rows, n, c, pre, ld);
    case GemmAct::gelu_tanh:
      return act_rows(GeluTanhF{}, rows, n, c, pre, ld);
    // pre holds the forward's pre-activation here, and is only read.
    case GemmAct::relu_grad:
      return grad_rows(ReluBackwardF{}, rows, n, c, pre, ld);
    case GemmAct::gelu_grad:
      return grad_rows(GeluBackwardF{}, rows, n, c, pre, ld);
    case GemmAct::gelu_tanh_grad:
      return grad_rows(GeluTanhBackwardF{}, rows, n, c, pre, ld);
  }
}

}  // namespace snug::SNUG_CPU_LEVEL::kernels::detail

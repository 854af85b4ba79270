// CPU causal softmax for attention: softmax(scale * x) over the last dim
// with column j of row i visible only when j <= i + (Tk - Tq). Masked
// entries are written as 0 and never read, so no T x T mask exists.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cpu_backend.h"
#include "core/cpu_loop.h"
#include "core/functors.h"

namespace snug {

namespace {
// y[0, n) = softmax(sc * x[0, n)) for one f32 row. Max and sum keep kLanes
// partial results, so the loops vectorize without reassociating a single
// accumulator (which the compiler may not do without -ffast-math); exp is
// fmath::exp_approx, plain arithmetic that vectorizes (NOTE [ Vectorizable
// exp and erf for float ]).
constexpr int kLanes = 16;
void softmax_row_f32(const float* x, float* y, int64_t n, float sc) {
  float mv[kLanes];
  for (float& v : mv) v = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) mv[l] = std::max(mv[l], sc * x[j + l]);
  float m = -std::numeric_limits<float>::infinity();
  for (float v : mv) m = std::max(m, v);
  for (; j < n; ++j) m = std::max(m, sc * x[j]);
  for (int64_t k = 0; k < n; ++k) y[k] = fmath::exp_approx(sc * x[k] - m);
  float sv[kLanes] = {};
  j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) sv[l] += y[j + l];
  float s = 0;
  for (float v : sv) s += v;
  for (; j < n; ++j) s += y[j];
  const float inv = s > 0 ? 1.0f / s : 0.0f;
  for (int64_t k = 0; k < n; ++k) y[k] *= inv;
}
}  // namespace

void CpuBackend::causal_softmax(const Tensor& x, double scale, const Tensor& out) {
  const int64_t Tk = x.size(-1), Tq = x.size(-2);
  const int64_t rows = Tk ? x.numel() / Tk : 0;
  const int64_t shift = Tk - Tq;
  dispatch_floating(x.dtype(), "causal_softmax", [&]<class T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(out.data_ptr());
    const A sc = A(scale);
#pragma omp parallel for if (rows * Tk > cpu::kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r % Tq;
      const int64_t visible = std::min<int64_t>(std::max<int64_t>(i + shift + 1, 0), Tk);
      const T* xr = xp + r * Tk;
      T* yr = yp + r * Tk;
      if constexpr (std::is_same_v<T, float>) {
        softmax_row_f32(xr, yr, visible, sc);
      } else {
        A m = -std::numeric_limits<A>::infinity();
        for (int64_t j = 0; j < visible; ++j) m = std::max(m, sc * A(xr[j]));
        A s = 0;
        for (int64_t j = 0; j < visible; ++j) {
          A e = std::exp(sc * A(xr[j]) - m);
          yr[j] = T(e);
          s += e;
        }
        A inv = s > 0 ? A(1) / s : A(0);
        for (int64_t j = 0; j < visible; ++j) yr[j] = T(A(yr[j]) * inv);
      }
      for (int64_t j = visible; j < Tk; ++j) yr[j] = T(0);
    }
  });
}

}  // namespace snug

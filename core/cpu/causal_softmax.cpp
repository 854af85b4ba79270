// SPDX-License-Identifier: MIT
// CPU causal softmax for attention: softmax(scale * x) over the last dim
// with column j of row i visible only when j <= i + (Tk - Tq). Masked
// entries are written as 0 and never read, so no T x T mask exists.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/loop.h>
#include <snug/core/cpu/softmax_row.h>

namespace snug {

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
        cpu::softmax_row_f32(xr, yr, visible, sc, false);
      } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        // Widen the row, run the f32 row kernel, round once on the way out.
        thread_local std::vector<float> buf;
        buf.resize(size_t(2 * visible));
        float *in = buf.data(), *o = buf.data() + visible;
        const uint16_t* xb = reinterpret_cast<const uint16_t*>(xr);
        uint16_t* yb = reinterpret_cast<uint16_t*>(yr);
        if constexpr (std::is_same_v<T, Half>) half_to_float_array(xb, in, visible);
        else bf16_to_float_array(xb, in, visible);
        cpu::softmax_row_f32(in, o, visible, sc, false);
        if constexpr (std::is_same_v<T, Half>) float_to_half_array(o, yb, visible);
        else float_to_bf16_array(o, yb, visible);
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

// CPU layer norm over the last dim, forward and backward side by side.
//   y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps)  (biased var)
//   backward, with xhat = (x - mean) * rstd and gh = g * w:
//     gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat))
//     gw = sum_rows(g * xhat),  gb = sum_rows(g)
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/cpu_backend.h"
#include "core/cpu_loop.h"

namespace snug {

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                            const Tensor& mean, const Tensor& rstd) {
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  dispatch_floating(x.dtype(), "layer_norm", [&]<class T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = weight.defined() ? static_cast<const T*>(weight.data_ptr()) : nullptr;
    const T* bp = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    T* yp = static_cast<T*>(out.data_ptr());
    float* mp = static_cast<float*>(mean.data_ptr());
    float* rp = static_cast<float*>(rstd.data_ptr());
#pragma omp parallel for if (R * C > cpu::kParallelGrain) schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = xp + r * C;
      // Two passes (mean, then centred squares): stable without Welford.
      A s = 0;
      for (int64_t c = 0; c < C; ++c) s += A(xr[c]);
      A mu = s / A(C);
      A v = 0;
      for (int64_t c = 0; c < C; ++c) {
        A d = A(xr[c]) - mu;
        v += d * d;
      }
      A rs = A(1) / std::sqrt(v / A(C) + A(eps));
      mp[r] = float(mu);
      rp[r] = float(rs);
      T* yr = yp + r * C;
      for (int64_t c = 0; c < C; ++c) {
        A h = (A(xr[c]) - mu) * rs;
        if (wp) h *= A(wp[c]);
        if (bp) h += A(bp[c]);
        yr[c] = T(h);
      }
    }
  });
}

void CpuBackend::layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                     const Tensor& grad_weight, const Tensor& grad_bias) {
  const int64_t C = x.size(-1), R = C ? x.numel() / C : 0;
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<class T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = weight.defined() ? static_cast<const T*>(weight.data_ptr()) : nullptr;
    const float* mp = static_cast<const float*>(mean.data_ptr());
    const float* rp = static_cast<const float*>(rstd.data_ptr());
    T* gxp = grad_x.defined() ? static_cast<T*>(grad_x.data_ptr()) : nullptr;
    const bool want_wb = grad_weight.defined() || grad_bias.defined();
    const int nt = (R * C > cpu::kParallelGrain) ? omp_get_max_threads() : 1;
    // Per-thread partial sums for gw/gb, reduced in a fixed order afterwards
    // so results do not depend on scheduling.
    std::vector<A> part_w(want_wb ? size_t(nt) * C : 0, A(0)), part_b(want_wb ? size_t(nt) * C : 0, A(0));
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num(), T_ = omp_get_num_threads();
      int64_t r0 = R * t / T_, r1 = R * (t + 1) / T_;
      A* pw = want_wb ? part_w.data() + size_t(t) * C : nullptr;
      A* pb = want_wb ? part_b.data() + size_t(t) * C : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        const T* gr = gp + r * C;
        const T* xr = xp + r * C;
        A mu = A(mp[r]), rs = A(rp[r]);
        A sum_gh = 0, sum_ghx = 0;
        for (int64_t c = 0; c < C; ++c) {
          A xh = (A(xr[c]) - mu) * rs;
          A g = A(gr[c]);
          A gh = wp ? g * A(wp[c]) : g;
          sum_gh += gh;
          sum_ghx += gh * xh;
          if (pw) {
            pw[c] += g * xh;
            pb[c] += g;
          }
        }
        if (gxp) {
          A m1 = sum_gh / A(C), m2 = sum_ghx / A(C);
          T* gxr = gxp + r * C;
          for (int64_t c = 0; c < C; ++c) {
            A xh = (A(xr[c]) - mu) * rs;
            A gh = wp ? A(gr[c]) * A(wp[c]) : A(gr[c]);
            gxr[c] = T(rs * (gh - m1 - xh * m2));
          }
        }
      }
    }
    if (want_wb) {
      T* gw = grad_weight.defined() ? static_cast<T*>(grad_weight.data_ptr()) : nullptr;
      T* gb = grad_bias.defined() ? static_cast<T*>(grad_bias.data_ptr()) : nullptr;
      for (int64_t c = 0; c < C; ++c) {
        A sw = 0, sb = 0;
        for (int t = 0; t < nt; ++t) {
          sw += part_w[size_t(t) * C + c];
          sb += part_b[size_t(t) * C + c];
        }
        if (gw) gw[c] = T(sw);
        if (gb) gb[c] = T(sb);
      }
    }
  });
}

}  // namespace snug

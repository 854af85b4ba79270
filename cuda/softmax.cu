// SPDX-License-Identifier: MIT
// Row kernels: softmax / log_softmax (forward and backward), the causal
// attention softmax, and layer norm (forward and backward). One block per row;
// each thread strides over the row, then block_reduce combines the partial
// results in a fixed order. The formulas are those of core/cpu/softmax.cpp,
// core/cpu/causal_softmax.cpp and core/cpu/layer_norm.cpp:
//
//   softmax:      y_i = exp(x_i - m) / s,  s = sum_j exp(x_j - m),  m = max_j x_j
//   log_softmax:  y_i = x_i - m - log(s)
//   backward:     softmax      dx_i = y_i (g_i - sum_j g_j y_j)
//                 log_softmax  dx_i = g_i - exp(y_i) sum_j g_j
//   layer norm:   y = (x - mean) rstd w + b,  rstd = 1 / sqrt(var + eps)
//                 gx = rstd (gh - mean(gh) - xhat mean(gh xhat)),  gh = g w
//                 gw = sum_rows(g xhat),  gb = sum_rows(g)
//
// Compute types: float for f16/bf16/f32 (exp is fmath::exp_approx, as on the
// CPU's f32 path), double for f64; softmax row sums in double for f32/f64.
#include <cuda_runtime.h>

#include <type_traits>

#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

template <class T> using comp_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <class T> using rowsum_t = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, double, float>;

__device__ SNUG_INLINE float dexp(float v) { return fmath::exp_approx(v); }
__device__ SNUG_INLINE double dexp(double v) { return ::exp(v); }
__device__ SNUG_INLINE float dlog(float v) { return ::logf(v); }
__device__ SNUG_INLINE double dlog(double v) { return ::log(v); }

template <class A> struct MaxOp {
  __device__ A operator()(A a, A b) const { return (b != b || b > a) ? b : a; }  // NaN wins
};
template <class A> struct SumOp {
  __device__ A operator()(A a, A b) const { return a + b; }
};

template <class T>
__global__ void softmax_kernel(bool log, Geometry<2> rows, int64_t len, int64_t xstep, int64_t ystep, const T* x,
                               T* y) {
  using A = comp_t<T>;
  using S = rowsum_t<T>;
  __shared__ A mbuf[kThreads];
  __shared__ S sbuf[kThreads];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[2];
    rows.offsets(r, o);
    const T* xr = x + o[0];
    T* yr = y + o[1];
    A m = -INFINITY;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) m = MaxOp<A>{}(m, A(xr[i * xstep]));
    m = block_reduce(m, MaxOp<A>{}, mbuf);
    S s = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += S(dexp(A(xr[i * xstep]) - m));
    s = block_reduce(s, SumOp<S>{}, sbuf);
    if (log) {
      const A ls = A(dlog(A(s)));
      for (int64_t i = threadIdx.x; i < len; i += blockDim.x) yr[i * ystep] = T(A(xr[i * xstep]) - m - ls);
    } else {
      const A inv = A(1) / A(s);
      for (int64_t i = threadIdx.x; i < len; i += blockDim.x) yr[i * ystep] = T(dexp(A(xr[i * xstep]) - m) * inv);
    }
  }
}

template <class T>
__global__ void softmax_backward_kernel(bool log, Geometry<3> rows, int64_t len, int64_t gstep, int64_t ystep,
                                        int64_t dstep, const T* g, const T* y, T* d) {
  using A = comp_t<T>;
  using S = rowsum_t<T>;
  __shared__ S sbuf[kThreads];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[3];
    rows.offsets(r, o);
    const T* gr = g + o[0];
    const T* yr = y + o[1];
    T* dr = d + o[2];
    S s = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      s += log ? S(A(gr[i * gstep])) : S(A(gr[i * gstep]) * A(yr[i * ystep]));
    const A cs = A(block_reduce(s, SumOp<S>{}, sbuf));
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const A gi = A(gr[i * gstep]), yi = A(yr[i * ystep]);
      dr[i * dstep] = T(log ? gi - dexp(yi) * cs : yi * (gi - cs));
    }
  }
}

// x, y (rows, Tk); row r is query i = r % Tq and sees columns j <= i + Tk - Tq.
// x may be y. lse (rows) or null: log sum_j exp(scale x_rj) over the visible j.
template <class T>
__global__ void causal_softmax_kernel(int64_t rows, int64_t Tq, int64_t Tk, comp_t<T> scale, const T* x, T* y,
                                      float* lse) {
  using A = comp_t<T>;
  using S = rowsum_t<T>;
  __shared__ A mbuf[kThreads];
  __shared__ S sbuf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t i = r % Tq;
    int64_t visible = i + (Tk - Tq) + 1;
    visible = visible < 0 ? 0 : (visible > Tk ? Tk : visible);
    const T* xr = x + r * Tk;
    T* yr = y + r * Tk;
    A m = -INFINITY;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) m = MaxOp<A>{}(m, scale * A(xr[j]));
    m = block_reduce(m, MaxOp<A>{}, mbuf);
    S s = 0;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) s += S(dexp(scale * A(xr[j]) - m));
    s = block_reduce(s, SumOp<S>{}, sbuf);
    const A inv = s > 0 ? A(1) / A(s) : A(0);
    for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x)
      yr[j] = j < visible ? T(dexp(scale * A(xr[j]) - m) * inv) : T(0);
    if (lse && threadIdx.x == 0) lse[r] = float(double(m) + ::log(double(s)));
  }
}

// The backward of causal_softmax for square f32 rows (Tq = Tk = T) from its
// lse, for the attention's cuBLAS path (NOTE [ Attention through cuBLAS ] in
// cuda/attention.cu): s holds the raw scores and becomes P; dp = dO V^T becomes
// dS = scale P (dp - D_r), D_r = sum_j P_rj dp_rj (= dO_r . O_r).
__global__ void causal_softmax_lse_backward_kernel(float* __restrict__ s, float* __restrict__ dp,
                                                   const float* __restrict__ lse, int64_t T, float scale) {
  extern __shared__ float buf[];  // blockDim.x floats
  const int64_t r = blockIdx.x, i = r % T;
  float* srow = s + r * T;
  float* drow = dp + r * T;
  const float L = lse[r];
  float d = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) d += expf(scale * srow[j] - L) * drow[j];
  d = block_reduce(d, SumOp<float>{}, buf);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    if (j <= i) {
      const float p = expf(scale * srow[j] - L);
      srow[j] = p;
      drow[j] = scale * p * (drow[j] - d);
    } else {
      srow[j] = 0.0f;
      drow[j] = 0.0f;
    }
  }
}

// A power of two from 32 to 256, about the row length.
int row_threads(int64_t T) {
  int t = 32;
  while (t < 256 && t < T) t *= 2;
  return t;
}

template <class T>
__global__ void layer_norm_kernel(int64_t R, int64_t C, comp_t<T> eps, const T* x, const T* w, const T* b, T* y,
                                  float* mean, float* rstd) {
  using A = comp_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* xr = x + r * C;
    A s = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += A(xr[c]);
    const A mu = block_reduce(s, SumOp<A>{}, buf) / A(C);
    A v = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const A dv = A(xr[c]) - mu;
      v += dv * dv;
    }
    const A rs = A(1) / sqrt(block_reduce(v, SumOp<A>{}, buf) / A(C) + eps);
    if (threadIdx.x == 0) {
      mean[r] = float(mu);
      rstd[r] = float(rs);
    }
    T* yr = y + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      A h = (A(xr[c]) - mu) * rs;
      if (w) h *= A(w[c]);
      if (b) h += A(b[c]);
      yr[c] = T(h);
    }
  }
}

template <class T>
__global__ void layer_norm_backward_x_kernel(int64_t R, int64_t C, const T* g, const T* x, const T* w,
                                             const float* mean, const float* rstd, T* gx) {
  using A = comp_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* gr = g + r * C;
    const T* xr = x + r * C;
    const A mu = A(mean[r]), rs = A(rstd[r]);
    A s1 = 0, s2 = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const A xh = (A(xr[c]) - mu) * rs;
      const A gh = w ? A(gr[c]) * A(w[c]) : A(gr[c]);
      s1 += gh;
      s2 += gh * xh;
    }
    const A m1 = block_reduce(s1, SumOp<A>{}, buf) / A(C);
    const A m2 = block_reduce(s2, SumOp<A>{}, buf) / A(C);
    T* gxr = gx + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const A xh = (A(xr[c]) - mu) * rs;
      const A gh = w ? A(gr[c]) * A(w[c]) : A(gr[c]);
      gxr[c] = T(rs * (gh - m1 - xh * m2));
    }
  }
}

// The weight and bias gradients are column sums over all R rows. One thread
// per column over every row (the first version) left an H200 nearly idle:
// 768 threads walking 8192 rows took 2 ms a call, 40% of a 12-layer GPT
// step. So two passes, both in a fixed order (deterministic):
//   partial: block (32 columns x 8 row lanes) per (column group, chunk of
//            rows); lanes step through the chunk, then lane 0 adds the 8
//            lane sums in order and writes the chunk's sums to scratch;
//   finish:  one thread per column adds the chunks' sums in order.
constexpr int kWbCols = 32, kWbLanes = 8;

template <class T>
__global__ void layer_norm_wb_partial_kernel(int64_t R, int64_t C, int64_t chunk_rows, const T* g, const T* x,
                                             const float* mean, const float* rstd, comp_t<T>* pw, comp_t<T>* pb) {
  using A = comp_t<T>;
  __shared__ A sw[kWbLanes][kWbCols], sb[kWbLanes][kWbCols];
  const int64_t c = int64_t(blockIdx.x) * kWbCols + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows, r1 = r0 + chunk_rows < R ? r0 + chunk_rows : R;
  A aw = 0, ab = 0;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kWbLanes) {
      const A gv = A(g[r * C + c]);
      aw += gv * (A(x[r * C + c]) - A(mean[r])) * A(rstd[r]);
      ab += gv;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kWbLanes; ++k) {
      aw += sw[k][threadIdx.x];
      ab += sb[k][threadIdx.x];
    }
    pw[blockIdx.y * C + c] = aw;
    pb[blockIdx.y * C + c] = ab;
  }
}

template <class T>
__global__ void layer_norm_wb_finish_kernel(int64_t C, int64_t chunks, const comp_t<T>* pw, const comp_t<T>* pb,
                                            T* gw, T* gb) {
  using A = comp_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < C; c += step) {
    A sw = 0, sb = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      sw += pw[k * C + c];
      sb += pb[k * C + c];
    }
    if (gw) gw[c] = T(sw);
    if (gb) gb[c] = T(sb);
  }
}

unsigned row_grid(int64_t rows) { return unsigned(rows < 65535 * 8 ? (rows < 1 ? 1 : rows) : 65535 * 8); }

}  // namespace

void softmax(DType t, bool log, const Geometry<2>& rows, int64_t len, int64_t xstep, int64_t ystep, const void* x,
             void* y, StreamHandle s) {
  if (rows.numel == 0 || len == 0) return;
  dispatch_floating(t, log ? "log_softmax" : "softmax", [&]<class T>() {
    softmax_kernel<T><<<row_grid(rows.numel), kThreads, 0, as_stream(s)>>>(log, rows, len, xstep, ystep,
                                                                          static_cast<const T*>(x), static_cast<T*>(y));
    check_launch("softmax");
  });
}

void softmax_backward(DType t, bool log, const Geometry<3>& rows, int64_t len, int64_t gstep, int64_t ystep,
                      int64_t dstep, const void* g, const void* y, void* d, StreamHandle s) {
  if (rows.numel == 0 || len == 0) return;
  dispatch_floating(t, "softmax_backward", [&]<class T>() {
    softmax_backward_kernel<T><<<row_grid(rows.numel), kThreads, 0, as_stream(s)>>>(
        log, rows, len, gstep, ystep, dstep, static_cast<const T*>(g), static_cast<const T*>(y), static_cast<T*>(d));
    check_launch("softmax_backward");
  });
}

void causal_softmax(DType t, int64_t rows, int64_t Tq, int64_t Tk, double scale, const void* x, void* y,
                    StreamHandle s, float* lse) {
  if (rows == 0 || Tk == 0) return;
  dispatch_floating(t, "causal_softmax", [&]<class T>() {
    causal_softmax_kernel<T><<<row_grid(rows), kThreads, 0, as_stream(s)>>>(
        rows, Tq, Tk, comp_t<T>(scale), static_cast<const T*>(x), static_cast<T*>(y), lse);
    check_launch("causal_softmax");
  });
}

void causal_softmax_lse_backward(int64_t rows, int64_t T, float scale, float* s, float* dp, const float* lse,
                                 StreamHandle st) {
  if (rows == 0 || T == 0) return;
  const int t = row_threads(T);
  causal_softmax_lse_backward_kernel<<<unsigned(rows), t, t * sizeof(float), as_stream(st)>>>(s, dp, lse, T, scale);
  check_launch("causal_softmax_lse_backward");
}

void layer_norm(DType t, int64_t R, int64_t C, double eps, const void* x, const void* w, const void* b, void* y,
                float* mean, float* rstd, StreamHandle s) {
  if (R == 0) return;
  dispatch_floating(t, "layer_norm", [&]<class T>() {
    layer_norm_kernel<T><<<row_grid(R), kThreads, 0, as_stream(s)>>>(
        R, C, comp_t<T>(eps), static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
        static_cast<T*>(y), mean, rstd);
    check_launch("layer_norm");
  });
}

int64_t layer_norm_wb_chunks(int64_t R) { return R <= 0 ? 0 : ((R + 63) / 64 < 512 ? (R + 63) / 64 : 512); }

void layer_norm_backward(DType t, int64_t R, int64_t C, const void* g, const void* x, const void* w,
                         const float* mean, const float* rstd, void* gx, void* gw, void* gb, void* scratch,
                         StreamHandle s) {
  dispatch_floating(t, "layer_norm_backward", [&]<class T>() {
    if (gx && R > 0) {
      layer_norm_backward_x_kernel<T><<<row_grid(R), kThreads, 0, as_stream(s)>>>(
          R, C, static_cast<const T*>(g), static_cast<const T*>(x), static_cast<const T*>(w), mean, rstd,
          static_cast<T*>(gx));
      check_launch("layer_norm_backward");
    }
    if ((gw || gb) && C > 0) {
      using A = comp_t<T>;
      const int64_t chunks = layer_norm_wb_chunks(R), chunk_rows = chunks ? (R + chunks - 1) / chunks : 0;
      A* pw = static_cast<A*>(scratch);
      A* pb = pw + chunks * C;
      if (chunks > 0) {
        const dim3 grid(unsigned((C + kWbCols - 1) / kWbCols), unsigned(chunks)), block(kWbCols, kWbLanes);
        layer_norm_wb_partial_kernel<T><<<grid, block, 0, as_stream(s)>>>(
            R, C, chunk_rows, static_cast<const T*>(g), static_cast<const T*>(x), mean, rstd, pw, pb);
        check_launch("layer_norm_backward (weight, bias partial sums)");
      }
      layer_norm_wb_finish_kernel<T><<<grid_for(C), kThreads, 0, as_stream(s)>>>(C, chunks, pw, pb,
                                                                                 static_cast<T*>(gw), static_cast<T*>(gb));
      check_launch("layer_norm_backward (weight, bias)");
    }
  });
}

}  // namespace snug::cuda::kernels

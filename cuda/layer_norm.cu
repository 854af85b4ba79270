// SPDX-License-Identifier: MIT
// Layer norm kernels over the last dim, forward and backward (the CUDA twin
// of core/cpu/layer_norm.cpp). One block per row for the forward and for
// grad_x; each thread strides over the row, then block_reduce combines the
// partial sums in a fixed order. The formulas are core/layer_norm_math.h's
// (layer_norm_row::), the same functions the CPU loops call:
//
//   y = (x - mean) rstd w + b,  rstd = 1 / sqrt(var + eps)
//   add_layer_norm: x is h = x + res (written), and gx gets the gradient of h's other uses added
//   gx = rstd (gh - mean(gh) - xhat mean(gh xhat)),  gh = g w
//   gw = sum_rows(g xhat),  gb = sum_rows(g)
//
// Compute types: float for f16/bf16/f32, double for f64; mean and rstd are
// saved in f32.
#include <cuda_runtime.h>

#include <snug/core/layer_norm_math.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

// res, h: null, or the residual add's other operand and its sum (h = x + res,
// rounded to T, written, then normalized: add_layer_norm).
template <class T>
__global__ void layer_norm_kernel(int64_t R, int64_t C, compute_t<T> eps, const T* x, const T* res, const T* w,
                                  const T* b, T* h, T* y, float* mean, float* rstd) {
  using A = compute_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* xr = x + r * C;
    A s = 0;
    if (res) {
      // Each thread reads back only the elements it wrote: the later loops stride the same way.
      const T* rr = res + r * C;
      T* hr = h + r * C;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const T v = T(A(xr[c]) + A(rr[c]));
        hr[c] = v;
        s += A(v);
      }
      xr = hr;
    } else {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += A(xr[c]);
    }
    const A mu = layer_norm_row::mean(block_reduce(s, SumOp<A>{}, buf), C);
    A v = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const A dv = A(xr[c]) - mu;
      v += dv * dv;
    }
    const A rs = layer_norm_row::rstd(block_reduce(v, SumOp<A>{}, buf), C, eps);
    if (threadIdx.x == 0) {
      mean[r] = float(mu);
      rstd[r] = float(rs);
    }
    T* yr = y + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      yr[c] = T(layer_norm_row::normalize_at(A(xr[c]), mu, rs, w, b, c));
  }
}

// gadd: null, or a gradient added to gx in the same store (add_layer_norm's
// gradient of h from its other uses).
template <class T>
__global__ void layer_norm_backward_x_kernel(int64_t R, int64_t C, const T* g, const T* x, const T* w,
                                             const float* mean, const float* rstd, const T* gadd, T* gx) {
  using A = compute_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* gr = g + r * C;
    const T* xr = x + r * C;
    const A mu = A(mean[r]), rs = A(rstd[r]);
    A s1 = 0, s2 = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const A xh = layer_norm_row::xhat(A(xr[c]), mu, rs);
      const A gh = layer_norm_row::ghat(A(gr[c]), w, c);
      s1 += gh;
      s2 += gh * xh;
    }
    const A m1 = layer_norm_row::mean(block_reduce(s1, SumOp<A>{}, buf), C);
    const A m2 = layer_norm_row::mean(block_reduce(s2, SumOp<A>{}, buf), C);
    T* gxr = gx + r * C;
    const T* gar = gadd ? gadd + r * C : nullptr;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const A xh = layer_norm_row::xhat(A(xr[c]), mu, rs);
      const A gh = layer_norm_row::ghat(A(gr[c]), w, c);
      const A d = layer_norm_row::grad_x_at(gh, xh, m1, m2, rs);
      gxr[c] = gar ? T(A(T(d)) + A(gar[c])) : T(d);  // rounded as the unfused ops round
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
                                             const float* mean, const float* rstd, compute_t<T>* pw, compute_t<T>* pb) {
  using A = compute_t<T>;
  __shared__ A sw[kWbLanes][kWbCols], sb[kWbLanes][kWbCols];
  const int64_t c = int64_t(blockIdx.x) * kWbCols + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows, r1 = r0 + chunk_rows < R ? r0 + chunk_rows : R;
  A aw = 0, ab = 0;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kWbLanes) {
      const A gv = A(g[r * C + c]);
      aw += gv * layer_norm_row::xhat(A(x[r * C + c]), A(mean[r]), A(rstd[r]));
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
__global__ void layer_norm_wb_finish_kernel(int64_t C, int64_t chunks, const compute_t<T>* pw, const compute_t<T>* pb,
                                            T* gw, T* gb) {
  using A = compute_t<T>;
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

}  // namespace

void layer_norm(DType t, int64_t R, int64_t C, double eps, const void* x, const void* res, const void* w,
                const void* b, void* h, void* y, float* mean, float* rstd, StreamHandle s) {
  if (R == 0) return;
  dispatch_floating(t, res ? "add_layer_norm" : "layer_norm", [&]<class T>() {
    layer_norm_kernel<T><<<row_grid(R), kThreads, 0, as_stream(s)>>>(
        R, C, compute_t<T>(eps), static_cast<const T*>(x), static_cast<const T*>(res), static_cast<const T*>(w),
        static_cast<const T*>(b), static_cast<T*>(h), static_cast<T*>(y), mean, rstd);
    check_launch("layer_norm");
  });
}

int64_t layer_norm_wb_chunks(int64_t R) { return R <= 0 ? 0 : ((R + 63) / 64 < 512 ? (R + 63) / 64 : 512); }

void layer_norm_backward(DType t, int64_t R, int64_t C, const void* g, const void* x, const void* w, const float* mean,
                         const float* rstd, const void* gadd, void* gx, void* gw, void* gb, void* scratch,
                         StreamHandle s) {
  dispatch_floating(t, "layer_norm_backward", [&]<class T>() {
    if (gx && R > 0) {
      layer_norm_backward_x_kernel<T>
          <<<row_grid(R), kThreads, 0, as_stream(s)>>>(R, C, static_cast<const T*>(g), static_cast<const T*>(x),
                                                       static_cast<const T*>(w), mean, rstd,
                                                       static_cast<const T*>(gadd), static_cast<T*>(gx));
      check_launch("layer_norm_backward");
    }
    if ((gw || gb) && C > 0) {
      using A = compute_t<T>;
      const int64_t chunks = layer_norm_wb_chunks(R), chunk_rows = chunks ? (R + chunks - 1) / chunks : 0;
      A* pw = static_cast<A*>(scratch);
      A* pb = pw + chunks * C;
      if (chunks > 0) {
        const dim3 grid(unsigned((C + kWbCols - 1) / kWbCols), unsigned(chunks)), block(kWbCols, kWbLanes);
        layer_norm_wb_partial_kernel<T><<<grid, block, 0, as_stream(s)>>>(R, C, chunk_rows, static_cast<const T*>(g),
                                                                          static_cast<const T*>(x), mean, rstd, pw, pb);
        check_launch("layer_norm_backward (weight, bias partial sums)");
      }
      layer_norm_wb_finish_kernel<T>
          <<<grid_for(C), kThreads, 0, as_stream(s)>>>(C, chunks, pw, pb, static_cast<T*>(gw), static_cast<T*>(gb));
      check_launch("layer_norm_backward (weight, bias)");
    }
  });
}

}  // namespace snug::cuda::kernels

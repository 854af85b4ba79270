// SPDX-License-Identifier: MIT
// Reductions (sum, mean, max, min, prod) and arg reductions. The math is the
// init/combine/finish functors of core/functors.h; accumulators are the CPU's
// (NOTE [ Reduction accumulators ] in core/cpu/reduce.cpp): f32 and f64 in
// double, f16/bf16 in float, integers and bool in i64.
//
// Long reductions use a block per output (threads stride over the reduced
// elements, then block_reduce combines them in a fixed tree); short ones a
// thread per output. Either way the order is fixed by the shapes, so results
// are reproducible; they may differ from the CPU's in the last bits of sums.
#include <cuda_runtime.h>

#include <limits>
#include <type_traits>

#include <snug/core/reduce_dispatch.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda::kernels {

namespace {

// Thread per output: kept is (x, out), red is (x).
template <class T, class O, class A, class R>
__global__ void reduce_thread_kernel(R r, Geometry<2> kept, Geometry<1> red, const T* x, O* out) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < kept.numel; k += step) {
    int64_t ko[2];
    kept.offsets(k, ko);
    A acc = r.init();
    for (int64_t j = 0; j < red.numel; ++j) {
      int64_t ro[1];
      red.offsets(j, ro);
      acc = r.combine(acc, static_cast<A>(x[ko[0] + ro[0]]));
    }
    out[ko[1]] = static_cast<O>(r.finish(acc, red.numel));
  }
}

template <class A, class R>
struct Combine {
  R r;
  __device__ A operator()(A a, A b) const { return r.combine(a, b); }
};

// Block per output.
template <class T, class O, class A, class R>
__global__ void reduce_block_kernel(R r, Geometry<2> kept, Geometry<1> red, const T* x, O* out) {
  __shared__ A buf[kThreads];
  for (int64_t k = blockIdx.x; k < kept.numel; k += gridDim.x) {
    int64_t ko[2];
    kept.offsets(k, ko);
    A acc = r.init();
    for (int64_t j = threadIdx.x; j < red.numel; j += blockDim.x) {
      int64_t ro[1];
      red.offsets(j, ro);
      acc = r.combine(acc, static_cast<A>(x[ko[0] + ro[0]]));
    }
    acc = block_reduce(acc, Combine<A, R>{r}, buf);
    if (threadIdx.x == 0) out[ko[1]] = static_cast<O>(r.finish(acc, red.numel));
  }
}

template <class T, class O>
void run_reduce(ReduceOp op, const Geometry<2>& kept, const Geometry<1>& red, const T* x, O* out, StreamHandle s) {
  using A = ReduceAcc<T>;
  if (kept.numel == 0) return;
  visit_supported<A>(op, [&](auto r) {
    using R = decltype(r);
    if (red.numel >= 64) {
      const unsigned grid = unsigned(kept.numel < 65535 * 8 ? kept.numel : 65535 * 8);
      reduce_block_kernel<T, O, A, R><<<grid, kThreads, 0, as_stream(s)>>>(r, kept, red, x, out);
    } else {
      reduce_thread_kernel<T, O, A, R><<<grid_for(kept.numel), kThreads, 0, as_stream(s)>>>(r, kept, red, x, out);
    }
    check_launch(reduce_op_name(op));
  });
}

// Ties give the first index; the first NaN wins (as the CPU and PyTorch).
template <class T>
__global__ void arg_reduce_kernel(bool is_max, Geometry<2> kept, int64_t len, int64_t xstep, const T* x, int64_t* out) {
  using C = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < kept.numel; k += step) {
    int64_t ko[2];
    kept.offsets(k, ko);
    const T* row = x + ko[0];
    C best = static_cast<C>(row[0]);
    int64_t bi = 0;
    for (int64_t i = 1; i < len && best == best; ++i) {
      const C v = static_cast<C>(row[i * xstep]);
      if (v != v || (is_max ? v > best : v < best)) {
        best = v;
        bi = i;
      }
    }
    out[ko[1]] = bi;
  }
}

}  // namespace

void reduce(ReduceOp op, DType x_t, DType out_t, const Geometry<2>& kept, const Geometry<1>& red, const void* x,
            void* out, StreamHandle s) {
  dispatch_all(x_t, reduce_op_name(op), [&]<class T>() {
    if (out_t == x_t) {
      run_reduce<T, T>(op, kept, red, static_cast<const T*>(x), static_cast<T*>(out), s);
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, int64_t>) {
      SNUG_CHECK(out_t == DType::i64, DTypeError, reduce_op_name(op), ": output dtype ", dtype_name(out_t),
                 " is not supported for input dtype ", dtype_name(x_t), " (expected ", dtype_name(x_t), " or i64)");
      run_reduce<T, int64_t>(op, kept, red, static_cast<const T*>(x), static_cast<int64_t*>(out), s);
    } else {
      throw DTypeError(str(reduce_op_name(op), ": output dtype ", dtype_name(out_t),
                           " is not supported for input dtype ", dtype_name(x_t)));
    }
  });
}

void arg_reduce(bool is_max, DType t, const Geometry<2>& kept, int64_t len, int64_t xstep, const void* x, int64_t* out,
                StreamHandle s) {
  if (kept.numel == 0) return;
  dispatch_all(t, is_max ? "argmax" : "argmin", [&]<class T>() {
    arg_reduce_kernel<T>
        <<<grid_for(kept.numel), kThreads, 0, as_stream(s)>>>(is_max, kept, len, xstep, static_cast<const T*>(x), out);
    check_launch(is_max ? "argmax" : "argmin");
  });
}

}  // namespace snug::cuda::kernels

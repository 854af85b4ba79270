// SPDX-License-Identifier: MIT
// Elementwise kernels. The math is not here: each kernel is a template over a
// functor from core/functors.h, the same functor the CPU loop instantiates
// (NOTE [ One definition of each op's math ]), so only the launch is CUDA's.
// Operands are strided and broadcast through cuda/geometry.h.
#include <cuda_runtime.h>

#include <type_traits>

#include <snug/core/functors.h>
#include <snug/cuda/check.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/launch.cuh>

namespace snug::cuda {

namespace kernels {
namespace {

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
inline constexpr bool needs_round_odd_v =
    std::is_same_v<T, double> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

// NOTE [ Rounding wide values to 16 bits ] (core/cpu/elementwise.cpp): a
// double or wide integer goes to float with round-to-odd, so the second
// rounding (to f16/bf16) is exact. Round toward zero, then set the last bit if
// the result was inexact: that is round-to-odd.
__device__ SNUG_INLINE float to_float_round_odd(double x) {
  if (x != x) return float(x);
  const float f = __double2float_rz(x);
  return double(f) == x ? f : __uint_as_float(__float_as_uint(f) | 1u);
}
__device__ SNUG_INLINE float to_float_round_odd(int64_t x) {
  const float f = __ll2float_rz(static_cast<long long>(x));
  return static_cast<long long>(f) == static_cast<long long>(x) ? f : __uint_as_float(__float_as_uint(f) | 1u);
}
__device__ SNUG_INLINE float to_float_round_odd(int32_t x) {
  const float f = __int2float_rz(x);
  return static_cast<int32_t>(f) == x ? f : __uint_as_float(__float_as_uint(f) | 1u);
}

template <class D, class S>
struct CopyBody {
  D* dst;
  const S* src;
  __device__ void operator()(const int64_t* off) const {
    using C = std::conditional_t<std::is_same_v<compute_t<S>, double> || std::is_same_v<compute_t<D>, double>, double,
                                 compute_t<S>>;
    const S x = src[off[1]];
    if constexpr (std::is_same_v<D, bool>) {
      dst[off[0]] = static_cast<C>(x) != C(0);
    } else if constexpr (is_half_v<D> && needs_round_odd_v<S>) {
      dst[off[0]] = D(to_float_round_odd(x));
    } else {
      dst[off[0]] = static_cast<D>(static_cast<C>(x));
    }
  }
};

template <class E>
struct FillBody {
  E* dst;
  E v;
  __device__ void operator()(const int64_t* off) const { dst[off[0]] = v; }
};

template <class T, class F>
struct UnaryBody {
  T* out;
  const T* x;
  F f;
  __device__ void operator()(const int64_t* off) const {
    using C = compute_t<T>;
    out[off[0]] = static_cast<T>(f(static_cast<C>(x[off[1]])));
  }
};

template <class T, class F>
struct BinaryBody {
  T* out;
  const T* a;
  const T* b;
  F f;
  __device__ void operator()(const int64_t* off) const {
    using C = compute_t<T>;
    out[off[0]] = static_cast<T>(f(static_cast<C>(a[off[1]]), static_cast<C>(b[off[2]])));
  }
};

template <class T>
struct CompareBody {
  bool* out;
  const T* a;
  const T* b;
  CompareF f;
  __device__ void operator()(const int64_t* off) const {
    using C = compute_t<T>;
    out[off[0]] = f(static_cast<C>(a[off[1]]), static_cast<C>(b[off[2]]));
  }
};

template <class T>
struct WhereBody {
  T* out;
  const bool* c;
  const T* a;
  const T* b;
  __device__ void operator()(const int64_t* off) const { out[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]]; }
};

// Integer tensors only meet the ops raw::unary keeps integral (the others are
// converted to f32 first), so only those are compiled for integers.
constexpr bool integer_unary(UnaryOp op) {
  return op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::relu || op == UnaryOp::sign ||
         op == UnaryOp::square || op == UnaryOp::clamp || op == UnaryOp::affine;
}

// visit_unary/visit_binary are SNUG_HOST_DEVICE, so their callbacks must be
// too (else nvcc warns #20014), though they launch, and so run on the host
// only. The launch must stay visible to nvcc's device pass: that pass is what
// instantiates elementwise_kernel<N, Body> for each functor. (Hiding it behind
// `#if !defined(__CUDA_ARCH__)` compiled no unary or binary kernel at all, and
// every launch failed with cudaErrorInvalidDeviceFunction on the GPU.)
// nv_exec_check_disable silences the host-call check for these two templates.
#define SNUG_HOST_ONLY_CALLBACK _Pragma("nv_exec_check_disable")
template <class T>
struct LaunchUnary {
  const Geometry<2>* g;
  T* out;
  const T* x;
  StreamHandle s;
  SNUG_HOST_ONLY_CALLBACK
  template <class F>
  SNUG_HOST_DEVICE void operator()(F f) const {
    launch_elementwise<2>("unary", *g, UnaryBody<T, F>{out, x, f}, s);
  }
};
template <class T>
struct LaunchBinary {
  const Geometry<3>* g;
  T* out;
  const T* a;
  const T* b;
  StreamHandle s;
  SNUG_HOST_ONLY_CALLBACK
  template <class F>
  SNUG_HOST_DEVICE void operator()(F f) const {
    launch_elementwise<3>("binary", *g, BinaryBody<T, F>{out, a, b, f}, s);
  }
};

}  // namespace

void copy(DType dst_t, DType src_t, const Geometry<2>& g, void* dst, const void* src, StreamHandle s) {
  dispatch_all(dst_t, "copy", [&]<class D>() {
    dispatch_all(src_t, "copy", [&]<class S>() {
      launch_elementwise<2>("copy", g, CopyBody<D, S>{static_cast<D*>(dst), static_cast<const S*>(src)}, s);
    });
  });
}

void fill(std::size_t elem_size, uint64_t bits, const Geometry<1>& g, void* dst, StreamHandle s) {
  switch (elem_size) {
    case 1:
      return launch_elementwise<1>("fill", g, FillBody<uint8_t>{static_cast<uint8_t*>(dst), uint8_t(bits)}, s);
    case 2:
      return launch_elementwise<1>("fill", g, FillBody<uint16_t>{static_cast<uint16_t*>(dst), uint16_t(bits)}, s);
    case 4:
      return launch_elementwise<1>("fill", g, FillBody<uint32_t>{static_cast<uint32_t*>(dst), uint32_t(bits)}, s);
    case 8:
      return launch_elementwise<1>("fill", g, FillBody<uint64_t>{static_cast<uint64_t*>(dst), bits}, s);
    default:
      throw DTypeError(str("cuda fill: unsupported element size ", elem_size));
  }
}

void unary(UnaryOp op, double a, double b, DType t, const Geometry<2>& g, void* out, const void* x, StreamHandle s) {
  dispatch_numeric(t, unary_op_name(op), [&]<class T>() {
    if constexpr (std::is_integral_v<T>) {
      SNUG_CHECK(integer_unary(op), DTypeError, unary_op_name(op), ": not compiled for integer tensors on CUDA (",
                 dtype_name(t), "); convert to a floating dtype first");
    }
    const LaunchUnary<T> launch{&g, static_cast<T*>(out), static_cast<const T*>(x), s};
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case UnaryOp::neg:
          return launch(NegF{});
        case UnaryOp::abs:
          return launch(AbsF{});
        case UnaryOp::relu:
          return launch(ReluF{});
        case UnaryOp::sign:
          return launch(SignF{});
        case UnaryOp::square:
          return launch(SquareF{});
        case UnaryOp::clamp:
          return launch(ClampF{a, b});
        case UnaryOp::affine:
          return launch(AffineF{a, b});
        default:
          return;
      }
    } else {
      visit_unary(op, a, b, launch);
    }
  });
}

void binary(BinaryOp op, DType t, const Geometry<3>& g, void* out, const void* a, const void* b, StreamHandle s) {
  dispatch_numeric(t, binary_op_name(op), [&]<class T>() {
    const LaunchBinary<T> launch{&g, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), s};
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case BinaryOp::add:
          return launch(AddF{});
        case BinaryOp::sub:
          return launch(SubF{});
        case BinaryOp::mul:
          return launch(MulF{});
        case BinaryOp::div:
          return launch(DivF{});
        case BinaryOp::pow:
          return launch(PowF{});
        case BinaryOp::maximum:
          return launch(MaximumF{});
        case BinaryOp::minimum:
          return launch(MinimumF{});
        default:
          throw DTypeError(str(binary_op_name(op), ": not defined for integer tensors (", dtype_name(t), ")"));
      }
    } else {
      visit_binary(op, launch);
    }
  });
}

void compare(CompareOp op, DType t, const Geometry<3>& g, bool* out, const void* a, const void* b, StreamHandle s) {
  dispatch_all(t, compare_op_name(op), [&]<class T>() {
    launch_elementwise<3>("compare", g,
                          CompareBody<T>{out, static_cast<const T*>(a), static_cast<const T*>(b), CompareF{op}}, s);
  });
}

void where(DType t, const Geometry<4>& g, void* out, const bool* cond, const void* a, const void* b, StreamHandle s) {
  // Selection copies bytes, so one kernel per element size serves every dtype.
  auto go = [&]<class E>() {
    launch_elementwise<4>(
        "where", g, WhereBody<E>{static_cast<E*>(out), cond, static_cast<const E*>(a), static_cast<const E*>(b)}, s);
  };
  dispatch_element_size(dtype_size(t), "where", go);
}

}  // namespace kernels

// ---- the f32 entry points of cuda/cuda_api.h (contiguous arrays) ---------------

namespace {
Geometry<2> dense2(int64_t n) {
  Geometry<2> g;
  g.numel = n;
  g.dense = true;
  return g;
}
}  // namespace

void unary_f32(UnaryOp op, double a, double b, const float* x, float* out, int64_t n) {
  SNUG_CHECK(int(op) >= 0 && op < UnaryOp::count, ValueError, "cuda::unary_f32: invalid op ", int(op));
  SNUG_CHECK(n >= 0, ValueError, "cuda::unary_f32(", unary_op_name(op), "): negative length ", n);
  kernels::unary(op, a, b, DType::f32, dense2(n), out, x, 0);
}

void binary_f32(BinaryOp op, const float* x, const float* y, float* out, int64_t n) {
  SNUG_CHECK(int(op) >= 0 && op < BinaryOp::count, ValueError, "cuda::binary_f32: invalid op ", int(op));
  SNUG_CHECK(n >= 0, ValueError, "cuda::binary_f32(", binary_op_name(op), "): negative length ", n);
  Geometry<3> g;
  g.numel = n;
  g.dense = true;
  kernels::binary(op, DType::f32, g, out, x, y, 0);
}

}  // namespace snug::cuda

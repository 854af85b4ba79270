// SPDX-License-Identifier: MIT
// CPU elementwise kernels: copy/convert, fill, unary, binary, compare, where.
// The math is the shared functors of core/functors.h; the loop is cpu/loop.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/loop.h>

namespace snug::inline SNUG_CPU_LEVEL {

namespace {
// NOTE [ Rounding wide values to 16 bits ]
// Half(float)/BFloat16(float) round correctly from a float, but a double or a
// wide integer converted through float rounds twice: a value just above a
// 16-bit tie can land exactly on the tie in float and then go to even, the
// wrong way (1 + 2^-11 + 2^-40 would become 1.0 in f16, not 1 + 2^-10).
// Rounding to float with round-to-odd first (an inexact result keeps an odd
// last bit) makes the second rounding exact, because float carries at least 2
// more bits than either 16-bit type.
template <class S>
float to_float_round_odd(S x) {
  float f = static_cast<float>(x);  // one correct rounding (RNE) from S
  if constexpr (std::is_floating_point_v<S>) {
    if (std::isnan(x)) return f;
  }
  using W = long double;  // holds every double and every int64 exactly
  W wx = static_cast<W>(x), wf = static_cast<W>(f);
  if (wf == wx || (detail::float_bits(f) & 1u)) return f;
  // Inexact with an even last bit: the odd neighbour lies on x's side.
  return std::nextafter(f, wx > wf ? INFINITY : -INFINITY);
}
template <class T>
inline constexpr bool is_half_type_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
// Sources that do not fit a float exactly: double and 32/64-bit integers.
template <class T>
inline constexpr bool needs_round_odd_v =
    std::is_same_v<T, double> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;
}  // namespace

// Contiguous f32 <-> f16/bf16: the bulk converters of core/cpu/half_convert.cpp (AVX-512
// or F16C, bit-identical to the scalar ones), in chunks across threads.
// Mixed precision converts every matmul operand and result this way.
static bool convert_half_fast(const Tensor& src, const Tensor& dst) {
  const DType s = src.dtype(), d = dst.dtype();
  void (*fn)(const void*, void*, int64_t) = nullptr;
  if (s == DType::f16 && d == DType::f32)
    fn = [](const void* a, void* b, int64_t n) {
      half_to_float_array(static_cast<const uint16_t*>(a), static_cast<float*>(b), n);
    };
  else if (s == DType::bf16 && d == DType::f32)
    fn = [](const void* a, void* b, int64_t n) {
      bf16_to_float_array(static_cast<const uint16_t*>(a), static_cast<float*>(b), n);
    };
  else if (s == DType::f32 && d == DType::f16)
    fn = [](const void* a, void* b, int64_t n) {
      float_to_half_array(static_cast<const float*>(a), static_cast<uint16_t*>(b), n);
    };
  else if (s == DType::f32 && d == DType::bf16)
    fn = [](const void* a, void* b, int64_t n) {
      float_to_bf16_array(static_cast<const float*>(a), static_cast<uint16_t*>(b), n);
    };
  if (!fn || src.shape() != dst.shape() || !src.is_contiguous() || !dst.is_contiguous()) return false;
  const int64_t n = dst.numel();
  const char* a = static_cast<const char*>(src.data_ptr());
  char* b = static_cast<char*>(dst.data_ptr());
  const int64_t sa = int64_t(dtype_size(s)), sb = int64_t(dtype_size(d));
  const int64_t chunk = cpu::kParallelGrain;
#pragma omp parallel for if (n > 2 * chunk) schedule(static)
  for (int64_t i = 0; i < n; i += chunk) fn(a + i * sa, b + i * sb, std::min(chunk, n - i));
  return true;
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() && dst.is_contiguous()) {
    if (dst.nbytes()) std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  if (convert_half_fast(src, dst)) return;
  dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    dispatch_all(src.dtype(), "copy", [&]<class S>() {
      using C = std::conditional_t<std::is_same_v<compute_t<S>, double> || std::is_same_v<compute_t<D>, double>, double,
                                   compute_t<S>>;
      if constexpr (std::is_same_v<D, bool>) {
        cpu::map<bool, C, S>(
            dst, [](C x) { return x != C(0); }, src);
      } else if constexpr (is_half_type_v<D> && needs_round_odd_v<S>) {
        // NOTE [ Rounding wide values to 16 bits ]
        cpu::map<D, S, S>(
            dst, [](S x) { return D(to_float_round_odd(x)); }, src);
      } else {
        cpu::map<D, C, S>(
            dst, [](C x) { return x; }, src);
      }
    });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), "fill", [&]<class T>() {
    T v;
    if constexpr (is_half_type_v<T>)
      v = T(to_float_round_odd(value));  // NOTE [ Rounding wide values to 16 bits ]
    else
      v = static_cast<T>(static_cast<compute_t<T>>(value));
    cpu::map<T, T>(dst, [v]() { return v; });
  });
}

void CpuBackend::unary(UnaryOp op, double a, double b, const Tensor& x, const Tensor& out) {
  dispatch_numeric(x.dtype(), unary_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    // The functor goes to the loop as it is: its operator() is forced inline
    // (SNUG_INLINE), while a wrapping lambda may be left out of line, and a
    // call per element keeps the loop from vectorizing.
    visit_unary(op, a, b, [&](auto f) { cpu::map<T, C, T>(out, f, x); });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_numeric(out.dtype(), binary_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    visit_binary(op, [&](auto f) { cpu::map<T, C, T, T>(out, f, a, b); });
  });
}

void CpuBackend::compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(a.dtype(), compare_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    CompareF f{op};
    cpu::map<bool, C, T, T>(
        out, [f](C u, C v) { return f(u, v); }, a, b);
  });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(out.dtype(), "where", [&]<class T>() {
    using C = compute_t<T>;
    cpu::map<T, C, bool, T, T>(
        out, [](C c, C u, C v) { return c != C(0) ? u : v; }, cond, a, b);
  });
}

void CpuBackend::copy_across(const Tensor& src, const Tensor& dst) {
  // Between CPU devices (cpu:0 <-> cpu:N) bytes are host memory either way.
  SNUG_CHECK(src.device().is_cpu() && dst.device().is_cpu(), DeviceError, "copy_across: CPU backend cannot copy ",
             src.device().str(), " -> ", dst.device().str());
  copy(src, dst);
}

}  // namespace snug::SNUG_CPU_LEVEL

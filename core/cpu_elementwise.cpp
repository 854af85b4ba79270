// CPU elementwise kernels: copy/convert, fill, unary, binary, compare, where.
// The math is the shared functors of core/functors.h; the loop is cpu_loop.h.
#include <cstring>

#include "core/cpu_backend.h"
#include "core/cpu_loop.h"

namespace snug {

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() && dst.is_contiguous()) {
    if (dst.nbytes()) std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    dispatch_all(src.dtype(), "copy", [&]<class S>() {
      using C = std::conditional_t<std::is_same_v<compute_t<S>, double> || std::is_same_v<compute_t<D>, double>,
                                   double, compute_t<S>>;
      if constexpr (std::is_same_v<D, bool>) {
        cpu::map<bool, C, S>(dst, [](C x) { return x != C(0); }, src);
      } else {
        cpu::map<D, C, S>(dst, [](C x) { return x; }, src);
      }
    });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), "fill", [&]<class T>() {
    T v = static_cast<T>(static_cast<compute_t<T>>(value));
    cpu::map<T, T>(dst, [v]() { return v; });
  });
}

void CpuBackend::unary(UnaryOp op, double a, double b, const Tensor& x, const Tensor& out) {
  dispatch_numeric(x.dtype(), unary_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    visit_unary(op, a, b, [&](auto f) { cpu::map<T, C, T>(out, [f](C v) { return f(v); }, x); });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_numeric(out.dtype(), binary_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    visit_binary(op, [&](auto f) { cpu::map<T, C, T, T>(out, [f](C u, C v) { return f(u, v); }, a, b); });
  });
}

void CpuBackend::compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(a.dtype(), compare_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    CompareF f{op};
    cpu::map<bool, C, T, T>(out, [f](C u, C v) { return f(u, v); }, a, b);
  });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(out.dtype(), "where", [&]<class T>() {
    using C = compute_t<T>;
    cpu::map<T, C, bool, T, T>(out, [](C c, C u, C v) { return c != C(0) ? u : v; }, cond, a, b);
  });
}

void CpuBackend::copy_across(const Tensor& src, const Tensor& dst) {
  // Between CPU devices (cpu:0 <-> cpu:N) bytes are host memory either way.
  SNUG_CHECK(src.device().is_cpu() && dst.device().is_cpu(), DeviceError,
             "copy_across: CPU backend cannot copy ", src.device().str(), " -> ", dst.device().str());
  copy(src, dst);
}

}  // namespace snug

// SPDX-License-Identifier: MIT
// ReduceAcc<T>, the type a reduction of T accumulates in, and
// visit_supported<A>(op, fn): visit_reduce (core/functors.h) minus the ops an
// accumulator type cannot do. Shared by the CPU and CUDA reductions so they
// accumulate alike and accept and refuse the same ops. (Mean of an integer tensor is rejected by
// raw::reduce before a backend sees it.)
#pragma once
#include <cstdint>
#include <type_traits>

#include <snug/base/error.h>
#include <snug/core/functors.h>
#include <snug/core/half.h>

namespace snug {

// NOTE [ Reduction accumulators ]
// f32 accumulates in double. A plain f32 running sum loses about log2(n) bits
// (a row of 512 values is off in the 5th digit); pairwise summation would fix
// that too, but double is simpler to read, gives ~1 ulp of f32 for any
// realistic n, and vectorizes just as well (these loops are memory bound).
// f16/bf16 accumulate in f32, their compute type; integers and bool in i64
// (so a sum of i8 cannot wrap), f64 in f64.
template <class T>
struct ReduceAccOf {
  using type = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
};
template <>
struct ReduceAccOf<Half> {
  using type = float;
};
template <>
struct ReduceAccOf<BFloat16> {
  using type = float;
};
template <class T>
using ReduceAcc = typename ReduceAccOf<T>::type;

template <class A, class F>
decltype(auto) visit_supported(ReduceOp op, F&& f) {
  if constexpr (std::is_integral_v<A>) {
    switch (op) {
      case ReduceOp::sum:
        return f(SumR<A>{});
      case ReduceOp::max:
        return f(MaxR<A>{});
      case ReduceOp::min:
        return f(MinR<A>{});
      case ReduceOp::prod:
        return f(ProdR<A>{});
      default:
        throw DTypeError(str(reduce_op_name(op), ": not defined for integer tensors"));
    }
  } else {
    return visit_reduce<A>(op, f);
  }
}

}  // namespace snug

// SPDX-License-Identifier: MIT
// visit_supported<A>(op, fn): visit_reduce (core/functors.h) minus the ops an
// accumulator type cannot do. Shared by the CPU and CUDA reductions so they
// accept and refuse the same ops. (Mean of an integer tensor is rejected by
// raw::reduce before a backend sees it.)
#pragma once
#include <type_traits>

#include <snug/base/error.h>
#include <snug/core/functors.h>

namespace snug {

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

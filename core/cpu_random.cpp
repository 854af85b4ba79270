// CPU random fill from the Philox stream (element i -> counter offset + i/4,
// word i%4; see core/philox.h), so CUDA draws the very same numbers.
#include <omp.h>

#include "core/cpu_backend.h"
#include "core/cpu_loop.h"

namespace snug {

void CpuBackend::random(RandomKind kind, PhiloxState st, double a, double b, const Tensor& out) {
  SNUG_CHECK(out.is_contiguous(), ValueError, "random: output must be contiguous");
  dispatch_floating(out.dtype(), "random", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    const int64_t n = out.numel();
    using C = compute_t<T>;
#pragma omp parallel for if (n > cpu::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      double v = kind == RandomKind::uniform ? a + (b - a) * static_cast<double>(uniform_at(st, i))
                                             : a + b * static_cast<double>(normal_at(st, i));
      o[i] = static_cast<T>(static_cast<C>(v));
    }
  });
}

}  // namespace snug

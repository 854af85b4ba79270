// SPDX-License-Identifier: MIT
// CPU random fill from the Philox stream (element i -> counter offset + i/4,
// word i%4; see core/philox.h), so CUDA (cuda/random.cu) draws the same
// numbers: uniforms bit for bit, normals to a few ulp (box_muller).
#include <omp.h>

#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/loop.h>

namespace snug::inline SNUG_CPU_LEVEL {

void CpuBackend::random(RandomKind kind, PhiloxState st, double a, double b, const Tensor& out) {
  SNUG_CHECK(out.is_contiguous(), ValueError, "random: output must be contiguous");
  dispatch_floating(out.dtype(), "random", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    const int64_t n = out.numel();
    using C = compute_t<T>;
    const int64_t blocks = (n + 3) / 4;
    // One Philox block feeds 4 consecutive elements (the same numbers as
    // uniform_at/normal_at per element, computed once per block).
#pragma omp parallel for if (n > cpu::kParallelGrain) schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      PhiloxBlock w = philox_block(st, static_cast<uint64_t>(blk));
      float v[4];
      if (kind == RandomKind::uniform) {
        for (int j = 0; j < 4; ++j) v[j] = uniform_float(w[j]);
      } else {
        NormalPair z0 = box_muller(w[0], w[1]), z1 = box_muller(w[2], w[3]);
        v[0] = z0.z0, v[1] = z0.z1, v[2] = z1.z0, v[3] = z1.z1;
      }
      for (int j = 0; j < 4 && blk * 4 + j < n; ++j) {
        const double x = random_value(kind == RandomKind::normal, a, b, v[j]);
        o[blk * 4 + j] = static_cast<T>(static_cast<C>(x));
      }
    }
  });
}

}  // namespace snug::SNUG_CPU_LEVEL

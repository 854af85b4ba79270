// SPDX-License-Identifier: MIT
// A level's entry for core/cpu/dispatch.cpp: cpu_dispatch::level_avx512()
// and so on, one per compiled level (NOTE [ CPU levels ] in core/cpu/level.h).
#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/kernel_table.h>

#define SNUG_CPU_ENTRY_CAT2(a, b) a##b
#define SNUG_CPU_ENTRY_CAT(a, b) SNUG_CPU_ENTRY_CAT2(a, b)

namespace snug::cpu_dispatch {

const Level& SNUG_CPU_ENTRY_CAT(level_, SNUG_CPU_LEVEL)() {
  static SNUG_CPU_LEVEL::CpuBackend backend;
#define SNUG_CPU_KERNEL_ADDRESS(ns, fn) &ns::fn,
  static const Level level{SNUG_CPU_LEVEL_NAME, &backend, KernelTable{SNUG_CPU_DIRECT_KERNELS(SNUG_CPU_KERNEL_ADDRESS)}};
#undef SNUG_CPU_KERNEL_ADDRESS
  return level;
}

}  // namespace snug::cpu_dispatch

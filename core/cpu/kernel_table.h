// SPDX-License-Identifier: MIT
// What a CPU level hands to core/cpu/dispatch.cpp (NOTE [ CPU levels ] in
// core/cpu/level.h): its CpuBackend, and the kernels that code outside
// core/cpu/ calls directly (the int8 raw entries, kernel tests, benchmarks).
#pragma once
#include <snug/core/backend.h>
#include <snug/core/cpu/attention.h>
#include <snug/core/cpu/conv.h>
#include <snug/core/cpu/gemm.h>
#include <snug/core/cpu/gemm_int8.h>
#include <snug/core/cpu/half_convert.h>
#include <snug/core/cpu/level.h>
#include <snug/core/cpu/tile_gemm.h>

// X(namespace, function) for each directly called kernel. A kernel added to a
// core/cpu/ header for outside callers goes here and gets a forwarder in
// dispatch.cpp (the linker names any that is missing).
#define SNUG_CPU_DIRECT_KERNELS(X)                                                                                  \
  X(kernels, gemm_f32)                                                                                              \
  X(kernels, gemm_f32_bias)                                                                                         \
  X(kernels, gemm_f32_bias_act)                                                                                     \
  X(kernels, gemm_f32_act_grad)                                                                                     \
  X(kernels, gemm_f32_a_sums)                                                                                       \
  X(kernels, gemm_f64)                                                                                              \
  X(kernels, gemm_f32_batched)                                                                                      \
  X(kernels, gemm_f64_batched)                                                                                      \
  X(kernels, gemm_f32_reference)                                                                                    \
  X(kernels, gemm_f64_reference)                                                                                    \
  X(kernels, gemm_f32_backend)                                                                                      \
  X(kernels, gemm_half)                                                                                             \
  X(kernels, gemm_half_backend)                                                                                     \
  X(kernels, gemm_u8s8s32)                                                                                          \
  X(kernels, gemm_u8s8s32_portable)                                                                                 \
  X(kernels, gemm_u8s8s32_vnni)                                                                                     \
  X(kernels, cpu_has_vnni)                                                                                          \
  X(kernels, cpu_has_dotprod)                                                                                       \
  X(kernels, gemm_int8_backend)                                                                                     \
  X(kernels, pack_int8_b)                                                                                           \
  X(kernels, gemm_u8s8s32_packed)                                                                                   \
  X(kernels, tile_gemm_f32)                                                                                         \
  X(kernels, tile_gemm_f64)                                                                                         \
  X(kernels, tile_gemm_f32_reference)                                                                               \
  X(kernels, transpose_f32)                                                                                         \
  X(cpu, conv2d_relu)                                                                                               \
  X(cpu, conv2d_relu_backward)                                                                                      \
  X(cpu, attention_forward)                                                                                         \
  X(cpu, attention_backward)                                                                                        \
  X(cpu, attention_flops)                                                                                           \
  X(snug, half_to_float_array)                                                                                      \
  X(snug, float_to_half_array)                                                                                      \
  X(snug, bf16_to_float_array)                                                                                      \
  X(snug, float_to_bf16_array)

namespace snug::cpu_dispatch {

// One pointer per kernel; the types are the same in every level (the
// signatures use only types declared outside the levels).
struct KernelTable {
#define SNUG_CPU_KERNEL_FIELD(ns, fn) decltype(&ns::fn) fn;
  SNUG_CPU_DIRECT_KERNELS(SNUG_CPU_KERNEL_FIELD)
#undef SNUG_CPU_KERNEL_FIELD
};

struct Level {
  const char* name;  // "avx512", "avx2", "baseline", "neon", "native"
  Backend* backend;  // this level's CpuBackend
  KernelTable kernels;
};

}  // namespace snug::cpu_dispatch

namespace snug::cpu_dispatch {
// The level in use (chosen at the first call; core/cpu/dispatch.cpp).
const Level& active();
}  // namespace snug::cpu_dispatch

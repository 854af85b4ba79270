// SPDX-License-Identifier: MIT
// The CPU level a file of core/cpu/ is compiled for (NOTE [ CPU levels ]).
//
// NOTE [ CPU levels ]: one libsnug runs on every CPU of its architecture. The
// CPU backend (every file in core/cpu/ but dispatch.cpp, gemm_eigen.cpp and
// threads.cpp) is compiled once per level, each copy with its own compiler
// flags and inside its own inline namespace:
//
//   level     namespace         flags (cmake/cpu_levels.cmake)
//   baseline  snug::baseline    none: x86-64 (SSE2), or whatever the target's default is
//   avx2      snug::avx2        -mavx2 -mfma -mf16c -mbmi -mbmi2 -mlzcnt -mpopcnt
//   avx512    snug::avx512      avx2's and -mavx512f -mavx512cd -mavx512bw -mavx512dq -mavx512vl
//   neon      snug::neon        aarch64 (NEON is part of armv8-a)
//   native    snug::native      -march=native (SNUG_NATIVE=ON: this machine only)
//
// Inside a level's files the code reads as if there were one level: it names
// kernels::gemm_f32 or CpuBackend, and the inline namespace makes those this
// level's. The kernels pick their instructions with the preprocessor
// (#if defined(__AVX512F__) / __AVX2__ / __ARM_NEON), as the flags define.
// Instructions beyond a level's flags (AVX-512 VNNI, BF16, FP16, dotprod) are
// used only in functions marked __attribute__((target(...))) and called
// after a run-time check (core/cpu/gemm_int8.cpp's VNNI kernel).
//
// At the first CPU operation core/cpu/dispatch.cpp picks the best level the
// CPU runs, or the one SNUG_CPU_ISA names, and backend_for(CPU) returns that
// level's CpuBackend: the backend table stays the one road to a kernel. Code
// outside core/cpu/ that calls a kernel directly (the int8 raw entries, tests,
// benchmarks) includes the same headers without SNUG_CPU_LEVEL and gets the
// "dispatch" level: forwarders in dispatch.cpp to the level in use.
//
// Why not one copy of everything: an AVX-512 instruction anywhere in common
// code (the allocator, the autograd engine) stops the program on an AVX2 CPU.
// So only these files get the level flags, the rest of libsnug is compiled
// for the baseline, and the baseline copy links first, so that an inline
// function two levels both emit (a std:: template, say) resolves to the
// baseline's. tools/check_cpu_levels.py disassembles libsnug and fails if any
// function outside snug::avx2 / snug::avx512 uses an AVX (VEX or EVEX)
// instruction, or one in snug::avx2 uses AVX-512.
#pragma once

#ifndef SNUG_CPU_LEVEL
#define SNUG_CPU_LEVEL dispatch
#endif

// "avx512", "avx2", ...: the level's name as a string literal.
#define SNUG_CPU_LEVEL_STR2(x) #x
#define SNUG_CPU_LEVEL_STR(x) SNUG_CPU_LEVEL_STR2(x)
#define SNUG_CPU_LEVEL_NAME SNUG_CPU_LEVEL_STR(SNUG_CPU_LEVEL)

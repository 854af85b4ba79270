// SPDX-License-Identifier: MIT
// Portability macros shared by CPU and CUDA code. A leaf header.
#pragma once

// SNUG_HOST_DEVICE marks functions compiled for both the host and (under nvcc)
// the GPU. The math of every elementwise/reduction op is written once in such
// functors (core/functors.h); CPU loops and CUDA kernels both instantiate them.
#if defined(__CUDACC__)
#define SNUG_HOST_DEVICE __host__ __device__
#define SNUG_INLINE __forceinline__
#else
#define SNUG_HOST_DEVICE
// Forced: a helper left out of line (GCC's size heuristics do that to the
// longer ones, e.g. fmath::erf_approx) turns a SIMD loop back into calls.
#define SNUG_INLINE inline __attribute__((always_inline))
#endif

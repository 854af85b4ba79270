// SPDX-License-Identifier: MIT
// The int8 GEMM behind quantized Linear and Conv2d (docs/compression.md):
//
//   C (M x N, i32) = A (M x K, u8, row-major) * B^T,  B (N x K, s8, row-major)
//
// B is laid out like a Linear weight (out, in), so C = x_q W_q^T. Unsigned
// activations times signed weights is what the x86 instruction VPDPBUSD
// (AVX-512 VNNI) multiplies: four u8*s8 products summed into each i32 lane.
// Both paths compute exact integer sums (no saturation; fine while
// K * 255 * 128 < 2^31, i.e. K < 65,793), so the VNNI and the portable
// kernels agree bit for bit (tests/test_gemm_int8.cpp).
#pragma once
#include <snug/core/cpu/level.h>
#include <cstdint>

#include <snug/core/tensor.h>

namespace snug {

// B packed once for many products (a quantized layer's weight). With VNNI:
// panels of 16 columns, each k-group of 4 stored as 16 lanes x 4 bytes, K
// padded to a multiple of 4 with zeros; without: B as given (N x K). The
// bytes are an i8 tensor, so they come from snug's allocator.
// One type for every level (NOTE [ CPU levels ] in core/cpu/level.h); the
// layout is the packing level's, so the GEMM checks `vnni` against its own.
struct PackedInt8B {
  int64_t N = 0, K = 0, Kp = 0;
  bool vnni = false;
  Tensor data;  // i8
  std::size_t nbytes() const { return data.defined() ? data.nbytes() : 0; }
};

}  // namespace snug

namespace snug::inline SNUG_CPU_LEVEL::kernels {

using snug::PackedInt8B;

// Picks VNNI when the CPU has it, else sdot (aarch64 with dotprod), else the portable loop.
void gemm_u8s8s32(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                  int32_t* C, int64_t ldc);
// Plain loops; every CPU.
void gemm_u8s8s32_portable(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                           int32_t* C, int64_t ldc);
// AVX-512 VNNI; throws DeviceError when the CPU (or the build) lacks it.
void gemm_u8s8s32_vnni(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                       int32_t* C, int64_t ldc);
bool cpu_has_vnni();
// Armv8.2 dot product (sdot) on aarch64, read from HWCAP; false elsewhere.
// gemm_u8s8s32 and the packed GEMM use it when there is no VNNI (NOTE [ int8
// with sdot ] in core/cpu/gemm_int8.cpp).
bool cpu_has_dotprod();
const char* gemm_int8_backend();  // "avx512_vnni", "neon_dotprod" or "portable"

PackedInt8B pack_int8_b(int64_t N, int64_t K, const int8_t* B, int64_t ldb);
void gemm_u8s8s32_packed(int64_t M, const uint8_t* A, int64_t lda, const PackedInt8B& B, int32_t* C, int64_t ldc);

}  // namespace snug::SNUG_CPU_LEVEL::kernels

// SPDX-License-Identifier: MIT
// The int8 GEMM as raw entry points: what quantized Linear and Conv2d
// (quant/modules.cpp) multiply with, without reaching for a kernel. The
// kernels are the CPU backend's (core/cpu/gemm_int8.cpp: AVX-512 VNNI when
// the CPU has it, else portable loops; exact i32 sums either way):
//
//   C (M, N) i32 = A (M, K) u8 * W^T,  W (N, K) i8, laid out like a Linear weight (out, in)
//
// Quantized layers run on the CPU: a tensor on another device is a DeviceError.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include <snug/core/tensor.h>

namespace snug {
struct PackedInt8B;  // core/cpu/gemm_int8.h
}

namespace snug::raw {

// A weight W (N, K) i8 packed once for many products. Opaque: its layout is
// the kernel's (VNNI panels, or W's rows as given). Copies share the bytes,
// which come from snug's allocator (an i8 tensor).
class PackedInt8Weight {
 public:
  bool defined() const { return packed_ != nullptr; }
  int64_t rows() const;        // N (0 when undefined)
  int64_t cols() const;        // K
  std::size_t nbytes() const;  // bytes of the packed weight

 private:
  std::shared_ptr<const PackedInt8B> packed_;
  friend PackedInt8Weight pack_int8_weight(const Tensor& w);
  friend Tensor gemm_u8s8s32(const Tensor& a, const PackedInt8Weight& w);
};

// w (N, K) i8 on a CPU device, any strides; K < 65,793 (exact i32 sums).
PackedInt8Weight pack_int8_weight(const Tensor& w);
// a (M, K) u8 on a CPU device (any strides; rows contiguous is fastest) ->
// (M, N) i32 = a W^T, contiguous.
Tensor gemm_u8s8s32(const Tensor& a, const PackedInt8Weight& w);
// Which kernel runs: "avx512_vnni" or "portable".
const char* int8_gemm_kernel();

}  // namespace snug::raw

// SPDX-License-Identifier: MIT
// Which instruction-set level snug's CPU kernels use (NOTE [ CPU levels ] in
// core/cpu/level.h). One libsnug carries the kernels for several levels and
// picks the best one the CPU runs at the first CPU operation; the environment
// variable SNUG_CPU_ISA=avx512|avx2|baseline (neon on aarch64) forces one, as
// PyTorch's ATEN_CPU_CAPABILITY does.
#pragma once
#include <string>
#include <vector>

namespace snug {

// The level in use: "avx512", "avx2", "baseline", "neon", or "native" (a
// SNUG_NATIVE=ON build, compiled for its build machine only). The first call
// reads SNUG_CPU_ISA and throws snug::ValueError when it names no level of
// this build, snug::DeviceError when the CPU cannot run the level it names.
std::string cpu_isa();

// The levels this build has, best first, and of those the ones this CPU runs.
std::vector<std::string> cpu_isas_built();
std::vector<std::string> cpu_isas_supported();

// The CPU extensions beyond the level that kernels use where present (checked
// at run time): "avx512_vnni" (int8 GEMM), "avx512_bf16", "avx512_fp16", "f16c".
std::vector<std::string> cpu_isa_extensions();

// Switches to `level` from now on (errors as cpu_isa()). For tests and
// benchmarks that compare levels in one process; results computed before
// stay valid, but a quantized weight packed by one level may need packing
// again for another (the int8 GEMM says so).
void set_cpu_isa(const std::string& level);

}  // namespace snug

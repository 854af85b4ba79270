// SPDX-License-Identifier: MIT
// Picks the CPU level (NOTE [ CPU levels ] in core/cpu/level.h), and the
// forwarders through which code outside core/cpu/ reaches a level's kernels.
// Compiled once, for the baseline: it runs before anything is known about the
// CPU.
#include <atomic>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <snug/base/error.h>
#include <snug/core/cpu/kernel_table.h>
#include <snug/core/cpu_isa.h>

namespace snug::cpu_dispatch {

// One entry per compiled level (core/cpu/level_entry.cpp); CMake says which
// levels this build has (cmake/cpu_levels.cmake).
#if SNUG_CPU_HAVE_native
const Level& level_native();
#endif
#if SNUG_CPU_HAVE_avx512
const Level& level_avx512();
#endif
#if SNUG_CPU_HAVE_avx2
const Level& level_avx2();
#endif
#if SNUG_CPU_HAVE_neon
const Level& level_neon();
#endif
#if SNUG_CPU_HAVE_baseline
const Level& level_baseline();
#endif

namespace {

struct Candidate {
  const char* name;
  const Level& (*entry)();
  bool (*runs)();  // can this CPU run the level's code?
};

#if defined(__x86_64__) || defined(__i386__)
// One CPUID bit (leaf, subleaf, register 0-3 = eax..edx, bit), for the
// features clang 14's __builtin_cpu_supports does not name.
bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
  return ((r[reg] >> bit) & 1u) != 0;
}
bool has_f16c() { return cpuid_bit(1, 0, 2, 29); }
bool has_lzcnt() { return cpuid_bit(0x80000001u, 0, 2, 5); }
// The flags of cmake/cpu_levels.cmake, checked one by one (a CPU may have
// AVX2 without F16C or BMI2, and an OS may not save the AVX-512 registers:
// __builtin_cpu_supports looks at both).
bool runs_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && has_lzcnt() &&
         __builtin_cpu_supports("popcnt");
}
bool runs_avx512() {
  return runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}
#endif
[[maybe_unused]] bool runs_always() { return true; }

// Best first.
const std::vector<Candidate>& candidates() {
  static const std::vector<Candidate> list = {
#if SNUG_CPU_HAVE_native
      {"native", level_native, runs_always},  // the build machine's own flags: the user's choice
#endif
#if SNUG_CPU_HAVE_avx512
      {"avx512", level_avx512, runs_avx512},
#endif
#if SNUG_CPU_HAVE_avx2
      {"avx2", level_avx2, runs_avx2},
#endif
#if SNUG_CPU_HAVE_neon
      {"neon", level_neon, runs_always},
#endif
#if SNUG_CPU_HAVE_baseline
      {"baseline", level_baseline, runs_always},
#endif
  };
  return list;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

const Level& find(const std::string& name, const char* asked_by) {
  std::vector<std::string> built;
  for (const Candidate& c : candidates()) {
    built.push_back(c.name);
    if (name != c.name) continue;
    SNUG_CHECK(c.runs(), DeviceError, asked_by, ": CPU level '", name,
               "' needs instructions this CPU lacks; it runs: ", joined(cpu_isas_supported()));
    return c.entry();
  }
  throw ValueError(str(asked_by, ": no CPU level '", name, "' in this build; it has: ", joined(built)));
}

std::atomic<const Level*> g_active{nullptr};
std::mutex g_mutex;

}  // namespace

const Level& active() {
  if (const Level* l = g_active.load(std::memory_order_acquire)) return *l;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const Level* l = g_active.load(std::memory_order_relaxed)) return *l;
  const Level* chosen = nullptr;
  const char* env = std::getenv("SNUG_CPU_ISA");
  if (env != nullptr && *env != '\0') {
    chosen = &find(env, "SNUG_CPU_ISA");
  } else {
    for (const Candidate& c : candidates())
      if (c.runs()) {
        chosen = &c.entry();
        break;
      }
  }
  SNUG_CHECK(chosen != nullptr, DeviceError, "no CPU level of this build runs on this CPU");
  g_active.store(chosen, std::memory_order_release);
  return *chosen;
}

}  // namespace snug::cpu_dispatch

namespace snug {

std::string cpu_isa() { return cpu_dispatch::active().name; }

std::vector<std::string> cpu_isas_built() {
  std::vector<std::string> out;
  for (const auto& c : cpu_dispatch::candidates()) out.push_back(c.name);
  return out;
}

std::vector<std::string> cpu_isas_supported() {
  std::vector<std::string> out;
  for (const auto& c : cpu_dispatch::candidates())
    if (c.runs()) out.push_back(c.name);
  return out;
}

std::vector<std::string> cpu_isa_extensions() {
  std::vector<std::string> out;
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512vnni")) out.push_back("avx512_vnni");
  if (__builtin_cpu_supports("avx512f") && cpu_dispatch::cpuid_bit(7, 1, 0, 5)) out.push_back("avx512_bf16");
  if (__builtin_cpu_supports("avx512f") && cpu_dispatch::cpuid_bit(7, 0, 3, 23)) out.push_back("avx512_fp16");
  if (cpu_dispatch::has_f16c()) out.push_back("f16c");
#endif
  return out;
}

void set_cpu_isa(const std::string& level) {
  const cpu_dispatch::Level& l = cpu_dispatch::find(level, "set_cpu_isa");
  std::lock_guard<std::mutex> lock(cpu_dispatch::g_mutex);
  cpu_dispatch::g_active.store(&l, std::memory_order_release);
}

}  // namespace snug

// ---- forwarders: the "dispatch" level of core/cpu/'s headers ---------------------------------
// Code outside core/cpu/ includes core/cpu/gemm.h and the like without a level
// and so calls these; each passes its arguments to the level in use.

namespace snug::inline dispatch::kernels {

using cpu_dispatch::active;

void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  active().kernels.gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_f32_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float* C, int64_t ldc, const float* bias) {
  active().kernels.gemm_f32_bias(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, bias);
}
void gemm_f32_bias_act(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                       const float* B, int64_t ldb, float* C, int64_t ldc, const float* bias, GemmAct act,
                       float* pre) {
  active().kernels.gemm_f32_bias_act(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, bias, act, pre);
}
void gemm_f32_act_grad(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                       const float* B, int64_t ldb, float* C, int64_t ldc, GemmAct act, const float* z) {
  active().kernels.gemm_f32_act_grad(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, act, z);
}
void gemm_f32_a_sums(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                     const float* B, int64_t ldb, float beta, float* C, int64_t ldc, float* a_sums) {
  active().kernels.gemm_f32_a_sums(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, a_sums);
}
void gemm_f64(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  active().kernels.gemm_f64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_f32_batched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      int64_t sa, const float* B, int64_t ldb, int64_t sb, float beta, float* C, int64_t ldc,
                      int64_t sc, int64_t batch) {
  active().kernels.gemm_f32_batched(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
void gemm_f64_batched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                      int64_t sa, const double* B, int64_t ldb, int64_t sb, double beta, double* C, int64_t ldc,
                      int64_t sc, int64_t batch) {
  active().kernels.gemm_f64_batched(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
void gemm_f32_reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  active().kernels.gemm_f32_reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_f64_reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                        int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  active().kernels.gemm_f64_reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
const char* gemm_f32_backend() { return active().kernels.gemm_f32_backend(); }
void gemm_half(Half16 kind, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias,
               const HalfOut* out) {
  active().kernels.gemm_half(kind, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, out);
}
const char* gemm_half_backend(Half16 kind) { return active().kernels.gemm_half_backend(kind); }

void gemm_u8s8s32(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                  int32_t* C, int64_t ldc) {
  active().kernels.gemm_u8s8s32(M, N, K, A, lda, B, ldb, C, ldc);
}
void gemm_u8s8s32_portable(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B,
                           int64_t ldb, int32_t* C, int64_t ldc) {
  active().kernels.gemm_u8s8s32_portable(M, N, K, A, lda, B, ldb, C, ldc);
}
void gemm_u8s8s32_vnni(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                       int32_t* C, int64_t ldc) {
  active().kernels.gemm_u8s8s32_vnni(M, N, K, A, lda, B, ldb, C, ldc);
}
bool cpu_has_vnni() { return active().kernels.cpu_has_vnni(); }
bool cpu_has_dotprod() { return active().kernels.cpu_has_dotprod(); }
const char* gemm_int8_backend() { return active().kernels.gemm_int8_backend(); }
PackedInt8B pack_int8_b(int64_t N, int64_t K, const int8_t* B, int64_t ldb) {
  return active().kernels.pack_int8_b(N, K, B, ldb);
}
void gemm_u8s8s32_packed(int64_t M, const uint8_t* A, int64_t lda, const PackedInt8B& B, int32_t* C, int64_t ldc) {
  active().kernels.gemm_u8s8s32_packed(M, A, lda, B, C, ldc);
}

void tile_gemm_f32(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row, int64_t a_col,
                   const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  active().kernels.tile_gemm_f32(M, N, K, alpha, A, a_row, a_col, B, ldb, accumulate, C, ldc);
}
void tile_gemm_f64(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t a_row, int64_t a_col,
                   const double* B, int64_t ldb, bool accumulate, double* C, int64_t ldc) {
  active().kernels.tile_gemm_f64(M, N, K, alpha, A, a_row, a_col, B, ldb, accumulate, C, ldc);
}
void tile_gemm_f32_reference(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row,
                             int64_t a_col, const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  active().kernels.tile_gemm_f32_reference(M, N, K, alpha, A, a_row, a_col, B, ldb, accumulate, C, ldc);
}
void transpose_f32(int64_t rows, int64_t cols, const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
  active().kernels.transpose_f32(rows, cols, src, ld_src, dst, ld_dst);
}

}  // namespace snug::dispatch::kernels

namespace snug::inline dispatch::cpu {

using cpu_dispatch::active;

void conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, const Tensor& out) {
  active().kernels.conv2d_relu(x, weight, bias, p, out);
}
void conv2d_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x, const Tensor& weight,
                          const Conv2dParams& p, const Tensor& grad_x, const Tensor& grad_weight,
                          const Tensor& grad_bias) {
  active().kernels.conv2d_relu_backward(grad_out, y, x, weight, p, grad_x, grad_weight, grad_bias);
}
void attention_forward(const Tensor& qkv, int64_t heads, double scale, const AttentionMask& mask, const Tensor& y,
                       const Tensor& lse) {
  active().kernels.attention_forward(qkv, heads, scale, mask, y, lse);
}
void attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy, int64_t heads,
                        double scale, const AttentionMask& mask, const Tensor& dqkv) {
  active().kernels.attention_backward(qkv, y, lse, gy, heads, scale, mask, dqkv);
}
double attention_flops(int64_t B, int64_t T, int64_t heads, int64_t D, bool causal) {
  return active().kernels.attention_flops(B, T, heads, D, causal);
}

}  // namespace snug::dispatch::cpu

namespace snug::inline dispatch {

using cpu_dispatch::active;

void half_to_float_array(const uint16_t* src, float* dst, int64_t n) { active().kernels.half_to_float_array(src, dst, n); }
void float_to_half_array(const float* src, uint16_t* dst, int64_t n) { active().kernels.float_to_half_array(src, dst, n); }
void bf16_to_float_array(const uint16_t* src, float* dst, int64_t n) { active().kernels.bf16_to_float_array(src, dst, n); }
void float_to_bf16_array(const float* src, uint16_t* dst, int64_t n) { active().kernels.float_to_bf16_array(src, dst, n); }

}  // namespace snug::dispatch

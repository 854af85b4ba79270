// SPDX-License-Identifier: MIT
// CpuBackend's Linear entries (core/backend.h: linear_act, linear_backward,
// linear_backward_act): the one-pass GEMMs of core/cpu/gemm.h where they
// apply (f32, or one 16-bit dtype throughout, contiguous), the composed
// defaults (core/fused_defaults.cpp) elsewhere.
#include <snug/core/cpu/cpu_backend.h>

#include <algorithm>
#include <vector>

#include <snug/core/cpu/gemm.h>
#include <snug/core/cpu/gemm_detail.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug::inline SNUG_CPU_LEVEL {

namespace {

using Act = Backend::Activation;

kernels::GemmAct gemm_act(Act a) {
  switch (a) {
    case Act::none:
      return kernels::GemmAct::none;
    case Act::relu:
      return kernels::GemmAct::relu;
    case Act::gelu:
      return kernels::GemmAct::gelu;
    case Act::gelu_tanh:
      return kernels::GemmAct::gelu_tanh;
  }
  return kernels::GemmAct::none;
}

bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }

// Every defined tensor contiguous with dtype dt (all are on the CPU here).
bool all_contiguous(DType dt, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && (t->dtype() != dt || !t->is_contiguous())) return false;
  return true;
}

const float* f32(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.data_ptr()) : nullptr; }
float* f32_out(const Tensor& t) { return t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr; }

// NOTE [ 16-bit one-pass linear ]
// Under autocast the operands of a Linear are f16/bf16 and so is its output;
// what backward keeps (x, the pre-activation, the activation) stays in that
// dtype, which is the memory mixed precision promises. The product is
// kernels::gemm_half (NOTE [ 16-bit GEMM ] in core/cpu/gemm.h): x and the
// weight are read in 16 bits and converted as they are packed, the bias
// (widened once, out floats) is added in the GEMM's store, and each tile of
// x W^T + b is rounded into 16 bits as it finishes, with the activation
// applied to the rounded values there (HalfOut), as a separate ReLU or GELU
// on 16-bit storage would: the fused op is the composed one bit for bit in
// 16 bits too. The backward's act'(z) goes into the store of the GEMM that
// makes grad_z the same way. The GEMMs run a block of rows at a time over an
// f32 scratch of about 1 MiB (workspace).
Half16 half_kind(DType d) { return d == DType::f16 ? Half16::f16 : Half16::bf16; }
const uint16_t* u16(const Tensor& t) { return t.defined() ? static_cast<const uint16_t*>(t.data_ptr()) : nullptr; }
uint16_t* u16_out(const Tensor& t) { return t.defined() ? static_cast<uint16_t*>(t.data_ptr()) : nullptr; }

// Rows of the f32 scratch per GEMM call: about 1 MiB of floats, at least 64 rows.
int64_t block_rows(int64_t rows, int64_t cols) {
  return std::min<int64_t>(rows, std::max<int64_t>(64, (int64_t(1) << 18) / std::max<int64_t>(cols, 1)));
}

// out (N, out) 16-bit = act(round(x (N, in) W^T + b)); pre = round(x W^T + b) when defined.
void linear_act_half(const Tensor& x, const Tensor& weight, const Tensor& bias, Act act, const Tensor& out,
                     const Tensor& pre) {
  const int64_t rows = x.size(0), in = x.size(1), outf = weight.size(0);
  memory::TagScope tag(memory::Tag::workspace);
  const Tensor b32 = bias.defined() ? raw::to_dtype(bias, DType::f32) : Tensor();
  const int64_t blk = block_rows(rows, outf);
  Tensor r32 = empty({blk, outf}, TensorOptions(DType::f32, x.device()));  // (blk, out) scratch
  for (int64_t m0 = 0; m0 < rows; m0 += blk) {
    const int64_t n = std::min(blk, rows - m0);
    HalfOut st;
    st.out = u16_out(out) + m0 * outf;
    st.ldo = outf;
    st.pre = pre.defined() ? u16_out(pre) + m0 * outf : nullptr;
    st.ldp = outf;
    st.act = gemm_act(act);
    kernels::gemm_half(half_kind(x.dtype()), false, true, n, outf, in, 1.0f, u16(x) + m0 * in, in, u16(weight), in,
                       0.0f, f32_out(r32), outf, f32(b32), &st);
  }
}

// grad_z (N, hidden) 16-bit = round(round(grad_out (N, out) W (out, hidden)) * act'(z)).
void linear_backward_act_half(const Tensor& grad_out, const Tensor& weight, Act act, const Tensor& z,
                              const Tensor& grad_z) {
  const int64_t rows = grad_out.size(0), outf = grad_out.size(1), hid = weight.size(1);
  memory::TagScope tag(memory::Tag::workspace);
  const int64_t blk = block_rows(rows, hid);
  Tensor r32 = empty({blk, hid}, TensorOptions(DType::f32, grad_out.device()));  // (blk, hidden) scratch
  for (int64_t m0 = 0; m0 < rows; m0 += blk) {
    const int64_t n = std::min(blk, rows - m0);
    HalfOut st;
    st.out = u16_out(grad_z) + m0 * hid;
    st.ldo = hid;
    st.act = grad_of(gemm_act(act));
    st.z = u16(z) + m0 * hid;
    st.ldz = hid;
    kernels::gemm_half(half_kind(grad_out.dtype()), false, false, n, hid, outf, 1.0f, u16(grad_out) + m0 * outf, outf,
                       u16(weight), hid, 0.0f, f32_out(r32), hid, nullptr, &st);
  }
}

// grad_weight (out, in) 16-bit = round(grad_out^T (out, N) x (N, in)) and
// grad_bias (out) = round(the column sums of grad_out), in one GEMM: the sums
// are read off its packed (widened) panels of grad_out (HalfOut::a_sums), as
// the f32 path does (gemm_f32_a_sums), instead of a second pass over grad_out
// (that reduction was 2% of W-GPT's bf16 step at AVX2). Blocks of `out` rows
// (columns of grad_out) over the f32 scratch.
void linear_weight_grad_half(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                             const Tensor& grad_bias) {
  const int64_t rows = grad_out.size(0), outf = grad_out.size(1), in = x.size(1);
  const Half16 kind = half_kind(grad_out.dtype());
  memory::TagScope tag(memory::Tag::workspace);
  const int64_t blk = block_rows(outf, in);
  Tensor r32 = empty({blk, in}, TensorOptions(DType::f32, x.device()));  // (blk, in) scratch
  std::vector<float> sums(static_cast<std::size_t>(outf));                  // (out) f32 bias gradient
  for (int64_t m0 = 0; m0 < outf; m0 += blk) {
    const int64_t n = std::min(blk, outf - m0);
    HalfOut st;
    st.out = u16_out(grad_weight) + m0 * in;
    st.ldo = in;
    st.a_sums = sums.data() + m0;
    // rows m0.. of grad_out^T: columns m0.. of grad_out
    kernels::gemm_half(kind, true, false, n, in, rows, 1.0f, u16(grad_out) + m0, outf, u16(x), in, 0.0f, f32_out(r32),
                       in, nullptr, &st);
  }
  kernels::detail::narrow16(kind, sums.data(), u16_out(grad_bias), outf);  // rounded once into 16 bits
}

}  // namespace

// f32 (or 16-bit), contiguous: one GEMM that adds the bias and applies the
// activation as it stores each row panel (NOTE [ The activation in the GEMM's
// store ] in core/cpu/gemm_avx512.cpp), instead of a GEMM, a broadcast add and
// an elementwise pass.
void CpuBackend::linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act,
                            const Tensor& out, const Tensor& pre) {
  const DType dt = out.dtype();
  if (!(dt == DType::f32 || is_half(dt)) || !all_contiguous(dt, {&x, &weight, &bias, &out, &pre})) {
    Backend::linear_act(x, weight, bias, act, out, pre);
    return;
  }
  if (is_half(dt)) {
    linear_act_half(x, weight, bias, act, out, pre);
    return;
  }
  const int64_t rows = x.size(0), in = x.size(1), outf = weight.size(0);
  kernels::gemm_f32_bias_act(false, true, rows, outf, in, 1.0f, f32(x), in, f32(weight), in, f32_out(out), outf,
                             f32(bias), gemm_act(act), act == Act::none ? nullptr : f32_out(pre));
  if (act == Act::none && pre.defined()) copy(out, pre);
}

// f32 (or 16-bit), contiguous, both the weight's and the bias's gradients
// wanted: the bias gradient rides along with the weight gradient's GEMM,
// summed from its packed panels of grad_out (kernels::gemm_f32_a_sums; in 16
// bits HalfOut::a_sums).
void CpuBackend::linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& grad_x,
                                 const Tensor& grad_weight, const Tensor& grad_bias) {
  const DType dt = grad_out.dtype();
  if (!grad_weight.defined() || !grad_bias.defined() || !(dt == DType::f32 || is_half(dt)) ||
      !all_contiguous(dt, {&grad_out, &x, &grad_weight, &grad_bias})) {
    Backend::linear_backward(grad_out, x, weight, grad_x, grad_weight, grad_bias);
    return;
  }
  if (grad_x.defined()) Backend::linear_backward(grad_out, Tensor(), weight, grad_x, Tensor(), Tensor());
  if (is_half(dt)) {
    linear_weight_grad_half(grad_out, x, grad_weight, grad_bias);
    return;
  }
  const int64_t rows = grad_out.size(0), outf = grad_out.size(1), in = x.size(1);
  // (out, in) = grad_out^T (out, N) x (N, in); grad_bias (out) = the row sums of grad_out^T
  kernels::gemm_f32_a_sums(true, false, outf, in, rows, 1.0f, f32(grad_out), outf, f32(x), in, 0.0f,
                           f32_out(grad_weight), in, f32_out(grad_bias));
}

// f32 (or 16-bit), contiguous: the derivative applied in the store of the
// GEMM that makes grad_z (kernels::gemm_f32_act_grad; NOTE [ 16-bit one-pass
// linear ]), so the (N, in) product before it never exists and there is no
// separate elementwise pass.
void CpuBackend::linear_backward_act(const Tensor& grad_out, const Tensor& weight, Activation act, const Tensor& z,
                                     const Tensor& grad_z) {
  const DType dt = grad_z.dtype();
  if (act == Activation::none || !(dt == DType::f32 || is_half(dt)) ||
      !all_contiguous(dt, {&grad_out, &weight, &z, &grad_z})) {
    Backend::linear_backward_act(grad_out, weight, act, z, grad_z);
    return;
  }
  if (is_half(dt)) {
    linear_backward_act_half(grad_out, weight, act, z, grad_z);
    return;
  }
  const int64_t n = grad_out.size(0), outf = grad_out.size(1), hid = weight.size(1);
  kernels::gemm_f32_act_grad(false, false, n, hid, outf, 1.0f, f32(grad_out), outf, f32(weight), hid, f32_out(grad_z),
                             hid, gemm_act(act), f32(z));
}

}  // namespace snug::SNUG_CPU_LEVEL

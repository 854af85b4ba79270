// SPDX-License-Identifier: MIT
// CpuBackend's Linear entries (core/backend.h: linear_act, linear_backward,
// linear_backward_act): the one-pass GEMMs of core/cpu/gemm.h where they
// apply (f32, or one 16-bit dtype throughout, contiguous), the composed
// defaults (core/fused_defaults.cpp) elsewhere.
#include <snug/core/cpu/cpu_backend.h>

#include <algorithm>

#include <snug/core/cpu/gemm.h>
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
// weight are read in 16 bits, converted as they are packed, the bias
// (widened once, out floats) added in the GEMM's store, and each block of
// rows of x W^T + b, in f32, rounded once into 16 bits. The activation then
// runs on the rounded values, as a separate ReLU or GELU on 16-bit storage
// would, so the fused op stays bit for bit the composed one in 16 bits too
// (in f32 the GEMM's store applies it). The f32 block is workspace of about
// 1 MiB.
// out (N, out) 16-bit = act(round(x (N, in) W^T + b)); pre = round(x W^T + b) when defined.
void linear_act_half(CpuBackend& be, const Tensor& x, const Tensor& weight, const Tensor& bias, Act act,
                     const Tensor& out, const Tensor& pre) {
  const int64_t rows = x.size(0), in = x.size(1), outf = weight.size(0);
  const Half16 kind = x.dtype() == DType::f16 ? Half16::f16 : Half16::bf16;
  {
    memory::TagScope tag(memory::Tag::workspace);
    const Tensor b32 = bias.defined() ? raw::to_dtype(bias, DType::f32) : Tensor();
    const int64_t blk = std::min<int64_t>(rows, std::max<int64_t>(64, (int64_t(1) << 18) / std::max<int64_t>(outf, 1)));
    Tensor r32 = empty({blk, outf}, TensorOptions(DType::f32, x.device()));  // (blk, out)
    const Tensor& dst = pre.defined() ? pre : out;                          // where the rounded x W^T + b goes
    const uint16_t* xp = static_cast<const uint16_t*>(x.data_ptr());
    const uint16_t* wp = static_cast<const uint16_t*>(weight.data_ptr());
    for (int64_t m0 = 0; m0 < rows; m0 += blk) {
      const int64_t n = std::min(blk, rows - m0);
      kernels::gemm_half(kind, false, true, n, outf, in, 1.0f, xp + m0 * in, in, wp, in, 0.0f, f32_out(r32), outf,
                         f32(b32));
      be.copy(n == blk ? r32 : raw::slice(r32, 0, 0, n, 1), raw::slice(dst, 0, m0, m0 + n, 1));
    }
  }
  if (act == Act::none) {
    if (pre.defined()) be.copy(pre, out);
    return;
  }
  const UnaryOp op = act == Act::relu ? UnaryOp::relu : act == Act::gelu ? UnaryOp::gelu : UnaryOp::gelu_tanh;
  be.unary(op, 0.0, 0.0, pre.defined() ? pre : out, out);  // elementwise: in place is safe
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
    linear_act_half(*this, x, weight, bias, act, out, pre);
    return;
  }
  const int64_t rows = x.size(0), in = x.size(1), outf = weight.size(0);
  kernels::gemm_f32_bias_act(false, true, rows, outf, in, 1.0f, f32(x), in, f32(weight), in, f32_out(out), outf,
                             f32(bias), gemm_act(act), act == Act::none ? nullptr : f32_out(pre));
  if (act == Act::none && pre.defined()) copy(out, pre);
}

// f32, contiguous, both the weight's and the bias's gradients wanted: the bias
// gradient rides along with the weight gradient's GEMM, summed from its
// packed panels of grad_out (kernels::gemm_f32_a_sums).
void CpuBackend::linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& grad_x,
                                 const Tensor& grad_weight, const Tensor& grad_bias) {
  if (!grad_weight.defined() || !grad_bias.defined() ||
      !all_contiguous(DType::f32, {&grad_out, &x, &grad_weight, &grad_bias})) {
    Backend::linear_backward(grad_out, x, weight, grad_x, grad_weight, grad_bias);
    return;
  }
  if (grad_x.defined()) Backend::linear_backward(grad_out, Tensor(), weight, grad_x, Tensor(), Tensor());
  const int64_t rows = grad_out.size(0), outf = grad_out.size(1), in = x.size(1);
  // (out, in) = grad_out^T (out, N) x (N, in); grad_bias (out) = the row sums of grad_out^T
  kernels::gemm_f32_a_sums(true, false, outf, in, rows, 1.0f, f32(grad_out), outf, f32(x), in, 0.0f,
                           f32_out(grad_weight), in, f32_out(grad_bias));
}

// f32, contiguous: the derivative applied in the store of the GEMM that makes
// grad_z (kernels::gemm_f32_act_grad), so the (N, in) product before it never
// exists and there is no separate elementwise pass.
void CpuBackend::linear_backward_act(const Tensor& grad_out, const Tensor& weight, Activation act, const Tensor& z,
                                     const Tensor& grad_z) {
  if (act == Activation::none || !all_contiguous(DType::f32, {&grad_out, &weight, &z, &grad_z})) {
    Backend::linear_backward_act(grad_out, weight, act, z, grad_z);
    return;
  }
  const int64_t n = grad_out.size(0), outf = grad_out.size(1), hid = weight.size(1);
  kernels::gemm_f32_act_grad(false, false, n, hid, outf, 1.0f, f32(grad_out), outf, f32(weight), hid, f32_out(grad_z),
                             hid, gemm_act(act), f32(z));
}

}  // namespace snug::SNUG_CPU_LEVEL

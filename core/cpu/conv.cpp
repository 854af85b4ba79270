// SPDX-License-Identifier: MIT
// CPU convolution over (H, W), forward beside backward (pooling: core/cpu/pool.cpp).
//
// conv2d is im2col + GEMM, one image at a time:
//   cols (C*kH*kW, Ho*Wo):  cols[(c, i, j)][(oh, ow)] = x[c][oh*sh - ph + i*dh][ow*sw - pw + j*dw]  (0 outside)
//   out_g (Cout/G, Ho*Wo) = W_g (Cout/G, C/G*kH*kW) @ cols_g (C/G*kH*kW, Ho*Wo)   for each group g
// The rows of cols are ordered (c, i, j), so group g's rows are one block and
// W's natural layout (Cout, C/G, kH, kW) is already the GEMM's left operand.
// backward:
//   gcols_g = W_g^T @ gout_g;  gx = col2im(gcols)   (col2im is im2col's adjoint: overlapping taps add up)
//   gW_g   += gout_g @ cols_g^T                      (summed over images)
//   gb[co]  = sum over images and pixels of gout[co]
// A 1x1 kernel with stride 1 and no padding needs no cols at all: cols is x.
//
// Threads: with at least as many images as threads, images are spread over
// threads, each with its own cols buffer, and the GEMMs inside run on one
// thread (core/cpu/gemm.cpp stays serial inside a team). With fewer images they go
// one by one and each GEMM uses every thread. Weight/bias gradients are summed
// per thread and then added in thread order, so results do not depend on timing.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <vector>

#include <snug/core/cpu/conv.h>
#include <snug/core/cpu/cpu_backend.h>
#include <snug/core/cpu/gemm.h>
#include <snug/core/cpu/loop.h>
#include <snug/core/functors.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug::inline SNUG_CPU_LEVEL {

namespace {

struct Geom {
  int64_t C, H, W;  // input plane
  int64_t kh, kw;   // kernel
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t Ho, Wo;  // output plane
  bool is_pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The output columns [ow0, ow1) whose input column ow*sw + off lies in [0, W).
void valid_cols(int64_t off, int64_t W, int64_t sw, int64_t Wo, int64_t& ow0, int64_t& ow1) {
  ow0 = off >= 0 ? 0 : ceil_div(-off, sw);
  ow1 = W - off > 0 ? ceil_div(W - off, sw) : 0;
  ow0 = std::min(ow0, Wo);
  ow1 = std::max(std::min(ow1, Wo), ow0);
}

// x (C, H, W) -> cols (C*kh*kw, Ho*Wo)
template <class T>
void im2col(const T* x, const Geom& g, T* cols) {
  const int64_t P = g.Ho * g.Wo;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = cols + ((c * g.kh + i) * g.kw + j) * P;
        const int64_t off = j * g.dw - g.pw;
        int64_t ow0, ow1;
        valid_cols(off, g.W, g.sw, g.Wo, ow0, ow1);
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          T* r = row + oh * g.Wo;
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::fill(r, r + g.Wo, T(0));
            continue;
          }
          const T* xr = x + (c * g.H + ih) * g.W;  // xr[ow*sw + off] is the tap
          std::fill(r, r + ow0, T(0));
          if (g.sw == 1)
            std::copy(xr + ow0 + off, xr + ow1 + off, r + ow0);
          else
            for (int64_t ow = ow0; ow < ow1; ++ow) r[ow] = xr[ow * g.sw + off];
          std::fill(r + ow1, r + g.Wo, T(0));
        }
      }
}

// cols (C*kh*kw, Ho*Wo) -> x (C, H, W), the adjoint of im2col: x is zeroed, then every tap adds in.
template <class T>
void col2im(const T* cols, const Geom& g, T* x) {
  const int64_t P = g.Ho * g.Wo;
  std::fill(x, x + g.C * g.H * g.W, T(0));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = cols + ((c * g.kh + i) * g.kw + j) * P;
        const int64_t off = j * g.dw - g.pw;
        int64_t ow0, ow1;
        valid_cols(off, g.W, g.sw, g.Wo, ow0, ow1);
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const T* r = row + oh * g.Wo;
          T* xr = x + (c * g.H + ih) * g.W;
          if (g.sw == 1) {  // unit stride: a loop the compiler vectorizes (the general one it cannot)
            T* xo = xr + off;
            for (int64_t ow = ow0; ow < ow1; ++ow) xo[ow] += r[ow];
          } else {
            for (int64_t ow = ow0; ow < ow1; ++ow) xr[ow * g.sw + off] += r[ow];
          }
        }
      }
}

// sum of r[0:n] in 16 interleaved partial sums, added in a fixed order: the
// compiler keeps them in one vector register (a single running sum is a chain
// of dependent adds, 4 cycles each; W-CNN's bias gradients spent ~4% of a step
// there).
template <class T>
T row_sum(const T* r, int64_t n) {
  T acc[16] = {};
  int64_t q = 0;
  for (; q + 16 <= n; q += 16)
    for (int l = 0; l < 16; ++l) acc[l] += r[q + l];
  T s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; q < n; ++q) s += r[q];
  return s;
}

// C (M, N) = alpha op(A) op(B) + beta C, row-major, in T's precision.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
          float beta, float* C, int64_t ldc) {
  kernels::gemm_f32(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb,
          double beta, double* C, int64_t ldc) {
  kernels::gemm_f64(ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
}

Geom geom_of(const Tensor& x, const Tensor& w, const Conv2dParams& p, int64_t Ho, int64_t Wo) {
  return Geom{x.size(1),    x.size(2),    x.size(3),     w.size(2),     w.size(3), p.stride[0], p.stride[1],
              p.padding[0], p.padding[1], p.dilation[0], p.dilation[1], Ho,        Wo};
}

// Threads for a loop over N images (see the top of the file); `macs` is the
// whole call's multiply-adds. Small convolutions stay on one thread: waking
// a team costs more than it saves, and much more on a busy machine.
int image_threads(int64_t N, int64_t macs) {
  const int t = kernels::get_num_threads();
  return (N >= t && macs >= (int64_t(1) << 20) && !omp_in_parallel()) ? t : 1;
}

// A scratch buffer from the caching allocator, tagged as workspace.
Tensor scratch(int64_t n, DType dt, Device d) {
  memory::TagScope tag(memory::Tag::workspace);
  return empty({std::max<int64_t>(n, 1)}, TensorOptions(dt, d));
}

// x (N, C, H, W), w (Cout, C/G, kh, kw), b (Cout) or null -> out (N, Cout, Ho, Wo)
template <class T>
void conv_forward(const T* x, const T* w, const T* b, T* out, const Geom& g, int64_t N, int64_t Cout, int64_t G, T* ws,
                  int nt, bool relu = false) {
  const int64_t P = g.Ho * g.Wo, K = g.C / G * g.kh * g.kw, Cog = Cout / G;
  const bool pointwise = g.is_pointwise();
#pragma omp parallel num_threads(nt)
  {
    T* cols = ws + omp_get_thread_num() * g.C * g.kh * g.kw * P;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* xn = x + n * g.C * g.H * g.W;
      T* on = out + n * Cout * P;  // (Cout, P)
      const T* cn = xn;
      if (!pointwise) {
        im2col(xn, g, cols);
        cn = cols;
      }
      for (int64_t gi = 0; gi < G; ++gi)  // on_g (Cog, P) = w_g (Cog, K) @ cn_g (K, P)
        gemm(false, false, Cog, P, K, w + gi * Cog * K, K, cn + gi * K * P, P, T(0), on + gi * Cog * P, P);
      if (b)
        for (int64_t co = 0; co < Cout; ++co) {
          T* r = on + co * P;
          for (int64_t q = 0; q < P; ++q) r[q] += b[co];
        }
      if (relu)  // while the image's output is in cache
        for (int64_t q = 0; q < Cout * P; ++q) on[q] = ReluF{}(on[q]);
    }
  }
}

// gout (N, Cout, Ho, Wo) -> gx (N, C, H, W), gw (Cout, C/G, kh, kw), gb (Cout); null = not wanted.
// gw_part (nt, Cout*K) and gb_part (nt, Cout) are zeroed per-thread sums.
// relu_y: conv2d_relu's output, or null; with it each image's gradient is
// first masked (y > 0) into mask_ws (Cout * Ho * Wo per thread).
template <class T>
void conv_backward(const T* gout, const T* x, const T* w, T* gx, T* gw, T* gb, const Geom& g, int64_t N, int64_t Cout,
                   int64_t G, T* ws, T* gw_part, T* gb_part, int nt, const T* relu_y = nullptr, T* mask_ws = nullptr) {
  const int64_t P = g.Ho * g.Wo, K = g.C / G * g.kh * g.kw, Cog = Cout / G;
  const bool pointwise = g.is_pointwise();
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    T* cols = ws + t * g.C * g.kh * g.kw * P;
    T* gwp = gw ? gw_part + t * Cout * K : nullptr;
    T* gbp = gb ? gb_part + t * Cout : nullptr;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* gn = gout + n * Cout * P;  // (Cout, P)
      if (relu_y) {
        T* m = mask_ws + t * Cout * P;
        const T* yn = relu_y + n * Cout * P;
        for (int64_t q = 0; q < Cout * P; ++q) m[q] = ReluBackwardF{}(gn[q], yn[q]);  // y > 0 iff its input > 0
        gn = m;
      }
      if (gx) {
        T* gxn = gx + n * g.C * g.H * g.W;
        T* gc = pointwise ? gxn : cols;     // gcols (C*kh*kw, P)
        for (int64_t gi = 0; gi < G; ++gi)  // gc_g (K, P) = w_g^T (K, Cog) @ gn_g (Cog, P)
          gemm(true, false, K, P, Cog, w + gi * Cog * K, K, gn + gi * Cog * P, P, T(0), gc + gi * K * P, P);
        if (!pointwise) col2im(cols, g, gxn);
      }
      if (gw) {
        const T* xn = x + n * g.C * g.H * g.W;
        const T* cn = xn;
        if (!pointwise) {
          im2col(xn, g, cols);
          cn = cols;
        }
        for (int64_t gi = 0; gi < G; ++gi)  // gw_g (Cog, K) += gn_g (Cog, P) @ cn_g^T (P, K)
          gemm(false, true, Cog, K, P, gn + gi * Cog * P, P, cn + gi * K * P, P, T(1), gwp + gi * Cog * K, K);
      }
      if (gb)
        for (int64_t co = 0; co < Cout; ++co) gbp[co] += row_sum(gn + co * P, P);
    }
  }
  for (int t = 0; t < nt; ++t) {
    if (gw)
      for (int64_t e = 0; e < Cout * K; ++e) gw[e] = (t == 0 ? T(0) : gw[e]) + gw_part[t * Cout * K + e];
    if (gb)
      for (int64_t co = 0; co < Cout; ++co) gb[co] = (t == 0 ? T(0) : gb[co]) + gb_part[t * Cout + co];
  }
}

bool is_low_precision(DType d) { return d == DType::f16 || d == DType::bf16; }
Tensor to_f32(const Tensor& t) { return t.defined() ? raw::to_dtype(t, DType::f32) : Tensor(); }
Tensor empty_f32_like(const Tensor& t) {
  return t.defined() ? empty(t.shape(), TensorOptions(DType::f32, t.device())) : Tensor();
}

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace

namespace {
// CpuBackend::conv2d and cpu::conv2d_relu (f32/f64 only for the latter).
void conv2d_run(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, const Tensor& out,
                bool relu) {
  const int64_t N = x.size(0), Cout = weight.size(0);
  const Geom g = geom_of(x, weight, p, out.size(2), out.size(3));
  if (out.numel() == 0) return;
  const int nt = image_threads(N, out.numel() * (g.C / p.groups) * g.kh * g.kw);
  const int64_t per_thread = g.is_pointwise() ? 0 : g.C * g.kh * g.kw * g.Ho * g.Wo;
  Tensor ws = scratch(nt * per_thread, out.dtype(), out.device());
  dispatch_floating(out.dtype(), "conv2d", [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      conv_forward<T>(ptr<T>(x), ptr<T>(weight), ptr<T>(bias), ptr<T>(out), g, N, Cout, p.groups, ptr<T>(ws), nt, relu);
  });
}

// CpuBackend::conv2d_backward and cpu::conv2d_relu_backward (relu_y defined).
void conv2d_backward_run(const Tensor& grad_out, const Tensor& relu_y, const Tensor& x, const Tensor& weight,
                         const Conv2dParams& p, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  // Shapes: x may be undefined when only grad_x is wanted; grad_x then gives them.
  const Tensor& xs = x.defined() ? x : grad_x;
  const int64_t N = grad_out.size(0), Cout = grad_out.size(1);
  const int64_t kh = weight.defined() ? weight.size(2) : grad_weight.size(2);
  const int64_t kw = weight.defined() ? weight.size(3) : grad_weight.size(3);
  const Geom g{xs.size(1),    xs.size(2),       xs.size(3),      kh,           kw,
               p.stride[0],   p.stride[1],      p.padding[0],    p.padding[1], p.dilation[0],
               p.dilation[1], grad_out.size(2), grad_out.size(3)};
  const int64_t K = g.C / p.groups * kh * kw;
  const int nt = image_threads(N, grad_out.numel() * K);
  const int64_t per_thread = g.is_pointwise() ? 0 : g.C * kh * kw * g.Ho * g.Wo;
  const DType dt = grad_out.dtype();
  Tensor ws = scratch(nt * per_thread, dt, grad_out.device());
  Tensor mask_ws = relu_y.defined() ? scratch(nt * Cout * g.Ho * g.Wo, dt, grad_out.device()) : Tensor();
  Tensor gw_part = grad_weight.defined() ? zeros({nt, Cout * K}, TensorOptions(dt, grad_out.device())) : Tensor();
  Tensor gb_part = grad_bias.defined() ? zeros({nt, Cout}, TensorOptions(dt, grad_out.device())) : Tensor();
  if (grad_out.numel() == 0) {  // nothing flows back: every gradient is zero
    for (const Tensor* t : {&grad_x, &grad_weight, &grad_bias})
      if (t->defined()) raw::fill_(*t, 0);
    return;
  }
  dispatch_floating(dt, "conv2d_backward", [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      conv_backward<T>(ptr<T>(grad_out), ptr<T>(x), ptr<T>(weight), ptr<T>(grad_x), ptr<T>(grad_weight),
                       ptr<T>(grad_bias), g, N, Cout, p.groups, ptr<T>(ws), ptr<T>(gw_part), ptr<T>(gb_part), nt,
                       ptr<T>(relu_y), ptr<T>(mask_ws));
  });
}

// f32/f64, contiguous, on the CPU: what the fused entry points take.
void check_fused(const char* op, std::initializer_list<const Tensor*> ts) {
  const DType dt = (*ts.begin())->dtype();
  SNUG_CHECK(dt == DType::f32 || dt == DType::f64, DTypeError, "cpu::", op, ": expected f32 or f64, got ",
             dtype_name(dt));
  for (const Tensor* t : ts)
    if (t->defined())
      SNUG_CHECK(t->device().is_cpu() && t->dtype() == dt && t->is_contiguous(), ValueError, "cpu::", op,
                 ": every tensor must be a contiguous ", dtype_name(dt), " CPU tensor");
}
// What check_fused accepts, as a question: whether CpuBackend's conv2d_relu
// entries can take the fused kernels or fall back to the composed default.
bool takes_fused_conv(std::initializer_list<const Tensor*> ts) {
  const DType dt = (*ts.begin())->dtype();
  if (dt != DType::f32 && dt != DType::f64) return false;
  for (const Tensor* t : ts)
    if (t->defined() && (t->dtype() != dt || !t->is_contiguous())) return false;
  return true;
}
}  // namespace

void cpu::conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                      const Tensor& out) {
  check_fused("conv2d_relu", {&out, &x, &weight, &bias});
  conv2d_run(x, weight, bias, p, out, true);
}

void cpu::conv2d_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x, const Tensor& weight,
                               const Conv2dParams& p, const Tensor& grad_x, const Tensor& grad_weight,
                               const Tensor& grad_bias) {
  check_fused("conv2d_relu_backward", {&grad_out, &y, &x, &weight, &grad_x, &grad_weight, &grad_bias});
  SNUG_CHECK(y.shape() == grad_out.shape(), ShapeError, "cpu::conv2d_relu_backward: y ", shape_str(y.shape()),
             " and grad_out ", shape_str(grad_out.shape()), " differ");
  conv2d_backward_run(grad_out, y, x, weight, p, grad_x, grad_weight, grad_bias);
}

void CpuBackend::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                        const Tensor& out) {
  if (is_low_precision(out.dtype())) {  // f16/bf16: computed in f32, rounded once at the end
    Tensor o32 = empty_f32_like(out);
    conv2d(to_f32(x), to_f32(weight), to_f32(bias), p, o32);
    copy(o32, out);
    return;
  }
  conv2d_run(x, weight, bias, p, out, false);
}

void CpuBackend::conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                                 const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  if (is_low_precision(grad_out.dtype())) {
    Tensor gx = empty_f32_like(grad_x), gw = empty_f32_like(grad_weight), gb = empty_f32_like(grad_bias);
    conv2d_backward(to_f32(grad_out), to_f32(x), to_f32(weight), p, gx, gw, gb);
    if (gx.defined()) copy(gx, grad_x);
    if (gw.defined()) copy(gw, grad_weight);
    if (gb.defined()) copy(gb, grad_bias);
    return;
  }
  conv2d_backward_run(grad_out, Tensor(), x, weight, p, grad_x, grad_weight, grad_bias);
}

}  // namespace snug::SNUG_CPU_LEVEL

namespace snug::inline SNUG_CPU_LEVEL {

// f32/f64, contiguous: the ReLU applied to each image's output, and in
// backward its mask, inside the convolution (core/cpu/conv.h). 16-bit: the
// composed default (conv2d computed in f32 and rounded, then ReLU on the
// 16-bit values), as conv2d then relu would give.
void CpuBackend::conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                             const Tensor& out) {
  if (!takes_fused_conv({&out, &x, &weight, &bias})) {
    Backend::conv2d_relu(x, weight, bias, p, out);
    return;
  }
  cpu::conv2d_relu(x, weight, bias, p, out);
}

void CpuBackend::conv2d_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x, const Tensor& weight,
                                      const Conv2dParams& p, const Tensor& grad_x, const Tensor& grad_weight,
                                      const Tensor& grad_bias) {
  if (!takes_fused_conv({&grad_out, &y, &x, &weight, &grad_x, &grad_weight, &grad_bias})) {
    Backend::conv2d_relu_backward(grad_out, y, x, weight, p, grad_x, grad_weight, grad_bias);
    return;
  }
  cpu::conv2d_relu_backward(grad_out, y, x, weight, p, grad_x, grad_weight, grad_bias);
}

}  // namespace snug::SNUG_CPU_LEVEL

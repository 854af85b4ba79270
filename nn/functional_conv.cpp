// SPDX-License-Identifier: MIT
// nn::functional::conv2d (and conv2d_relu): checks, output shape, the backend
// call and the backward beside it. The arithmetic (im2col + GEMM on the CPU) is in the
// backend: core/cpu/conv.cpp; conv2d_relu's default (conv2d, then ReLU) in core/fused_defaults.cpp.
#include <snug/autograd/autocast.h>
#include <array>

#include <snug/autograd/node.h>
#include <snug/core/backend.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/nn/functional.h>
#include <snug/nn/fused.h>

namespace snug::nn::functional {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

namespace {
std::string pair_str(std::array<int64_t, 2> a) { return str("(", a[0], ", ", a[1], ")"); }
}  // namespace

// x (N, C, H, W), weight (Cout, C/groups, kH, kW), bias (Cout) -> y (N, Cout, Ho, Wo)
//   y[n, co, oh, ow] = b[co] + sum_{c in group(co), i, j} w[co, c, i, j] x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]
// backward (the backend's conv2d_backward):
//   gx = the transposed convolution of g by w;  gw[co, c, i, j] = sum_{n, oh, ow} g[n, co, oh, ow] x[n, c, ...];
//   gb[co] = sum_{n, oh, ow} g[n, co, oh, ow]
namespace {
// conv2d, and with relu = true conv2d_relu.
Tensor conv2d_impl(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, std::array<int64_t, 2> stride,
                   std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups, bool relu_after) {
  // Autocast: low precision (autograd/autocast.h); identity outside a scope.
  const Tensor x = autocast::lower(x_in), weight = autocast::lower(weight_in), bias = autocast::lower(bias_in);
  SNUG_CHECK(x.dim() == 4, ShapeError, "conv2d: expected input (N, C, H, W), got ", shape_str(x.shape()),
             x.dim() == 3 ? "; add a batch dim with unsqueeze(0)" : "");
  SNUG_CHECK(weight.dim() == 4, ShapeError, "conv2d: expected weight (Cout, Cin/groups, kH, kW), got ",
             shape_str(weight.shape()));
  SNUG_CHECK(groups >= 1, ValueError, "conv2d: groups must be >= 1, got ", groups);
  for (int d = 0; d < 2; ++d) {
    SNUG_CHECK(stride[d] >= 1, ValueError, "conv2d: stride must be >= 1, got ", pair_str(stride));
    SNUG_CHECK(dilation[d] >= 1, ValueError, "conv2d: dilation must be >= 1, got ", pair_str(dilation));
    SNUG_CHECK(padding[d] >= 0, ValueError, "conv2d: padding must be >= 0, got ", pair_str(padding));
  }
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Cout = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  SNUG_CHECK(C % groups == 0, ShapeError, "conv2d: input channels ", C, " are not divisible by groups ", groups,
             " (input ", shape_str(x.shape()), ")");
  SNUG_CHECK(Cout % groups == 0, ShapeError, "conv2d: output channels ", Cout, " (weight ", shape_str(weight.shape()),
             ") are not divisible by groups ", groups);
  SNUG_CHECK(weight.size(1) == C / groups, ShapeError, "conv2d: weight ", shape_str(weight.shape()), " expects ",
             weight.size(1) * groups, " input channels (", weight.size(1), " per group x ", groups,
             " groups), but the input ", shape_str(x.shape()), " has ", C);
  SNUG_CHECK(kh >= 1 && kw >= 1, ShapeError, "conv2d: empty kernel in weight ", shape_str(weight.shape()));
  if (bias.defined())
    SNUG_CHECK(bias.dim() == 1 && bias.size(0) == Cout, ShapeError, "conv2d: bias of shape ", shape_str(bias.shape()),
               " does not match weight ", shape_str(weight.shape()), " (expected (", Cout, "))");
  SNUG_CHECK(x.is_floating_point(), DTypeError, "conv2d: expected a floating input, got ", dtype_name(x.dtype()));
  SNUG_CHECK(weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()), DTypeError,
             "conv2d: input (", dtype_name(x.dtype()), "), weight (", dtype_name(weight.dtype()), ") and bias (",
             bias.defined() ? dtype_name(bias.dtype()) : "none", ") must have the same dtype");
  SNUG_CHECK(weight.device() == x.device() && (!bias.defined() || bias.device() == x.device()), DeviceError,
             "conv2d: input is on ", x.device().str(), " but weight is on ", weight.device().str(),
             bias.defined() ? str(" and bias on ", bias.device().str()) : std::string());
  const int64_t Hp = H + 2 * padding[0], Wp = W + 2 * padding[1];
  const int64_t ekh = dilation[0] * (kh - 1) + 1, ekw = dilation[1] * (kw - 1) + 1;  // dilated kernel
  SNUG_CHECK(Hp >= ekh && Wp >= ekw, ShapeError, "conv2d: input ", shape_str(x.shape()), " padded to ", Hp, "x", Wp,
             " is smaller than the kernel ", ekh, "x", ekw, " (", kh, "x", kw, " dilated by ", pair_str(dilation), ")");
  const int64_t Ho = (Hp - ekh) / stride[0] + 1, Wo = (Wp - ekw) / stride[1] + 1;

  Conv2dParams p;
  for (int d = 0; d < 2; ++d) {
    p.stride[d] = stride[d];
    p.padding[d] = padding[d];
    p.dilation[d] = dilation[d];
  }
  p.groups = groups;
  // 2 FLOPs per multiply-add: each output takes C/groups kh kw of them.
  const double flops =
      2.0 * double(N) * double(Cout) * double(Ho) * double(Wo) * double(weight.size(1)) * double(kh) * double(kw);
  // conv2d_relu is one op whatever the device: the backend's conv2d_relu entry
  // (on the CPU in f32/f64 the ReLU runs inside the convolution, core/cpu/conv.h).
  const bool fused = relu_after;
  profiler::RecordOp rec(fused ? "conv2d_relu" : "conv2d", x.device(), flops);
  Tensor xc = raw::contiguous(x), wc = raw::contiguous(weight);
  Tensor bc = bias.defined() ? raw::contiguous(bias) : Tensor();
  Tensor y = empty({N, Cout, Ho, Wo}, x.options());
  Backend& be = backend_for(x.device());
  if (fused)
    be.conv2d_relu(xc, wc, bc, p, y);
  else
    be.conv2d(xc, wc, bc, p, y);

  if (any_requires_grad({x, weight, bias})) {
    // Keep only what the wanted gradients read: x for gw, w for gx (and the
    // fused op's output, whose sign masks the gradient).
    Tensor keep_x = weight.requires_grad() ? xc : Tensor();
    Tensor keep_w = x.requires_grad() ? wc : Tensor();
    const Shape xs = x.shape(), ws = weight.shape();
    const DType dt = x.dtype();
    record(fused ? "conv2d_relu" : "conv2d", {x, weight, bias}, {y}, {keep_x, keep_w, fused ? y : Tensor()},
           [p, xs, ws, dt, flops, fused](FunctionNode& self, const G& g) -> G {
             // Each wanted gradient (gx, gw) costs as much as the forward.
             profiler::RecordOp rec(fused ? "conv2d_relu_backward" : "conv2d_backward", g[0].device(),
                                    flops * ((self.needs_grad(0) ? 1 : 0) + (self.needs_grad(1) ? 1 : 0)));
             Tensor go = raw::contiguous(raw::to_dtype(g[0], dt));     // (N, Cout, Ho, Wo)
             if (fused && !self.needs_grad(0) && !self.needs_grad(1))  // only the bias
               return {Tensor(), Tensor(),
                       raw::reduce(ReduceOp::sum, raw::binary(BinaryOp::relu_backward, go, self.saved_at(2)), {0, 2, 3},
                                   false)};
             if (!self.needs_grad(0) && !self.needs_grad(1))  // only the bias: nothing else was saved
               return {Tensor(), Tensor(), raw::reduce(ReduceOp::sum, go, {0, 2, 3}, false)};
             const TensorOptions o(dt, go.device());
             Tensor gx = self.needs_grad(0) ? empty(xs, o) : Tensor();
             Tensor gw = self.needs_grad(1) ? empty(ws, o) : Tensor();
             Tensor gb = self.needs_grad(2) ? empty({ws[0]}, o) : Tensor();
             Backend& bb = backend_for(go.device());
             if (fused)
               bb.conv2d_relu_backward(go, self.saved_at(2), self.saved_at(0), self.saved_at(1), p, gx, gw, gb);
             else
               bb.conv2d_backward(go, self.saved_at(0), self.saved_at(1), p, gx, gw, gb);
             return {gx, gw, gb};
           });
  }
  return y;
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  return conv2d_impl(x, weight, bias, stride, padding, dilation, groups, false);
}

Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
                   std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  return conv2d_impl(x, weight, bias, stride, padding, dilation, groups, true);
}

}  // namespace snug::nn::functional

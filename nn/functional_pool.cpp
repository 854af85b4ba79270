// SPDX-License-Identifier: MIT
// nn::functional pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d.
// Checks and output shapes here; the window loops are the backend's
// pool2d/pool2d_backward (core/cpu/pool.cpp on the CPU).
#include <array>

#include <snug/autograd/node.h>
#include <snug/core/backend.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/nn/functional.h>

namespace snug::nn::functional {

using autograd::any_requires_grad;
using autograd::record;
using G = std::vector<Tensor>;

namespace {

std::string pair_str(std::array<int64_t, 2> a) { return str("(", a[0], ", ", a[1], ")"); }

void check_input(const char* op, const Tensor& x) {
  SNUG_CHECK(x.dim() == 4, ShapeError, op, ": expected input (N, C, H, W), got ", shape_str(x.shape()));
  SNUG_CHECK(x.is_floating_point(), DTypeError, op, ": expected a floating input, got ", dtype_name(x.dtype()));
}

// Runs the backend and records the node. Max pooling saves its argmax
// indices (i64, y's shape); average pooling needs nothing but x's shape.
// Without a backward to come, max pooling asks for no indices (the backends
// then skip them; on a GPU that is also what lets cuDNN's pooling take it).
Tensor pool(const char* op, const Tensor& x, const Pool2dParams& p, int64_t Ho, int64_t Wo) {
  profiler::RecordOp rec(op, x.device());
  Tensor xc = raw::contiguous(x);
  Tensor y = empty({x.size(0), x.size(1), Ho, Wo}, x.options());
  const bool backward = any_requires_grad({x});
  Tensor idx = p.kind == PoolKind::max && backward ? empty(y.shape(), TensorOptions(DType::i64, x.device())) : Tensor();
  backend_for(x.device()).pool2d(xc, p, y, idx);
  if (backward) {
    const Shape xs = x.shape();
    const DType dt = x.dtype();
    record(op, {x}, {y}, {idx}, [p, xs, dt](FunctionNode& self, const G& g) -> G {
      profiler::RecordOp rec("pool2d_backward", g[0].device());
      Tensor go = raw::contiguous(raw::to_dtype(g[0], dt));   // (N, C, Ho, Wo)
      Tensor gx = empty(xs, TensorOptions(dt, go.device()));  // (N, C, H, W)
      backend_for(go.device()).pool2d_backward(go, p, self.saved_at(0), gx);
      return {gx};
    });
  }
  return y;
}

// max/avg: kernel, stride (0 = kernel), padding -> params and output size.
Pool2dParams window_params(const char* op, PoolKind kind, const Tensor& x, std::array<int64_t, 2> kernel,
                           std::array<int64_t, 2> stride, std::array<int64_t, 2> padding, int64_t& Ho, int64_t& Wo) {
  check_input(op, x);
  if (stride[0] == 0 && stride[1] == 0) stride = kernel;
  Pool2dParams p;
  p.kind = kind;
  int64_t out[2];
  for (int d = 0; d < 2; ++d) {
    SNUG_CHECK(kernel[d] >= 1, ValueError, op, ": kernel size must be >= 1, got ", pair_str(kernel));
    SNUG_CHECK(stride[d] >= 1, ValueError, op, ": stride must be >= 1, got ", pair_str(stride));
    SNUG_CHECK(padding[d] >= 0 && 2 * padding[d] <= kernel[d], ValueError, op,
               ": padding must be between 0 and half the kernel size, got padding ", pair_str(padding), " for kernel ",
               pair_str(kernel));
    const int64_t in = x.size(2 + d) + 2 * padding[d];
    SNUG_CHECK(in >= kernel[d], ShapeError, op, ": input ", shape_str(x.shape()), " padded by ", pair_str(padding),
               " is smaller than the kernel ", pair_str(kernel));
    out[d] = (in - kernel[d]) / stride[d] + 1;
    p.kernel[d] = kernel[d];
    p.stride[d] = stride[d];
    p.padding[d] = padding[d];
  }
  Ho = out[0];
  Wo = out[1];
  return p;
}

}  // namespace

// y[n, c, oh, ow] = max over the window of x; gx[argmax] += g (ties: the first maximum)
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  int64_t Ho, Wo;
  Pool2dParams p = window_params("max_pool2d", PoolKind::max, x, kernel, stride, padding, Ho, Wo);
  return pool("max_pool2d", x, p, Ho, Wo);
}

// y = sum over the window / window size counting padding (count_include_pad,
// PyTorch's default); gx gets g / size at every tap of every window.
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  int64_t Ho, Wo;
  Pool2dParams p = window_params("avg_pool2d", PoolKind::avg, x, kernel, stride, padding, Ho, Wo);
  return pool("avg_pool2d", x, p, Ho, Wo);
}

// Output cell o averages input rows [floor(o H / Ho), ceil((o + 1) H / Ho)) (and columns alike).
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  check_input("adaptive_avg_pool2d", x);
  SNUG_CHECK(output_size[0] >= 1 && output_size[1] >= 1, ValueError,
             "adaptive_avg_pool2d: output size must be >= 1, got ", pair_str(output_size));
  SNUG_CHECK(x.size(2) >= 1 && x.size(3) >= 1, ShapeError, "adaptive_avg_pool2d: input ", shape_str(x.shape()),
             " has an empty plane");
  Pool2dParams p;
  p.kind = PoolKind::adaptive_avg;
  return pool("adaptive_avg_pool2d", x, p, output_size[0], output_size[1]);
}

}  // namespace snug::nn::functional

// SPDX-License-Identifier: MIT
#include <snug/quant/qparams.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include <snug/autograd/node.h>
#include <snug/core/raw_ops.h>

namespace snug::quant {

namespace {

// Elements of a contiguous tensor of `shape` per channel of `axis`: channel of
// flat index i is (i / inner) % C.
void channel_geometry(const Shape& shape, int64_t axis, int64_t& C, int64_t& inner) {
  C = axis < 0 ? 1 : shape[size_t(axis)];
  inner = 1;
  if (axis >= 0)
    for (size_t d = size_t(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
}

void check(const QParams& qp, const Tensor& t, const char* fn) {
  SNUG_CHECK(t.device().is_cpu(), DeviceError, fn, ": quantization runs on the CPU; got a tensor on ", t.device().str(),
             " (move it with .to(kCPU))");
  SNUG_CHECK(qp.dtype == DType::u8 || qp.dtype == DType::i8, DTypeError, fn, ": quantized dtype must be u8 or i8, got ",
             dtype_name(qp.dtype));
  const int64_t C = qp.axis < 0 ? 1 : (qp.axis < t.dim() ? t.size(qp.axis) : -1);
  SNUG_CHECK(qp.axis < t.dim(), ValueError, fn, ": axis ", qp.axis, " out of range for shape ", shape_str(t.shape()));
  SNUG_CHECK(int64_t(qp.scale.size()) == C && int64_t(qp.zero_point.size()) == C, ValueError, fn, ": ", qp.scale.size(),
             " scales and ", qp.zero_point.size(), " zero points for ", C, " channel(s) of shape ",
             shape_str(t.shape()));
  for (float s : qp.scale)
    SNUG_CHECK(s > 0 && std::isfinite(s), ValueError, fn, ": scales must be positive and finite, got ", s);
}

}  // namespace

std::string QParams::str() const {
  std::ostringstream os;
  os << dtype_name(dtype) << (per_channel() ? " per-channel(axis " + std::to_string(axis) + ")" : " per-tensor");
  if (!scale.empty()) os << " scale=" << scale[0] << " zp=" << zero_point[0] << (scale.size() > 1 ? " ..." : "");
  return os.str();
}

QParams choose_qparams(const std::vector<float>& mins, const std::vector<float>& maxs, DType dtype, bool symmetric,
                       int64_t axis) {
  SNUG_CHECK(dtype == DType::u8 || dtype == DType::i8, DTypeError, "choose_qparams: dtype must be u8 or i8, got ",
             dtype_name(dtype));
  SNUG_CHECK(mins.size() == maxs.size() && !mins.empty(), ValueError, "choose_qparams: ", mins.size(), " minima and ",
             maxs.size(), " maxima");
  SNUG_CHECK(axis >= 0 || mins.size() == 1, ValueError, "choose_qparams: per-tensor parameters need one range, got ",
             mins.size());
  QParams qp;
  qp.dtype = dtype;
  qp.axis = axis;
  const double qmin = double(qp.qmin()), qmax = double(qp.qmax());
  constexpr double kEps = 1e-8;  // a floor for the scale (an all-zero channel)
  for (size_t c = 0; c < mins.size(); ++c) {
    SNUG_CHECK(std::isfinite(mins[c]) && std::isfinite(maxs[c]) && mins[c] <= maxs[c], ValueError,
               "choose_qparams: bad range [", mins[c], ", ", maxs[c], "] for channel ", c);
    const double lo = std::min(0.0, double(mins[c])), hi = std::max(0.0, double(maxs[c]));
    double scale;
    int32_t zp;
    if (symmetric) {
      scale = std::max(std::max(-lo, hi) / ((qmax - qmin) / 2), kEps);
      zp = dtype == DType::u8 ? 128 : 0;
    } else {
      scale = std::max((hi - lo) / (qmax - qmin), kEps);
      zp = int32_t(std::clamp(qmin - std::nearbyint(lo / scale), qmin, qmax));
    }
    qp.scale.push_back(float(scale));
    qp.zero_point.push_back(zp);
  }
  return qp;
}

void min_max(const Tensor& x, int64_t axis, std::vector<float>& mins, std::vector<float>& maxs) {
  SNUG_CHECK(x.numel() > 0, ValueError, "quant::min_max: empty tensor of shape ", shape_str(x.shape()));
  SNUG_CHECK(x.device().is_cpu(), DeviceError, "quant::min_max: quantization runs on the CPU; got a tensor on ",
             x.device().str());
  SNUG_CHECK(axis < x.dim(), ValueError, "quant::min_max: axis ", axis, " out of range for shape ",
             shape_str(x.shape()));
  Tensor xc = raw::contiguous(raw::to_dtype(x, DType::f32));
  const float* p = xc.data<float>();
  int64_t C, inner;
  channel_geometry(x.shape(), axis, C, inner);
  mins.assign(size_t(C), std::numeric_limits<float>::infinity());
  maxs.assign(size_t(C), -std::numeric_limits<float>::infinity());
  const int64_t n = x.numel();
  if (C == 1) {
    float lo = mins[0], hi = maxs[0];
#pragma omp simd reduction(min : lo) reduction(max : hi)
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
    }
    mins[0] = lo;
    maxs[0] = hi;
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const size_t c = size_t((i / inner) % C);
    mins[c] = std::min(mins[c], p[i]);
    maxs[c] = std::max(maxs[c], p[i]);
  }
}

Tensor quantize(const Tensor& x, const QParams& qp) {
  check(qp, x, "quantize");
  SNUG_CHECK(x.is_floating_point(), DTypeError, "quantize: input must be floating, got ", dtype_name(x.dtype()));
  Tensor xc = raw::contiguous(raw::to_dtype(x, DType::f32));
  Tensor q = empty(x.shape(), qp.dtype);
  const float* p = xc.data<float>();
  int64_t C, inner;
  channel_geometry(x.shape(), qp.axis, C, inner);
  const float lo = float(qp.qmin()), hi = float(qp.qmax());
  const int64_t n = x.numel();
  auto run = [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    for (int64_t c0 = 0; c0 < n; c0 += inner) {
      const size_t c = size_t((c0 / inner) % C);
      const float inv = 1.0f / qp.scale[c], zp = float(qp.zero_point[c]);
      const int64_t e = std::min(n, c0 + inner);
#pragma omp simd
      for (int64_t i = c0; i < e; ++i) out[i] = T(std::clamp(std::nearbyint(p[i] * inv) + zp, lo, hi));
    }
  };
  if (qp.dtype == DType::u8)
    run(q.data<uint8_t>());
  else
    run(q.data<int8_t>());
  return q;
}

Tensor dequantize(const Tensor& q, const QParams& qp) {
  check(qp, q, "dequantize");
  SNUG_CHECK(q.dtype() == qp.dtype, DTypeError, "dequantize: tensor is ", dtype_name(q.dtype()),
             " but the parameters are for ", dtype_name(qp.dtype));
  Tensor qc = raw::contiguous(q);
  Tensor x = empty(q.shape(), DType::f32);
  float* out = x.data<float>();
  int64_t C, inner;
  channel_geometry(q.shape(), qp.axis, C, inner);
  const int64_t n = q.numel();
  auto run = [&](const auto* in) {
    for (int64_t i = 0; i < n; ++i) {
      const size_t c = size_t((i / inner) % C);
      out[i] = float(int32_t(in[i]) - qp.zero_point[c]) * qp.scale[c];
    }
  };
  if (qp.dtype == DType::u8)
    run(qc.data<uint8_t>());
  else
    run(qc.data<int8_t>());
  return x;
}

// ---- fake quantization (forward and straight-through backward) -------------------------
// x (any) -> y (same shape, x's dtype); gx = g where qmin <= round(x/s) + zp <= qmax, else 0.
Tensor fake_quantize(const Tensor& x, const QParams& qp) {
  check(qp, x, "fake_quantize");
  Tensor xc = raw::contiguous(raw::to_dtype(x, DType::f32));
  Tensor y = empty(x.shape(), DType::f32), pass = empty(x.shape(), DType::f32);
  const float* p = xc.data<float>();
  float* out = y.data<float>();
  float* keep = pass.data<float>();
  int64_t C, inner;
  channel_geometry(x.shape(), qp.axis, C, inner);
  const float lo = float(qp.qmin()), hi = float(qp.qmax());
  const int64_t n = x.numel();
  for (int64_t c0 = 0; c0 < n; c0 += inner) {
    const size_t c = size_t((c0 / inner) % C);
    const float s = qp.scale[c], inv = 1.0f / s, zp = float(qp.zero_point[c]);
    const int64_t e = std::min(n, c0 + inner);
#pragma omp simd
    for (int64_t i = c0; i < e; ++i) {
      const float q = std::nearbyint(p[i] * inv) + zp;
      keep[i] = (q >= lo && q <= hi) ? 1.0f : 0.0f;
      out[i] = (std::clamp(q, lo, hi) - zp) * s;
    }
  }
  y = raw::to_dtype(y, x.dtype());
  if (autograd::any_requires_grad({x})) {
    autograd::record("fake_quantize", {x}, {y}, {pass},
                     [](FunctionNode& self, const std::vector<Tensor>& g) -> std::vector<Tensor> {
                       return {raw::binary(BinaryOp::mul, g[0], raw::to_dtype(self.saved_at(0), g[0].dtype()))};
                     });
  }
  return y;
}

}  // namespace snug::quant

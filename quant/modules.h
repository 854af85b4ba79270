// Quantized layers (inference) and the modules that prepare them: observers
// for calibration and fake-quant for quantization-aware training.
//
// QuantizedLinear / QuantizedConv2d hold int8 weights (per output channel,
// symmetric i8) with f32 scales and f32 biases. The input is quantized to u8
// (affine, per tensor) with calibrated parameters (static) or with its own
// min and max at every call (dynamic); the int8 GEMM accumulates in i32 and
// the result is scaled back to f32:
//
//   y[m, n] = s_x * s_w[n] * (acc[m, n] - z_x * sum_k W_q[n, k]) + b[n]
//
// Activations travel between layers in f32, so ReLU, pooling and Flatten need
// no quantized versions. No autograd: these are for inference.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "nn/conv.h"
#include "nn/layers.h"
#include "quant/gemm_int8.h"
#include "quant/observer.h"

namespace snug::quant {

// Shared by the two quantized layers: weights, scales, bias, the input's
// parameters (static) and the packed weights.
class QuantizedWeightLayer : public nn::Module {
 public:
  // Buffers (saved by state_dict): weight_int8 (out, ...) i8, weight_scale
  // (out) f32, bias (out) f32 or undefined, and when static input_scale (1)
  // f32 and input_zero_point (1) i32.
  Tensor weight_int8, weight_scale, bias, input_scale, input_zero_point;
  bool is_dynamic() const { return !input_scale.defined(); }
  // Repacks the weights for the GEMM; call after changing weight_int8 in place
  // (quant::load_quantized does).
  void repack();
  std::size_t packed_bytes() const { return packed_.nbytes(); }

 protected:
  QuantizedWeightLayer(std::string name, const Tensor& w_float, const Tensor& b_float, std::optional<QParams> input);
  // xq (M, K) u8, quantized with qx -> (M, out) f32 through the int8 GEMM.
  Tensor matmul_quantized(const Tensor& xq, const QParams& qx);
  // The input's parameters: calibrated, or from x itself.
  QParams input_qparams(const Tensor& x) const;

 private:
  kernels::PackedInt8B packed_;
  std::vector<int32_t> colsum_;  // sum_k W_q[n, k]
};

class QuantizedLinear : public QuantizedWeightLayer {
 public:
  // From a float Linear; `input` given: static, else dynamic.
  explicit QuantizedLinear(const nn::Linear& f, std::optional<QParams> input = std::nullopt);
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out)
  std::string repr() const override;
  int64_t in_features, out_features;
};

// groups == 1 only.
class QuantizedConv2d : public QuantizedWeightLayer {
 public:
  explicit QuantizedConv2d(const nn::Conv2d& f, std::optional<QParams> input = std::nullopt);
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, out, Ho, Wo)
  std::string repr() const override;
  int64_t in_channels, out_channels;
  std::array<int64_t, 2> kernel_size, stride, padding, dilation;
};

// Per-output-channel symmetric i8 parameters of a weight from its min and max.
QParams weight_qparams(const Tensor& w);

// ---- calibration (static quantization) --------------------------------------------------

// Wraps a float Linear or Conv2d; forward observes the input, then runs the layer.
class Observed : public nn::Module {
 public:
  Observed(std::shared_ptr<nn::Module> layer, const std::string& observer);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  std::shared_ptr<nn::Module> layer;
  std::unique_ptr<Observer> observer;
};

// ---- quantization-aware training ------------------------------------------------------

// y = fake_quantize(x) with parameters from an observer that watches x while training.
class FakeQuantize : public nn::Module {
 public:
  explicit FakeQuantize(std::unique_ptr<Observer> observer);
  Tensor forward(const Tensor& x) override;
  std::unique_ptr<Observer> observer;
};

// A float Linear or Conv2d trained through fake quantization of its input
// (u8, moving-average min-max) and of its weight (i8 per channel, from the
// current weight). The float parameters are the wrapped layer's own tensors,
// so an optimizer built on the float model keeps training them.
class QATLayer : public nn::Module {
 public:
  QATLayer(std::shared_ptr<nn::Module> layer, const std::string& observer);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  std::shared_ptr<nn::Module> layer;
  std::shared_ptr<FakeQuantize> input_fq;
};

}  // namespace snug::quant

// SPDX-License-Identifier: MIT
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
// The GEMM is core/raw_int8.h's (the CPU backend's kernels).
//
// Activations travel between layers in f32, so ReLU, pooling and Flatten need
// no quantized versions. No autograd: these are for inference.
//
// NOTE [ Quantized layers are float-layer subclasses ]
// Every layer here derives from the float layer it replaces (QuantizedLinear,
// ObservedLinear and QATLinear from nn::Linear; the Conv2d ones from
// nn::Conv2d). Models call their layers through typed members
// (`std::shared_ptr<Linear> qkv`), and quant/convert.cpp puts the new layer
// into those members (NOTE [ Replacing a child ] in nn/module.h); only a
// Linear fits a Linear member. The sizes (in_features, kernel_size, ...) stay
// meaningful. A quantized layer's `weight` is undefined (it holds
// weight_int8) and its `bias` is its f32 bias buffer; the observed and QAT
// layers hold the float layer's own weight and bias tensors, so an optimizer
// built on the float model keeps training them. nn::fuse fuses exact types
// only, and a TransformerBlock runs gelu_mlp only while fc and fc_proj are the
// Linears it built, so a converted layer's own forward runs.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include <snug/core/raw_int8.h>
#include <snug/nn/conv.h>
#include <snug/nn/layers.h>
#include <snug/quant/observer.h>

namespace snug::quant {

// The int8 state of a quantized layer, shared by QuantizedLinear and
// QuantizedConv2d (a mixin, not a Module: each of them is a float layer's
// subclass, NOTE [ Quantized layers are float-layer subclasses ]).
class QuantizedWeights {
 public:
  virtual ~QuantizedWeights() = default;
  // Buffers (saved by state_dict): weight_int8 (out, ...) i8, weight_scale
  // (out) f32, bias (out) f32 or undefined (the layer's `bias`), and when
  // static input_scale (1) f32 and input_zero_point (1) i32.
  Tensor weight_int8, weight_scale, input_scale, input_zero_point;
  bool is_dynamic() const { return !input_scale.defined(); }
  // Repacks the weights for the GEMM; call after changing weight_int8 in place
  // (quant::load_quantized does).
  void repack();
  std::size_t packed_bytes() const { return packed_.nbytes(); }

 protected:
  // Quantizes w_float and registers the buffers in `owner`; returns the f32 bias (or undefined).
  Tensor init(nn::Module& owner, const Tensor& w_float, const Tensor& b_float, std::optional<QParams> input);
  // xq (M, K) u8, quantized with qx -> (M, out) f32 through the int8 GEMM, + bias.
  // `who` names the layer in a shape error.
  Tensor matmul_quantized(const Tensor& xq, const QParams& qx, const Tensor& bias, const nn::Module& who);
  // The input's parameters: calibrated, or from x itself.
  QParams input_qparams(const Tensor& x) const;

 private:
  raw::PackedInt8Weight packed_;
  std::vector<int32_t> colsum_;  // sum_k W_q[n, k]
};

class QuantizedLinear : public nn::Linear, public QuantizedWeights {
 public:
  // From a float Linear; `input` given: static, else dynamic.
  explicit QuantizedLinear(const nn::Linear& f, std::optional<QParams> input = std::nullopt);
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out)
  std::string repr() const override;
};

// groups == 1 only.
class QuantizedConv2d : public nn::Conv2d, public QuantizedWeights {
 public:
  explicit QuantizedConv2d(const nn::Conv2d& f, std::optional<QParams> input = std::nullopt);
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, out, Ho, Wo)
  std::string repr() const override;
};

// Per-output-channel symmetric i8 parameters of a weight from its min and max.
QParams weight_qparams(const Tensor& w);

// A layer prepared for convert: it watches its input (calibration or QAT)
// and holds a float Linear's or Conv2d's weight and bias.
class InputObserving {
 public:
  virtual ~InputObserving() = default;
  virtual const Observer& input_observer() const = 0;
};

// ---- calibration (static quantization) --------------------------------------------------

// A float Linear / Conv2d (the same weight and bias tensors) whose forward
// observes the input, then runs the float layer.
class ObservedLinear : public nn::Linear, public InputObserving {
 public:
  ObservedLinear(const nn::Linear& f, const std::string& observer);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  const Observer& input_observer() const override { return *observer; }
  std::unique_ptr<Observer> observer;
};

class ObservedConv2d : public nn::Conv2d, public InputObserving {
 public:
  ObservedConv2d(const nn::Conv2d& f, const std::string& observer);  // groups == 1
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  const Observer& input_observer() const override { return *observer; }
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

// A float Linear / Conv2d trained through fake quantization of its input
// (u8, moving-average min-max by default) and of its weight (i8 per channel,
// from the current weight). Its parameters are the float layer's own tensors.
class QATLinear : public nn::Linear, public InputObserving {
 public:
  QATLinear(const nn::Linear& f, const std::string& observer);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  const Observer& input_observer() const override { return *input_fq->observer; }
  std::shared_ptr<FakeQuantize> input_fq;
};

class QATConv2d : public nn::Conv2d, public InputObserving {
 public:
  QATConv2d(const nn::Conv2d& f, const std::string& observer);  // groups == 1
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  const Observer& input_observer() const override { return *input_fq->observer; }
  std::shared_ptr<FakeQuantize> input_fq;
};

}  // namespace snug::quant

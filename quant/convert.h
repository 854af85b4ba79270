// Turning a float model into an int8 one (docs/compression.md):
//
//   dynamic:  auto q = quant::quantize_dynamic(model);            // Linear -> int8 weights
//   static:   auto p = quant::prepare_static(model);              // observers on Linear/Conv inputs
//             for (batch : calibration) p->forward(batch);        // calibration pass (eval, no grad)
//             auto q = quant::convert(p);
//   QAT:      auto p = quant::prepare_qat(model);                 // fake-quant inputs and weights
//             ... train p with the float model's optimizer ...
//             auto q = quant::convert(p);
//   files:    quant::save_quantized("m.safetensors", *q);
//             quant::load_quantized("m.safetensors", *q2);        // q2: the same model quantized the same way
//
// Each function returns a new model: Sequentials are rebuilt (nested ones
// too), the layers it converts are replaced, every other module is shared
// with the input. Layers inside other containers are left as they are (the
// conversion walks Sequentials only). Conv2d with groups != 1 stays float.
#pragma once
#include <memory>
#include <string>

#include "nn/module.h"

namespace snug::quant {

// Every Linear becomes a dynamic QuantizedLinear (PyTorch's quantize_dynamic
// default); Conv2d stays float.
std::shared_ptr<nn::Module> quantize_dynamic(const std::shared_ptr<nn::Module>& model);

// observer: "minmax" (default), "moving_average" or "percentile", for the inputs.
std::shared_ptr<nn::Module> prepare_static(const std::shared_ptr<nn::Module>& model,
                                           const std::string& observer = "minmax");
std::shared_ptr<nn::Module> prepare_qat(const std::shared_ptr<nn::Module>& model,
                                        const std::string& observer = "moving_average");
// Observed and QATLayer modules become static QuantizedLinear / QuantizedConv2d.
std::shared_ptr<nn::Module> convert(const std::shared_ptr<nn::Module>& prepared);

// The quantized model's state_dict (i8 weights, f32 scales and biases, input
// parameters) in a safetensors file with metadata format = snug.quantized.v1.
void save_quantized(const std::string& path, const nn::Module& model);
// Strict load into a model of the same architecture and quantization; repacks the weights.
void load_quantized(const std::string& path, nn::Module& model);

// Bytes of parameters, buffers and packed int8 weights: what the model holds.
std::size_t model_bytes(const nn::Module& model);

}  // namespace snug::quant

// SPDX-License-Identifier: MIT
// Turning a float model into an int8 one (docs/compression.md):
//
//   dynamic:  quant::quantize_dynamic(*model);                    // Linear, Conv2d -> int8 weights
//   static:   quant::prepare_static(*model);                      // observers on Linear/Conv2d inputs
//             for (batch : calibration) model->forward(batch);    // calibration pass (eval, no grad)
//             quant::convert(*model);
//   QAT:      quant::prepare_qat(*model);                         // fake-quant inputs and weights
//             ... train model with the optimizer built on it before ...
//             quant::convert(*model);
//   files:    quant::save_quantized("m.safetensors", *model);
//             quant::load_quantized("m.safetensors", *m2);        // m2: the same model quantized the same way
//
// Every function converts the model IN PLACE: it walks the whole module tree
// (custom modules, Sequentials, ModuleLists at any depth) and replaces each
// nn::Linear and nn::Conv2d (exact types; groups == 1 for Conv2d) in its
// parent, through the parent's bound member too (NOTE [ Replacing a child ]
// in nn/module.h), so the parent's forward runs the new layer. (snug modules
// cannot be deep-copied; to keep a float model, build a second one and copy
// its state_dict.) Each returns a Report: what it replaced, and what it left
// in float and why; a non-empty left-over list is also printed once to stderr.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <snug/nn/module.h>

namespace snug::quant {

struct Report {
  struct Left {
    std::string name;    // qualified name ("blocks.0.attn.qkv"; "" for the model itself)
    std::string module;  // its repr()
    std::string reason;
  };
  std::string step;                    // "quantize_dynamic", "prepare_static", "prepare_qat" or "convert"
  std::vector<std::string> converted;  // qualified names of the layers replaced, in tree order
  std::vector<Left> left_float;        // modules (and the model's own parameters) still in float
  // The reason `name` was left in float, or "" when it was not.
  std::string reason(const std::string& name) const;
  std::string str() const;  // what is printed: a summary line and one line per module left in float
};

// Every Linear and Conv2d becomes a dynamic QuantizedLinear / QuantizedConv2d
// (input range measured at each call). PyTorch's quantize_dynamic default
// converts Linear only; snug converts Conv2d too, since its int8 conv needs
// no calibration either.
Report quantize_dynamic(nn::Module& model);

// observer: "minmax" (default), "moving_average" or "percentile", for the inputs.
// Linear/Conv2d -> ObservedLinear / ObservedConv2d.
Report prepare_static(nn::Module& model, const std::string& observer = "minmax");
// Linear/Conv2d -> QATLinear / QATConv2d, holding the same parameter tensors.
Report prepare_qat(nn::Module& model, const std::string& observer = "moving_average");
// Observed and QAT layers become static QuantizedLinear / QuantizedConv2d;
// the model is put in eval mode. ValueError (naming them) when an observer
// saw no data; nothing is converted then.
Report convert(nn::Module& model);

// The quantized model's state_dict (i8 weights, f32 scales and biases, input
// parameters) in a safetensors file with metadata format = snug.quantized.v1.
void save_quantized(const std::string& path, const nn::Module& model);
// Strict load into a model of the same architecture and quantization; repacks the weights.
void load_quantized(const std::string& path, nn::Module& model);

// Bytes of parameters, buffers and packed int8 weights: what the model holds.
std::size_t model_bytes(const nn::Module& model);

}  // namespace snug::quant

// SPDX-License-Identifier: MIT
// libFuzzer target: the safetensors reader (core/safetensors.h).
#include <cstdint>
#include <string>

#include <snug/base/error.h>
#include <snug/core/safetensors.h>
#include "fuzz_util.h"

using namespace snug;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Seeds: small valid files from snug's own writer.
  TensorMap a{{"w", arange(6, TensorOptions(DType::f32)).reshape({2, 3})}, {"i", arange(3, TensorOptions(DType::i64))}};
  fuzz::write_seed("two_tensors.safetensors", to_safetensors_bytes(a, {{"format", "pt"}}));
  TensorMap b{{"h", ones({4}, TensorOptions(DType::f16))},
              {"b", zeros({2, 2}, TensorOptions(DType::b8))},
              {"e", zeros({0, 3}, TensorOptions(DType::bf16))}};
  fuzz::write_seed("half_bool_empty.safetensors", to_safetensors_bytes(b));
  fuzz::write_seed("no_tensors.safetensors", to_safetensors_bytes({}));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    SafetensorsFile f = from_safetensors_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    // Touch every tensor: a bad offset must have been caught, not read here.
    for (const auto& [name, t] : f.tensors) (void)t.sum().item();
  } catch (const Error&) {
  }
  return 0;
}

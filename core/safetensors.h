// SPDX-License-Identifier: MIT
// Named tensors in the safetensors format (Hugging Face's tensor file format),
// so weights move between snug and PyTorch / Hugging Face. Model checkpoints
// build on this. docs/serialization.md describes the format, the dtype
// mapping, the atomic write and everything the reader checks.
//
//   save_safetensors("w.safetensors", {{"fc.weight", w}, {"fc.bias", b}});
//   auto f = load_safetensors("w.safetensors");   // f.tensors in file order
//
// Errors: writing throws IOError naming the path and the OS error (the old file,
// if any, is untouched); a corrupt or truncated file throws IOError naming the
// file and the byte offset of the problem. Bad arguments (duplicate or invalid
// names, undefined tensors) throw ValueError.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <snug/core/tensor.h>

namespace snug {

// Ordered name -> tensor map. Writing keeps its order (header and data);
// reading returns the tensors in the order of the file's header.
using TensorMap = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  TensorMap tensors;
  std::map<std::string, std::string> metadata;  // the header's "__metadata__"
};

// Writes atomically: a temporary file beside `path`, fsync, rename over `path`,
// fsync of the directory. Tensors on any device and with any strides are
// accepted; they are written contiguous and little-endian. After the rename,
// temporaries of `path` left by writers that were killed mid-save (their
// process no longer exists) are removed.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates the whole file in one pass. Tensors are allocated on
// `device` (through snug's allocator); they share nothing with each other.
SafetensorsFile load_safetensors(const std::string& path, Device device = kCPU);

// The same, to and from a byte string (tests, fuzzing, network transfer).
std::string to_safetensors_bytes(const TensorMap& tensors, const std::map<std::string, std::string>& metadata = {});
SafetensorsFile from_safetensors_bytes(const std::string& bytes, const std::string& name_for_errors = "<memory>",
                                       Device device = kCPU);

// "F32" <-> DType::f32, ... (the nine dtypes snug has). safetensors_dtype_from_name
// returns false for names snug does not support.
const char* safetensors_dtype_name(DType d);
bool safetensors_dtype_from_name(const std::string& name, DType* out);

}  // namespace snug

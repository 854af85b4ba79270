// SPDX-License-Identifier: MIT
// libFuzzer target: the IDX (MNIST) readers, raw and gzip (data/mnist.h,
// data/file_bytes.h). The first byte picks images or labels.
#include <cstdint>
#include <string>

#include <snug/base/error.h>
#include <snug/data/mnist.h>
#include "fuzz_util.h"

using namespace snug;

namespace {
std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string images = be32(0x00000803u) + be32(2) + be32(3) + be32(3) + std::string(18, '\x7f');
  fuzz::write_seed("images_2x3x3.idx", std::string(1, '\0') + images);
  std::string labels = be32(0x00000801u) + be32(4) + std::string("\x01\x02\x03\x09", 4);
  fuzz::write_seed("labels_4.idx", std::string(1, '\1') + labels);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string& path = fuzz::scratch_file(data + 1, size - 1, ".idx");
  try {
    if (data[0] & 1)
      (void)data::read_idx_labels(path, 9);
    else
      (void)data::read_idx_images(path);
  } catch (const Error&) {
  }
  return 0;
}

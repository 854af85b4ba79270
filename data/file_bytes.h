// SPDX-License-Identifier: MIT
// Whole-file reads for the dataset readers (MNIST IDX, CIFAR-10): gzip'd or
// raw, errors naming the file and the offset.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace snug::data {

// The whole (decompressed) content of path; zlib reads raw files as they are.
// Throws IOError naming path and the decompressed offset where a gzip stream
// is corrupt or cut short.
std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace snug::data

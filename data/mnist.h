// SPDX-License-Identifier: MIT
// MNIST in its IDX format (http://yann.lecun.com/exdb/mnist/), gzip'd or raw.
//
// The directory holds train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each with or without
// ".gz" (the .gz name is tried first). Everything is validated: magic
// numbers, dimensions, counts, exact file sizes and label values; a missing,
// corrupt or truncated file throws snug::IOError naming the file and the
// byte offset (in the decompressed stream) where it went wrong.
#pragma once
#include <string>

#include <snug/core/tensor.h>

namespace snug::data {

struct MnistOptions {
  // false: pixels scaled to [0, 1]. true: then (x - 0.1307) / 0.3081, the
  // training set's mean and std, as the usual PyTorch example does.
  bool normalize = false;
};

struct MnistSplit {
  Tensor images;  // (N, 1, 28, 28) f32
  Tensor labels;  // (N) i64, values 0..9
};

// train: the 60,000-image training split; otherwise the 10,000-image test split.
MnistSplit load_mnist(const std::string& dir, bool train, const MnistOptions& opt = {});

// The IDX readers underneath. path is the exact file (gzip'd or raw).
// images: magic 0x00000803, then N, rows, cols (big-endian u32), then N*rows*cols bytes -> (N, rows, cols) u8
Tensor read_idx_images(const std::string& path);
// labels: magic 0x00000801, then N, then N bytes each in 0..max_label -> (N) i64
Tensor read_idx_labels(const std::string& path, int64_t max_label = 9);

}  // namespace snug::data

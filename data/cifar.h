// SPDX-License-Identifier: MIT
// CIFAR-10 in its binary format (https://www.cs.toronto.edu/~kriz/cifar.html):
// the directory holds data_batch_1.bin .. data_batch_5.bin and test_batch.bin
// (each may also be gzip'd, name + ".gz"). A file is a sequence of 3073-byte
// records: one label byte (0..9), then 3072 pixel bytes, the 32x32 red plane,
// then green, then blue. A truncated record, an empty file or a bad label
// throws snug::IOError naming the file and the byte offset.
#pragma once
#include <string>

#include <snug/core/tensor.h>

namespace snug::data {

struct Cifar10Split {
  Tensor images;  // (N, 3, 32, 32): u8 from read_cifar10_batch, f32 in [0, 1] from load_cifar10
  Tensor labels;  // (N) i64, values 0..9
};

// One batch file (gzip'd or raw), as stored: images u8.
Cifar10Split read_cifar10_batch(const std::string& path);

// train: the five data batches (50,000 images) in order; else test_batch (10,000).
Cifar10Split load_cifar10(const std::string& dir, bool train);

}  // namespace snug::data

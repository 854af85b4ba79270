// SPDX-License-Identifier: MIT
// examples/vit's data on disk: MNIST as fixed-size records in chunked files
// (data/chunked.h), written once from the IDX files and read back chunk by
// chunk through a ChunkedDataset while training.
//
// A record is 785 bytes: the label (one byte, 0..9), then the 28x28 pixels
// row by row (u8, as in the IDX file). DIR/train.chunks holds the 60,000
// training images (47.1 MB), DIR/t10k.chunks the 10,000 test images (7.9 MB);
// the files have no header (ChunkedDataset checks that each is a whole
// number of records).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <snug/data/chunked.h>

namespace vit_example {

inline constexpr int64_t kSide = 28, kPixels = kSide * kSide, kRecordBytes = 1 + kPixels;

struct ChunkFiles {
  std::string train, test;
  int64_t train_bytes = 0, test_bytes = 0;
};

// The two file names under dir (they need not exist).
ChunkFiles chunk_files(const std::string& dir);

// Reads the IDX files in idx_dir (gzip'd or raw) and writes both chunk files
// into out_dir (created if missing). Returns their names and sizes.
ChunkFiles make_chunks(const std::string& idx_dir, const std::string& out_dir);

// The records of `path` as samples {(1, 28, 28) f32 normalized with MNIST's
// mean and std, () i64 label}. IOError naming the file, and how to make it,
// when it is missing.
std::shared_ptr<snug::data::ChunkedDataset> open_chunks(const std::string& path, int64_t chunk_bytes,
                                                        int64_t resident_chunks);

}  // namespace vit_example

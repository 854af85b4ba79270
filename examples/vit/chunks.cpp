// SPDX-License-Identifier: MIT
#include "vit/chunks.h"

#include <filesystem>
#include <vector>

#include <snug/base/error.h>
#include <snug/data/mnist.h>
#include <snug/memory/allocator.h>

namespace vit_example {

using namespace snug;
namespace fs = std::filesystem;

namespace {

std::string idx_file(const std::string& dir, const std::string& name) {
  for (const std::string& cand : {name + ".gz", name})
    if (fs::is_regular_file(fs::path(dir) / cand)) return (fs::path(dir) / cand).string();
  throw IOError(str("vit --make-chunks: neither ", name, ".gz nor ", name, " is in --data ", dir));
}

// images (N, 28, 28) u8 and labels (N) i64 -> N records of kRecordBytes.
int64_t write_split(const Tensor& images, const Tensor& labels, const std::string& path) {
  SNUG_CHECK(images.dim() == 3 && images.size(1) == kSide && images.size(2) == kSide &&
                 labels.size(0) == images.size(0),
             IOError, "vit --make-chunks: expected (N, 28, 28) images and N labels for ", path, ", got ",
             shape_str(images.shape()), " and ", shape_str(labels.shape()));
  const Tensor px = images.contiguous(), lb = labels.contiguous();
  data::ChunkedWriter w(path, kRecordBytes);
  std::vector<uint8_t> rec(static_cast<size_t>(kRecordBytes));
  for (int64_t i = 0; i < px.size(0); ++i) {
    rec[0] = uint8_t(lb.data<int64_t>()[i]);  // read_idx_labels checked 0..9
    const uint8_t* src = px.data<uint8_t>() + i * kPixels;
    std::copy(src, src + kPixels, rec.begin() + 1);
    w.append(rec.data(), kRecordBytes);
  }
  w.close();
  return w.bytes_written();
}

}  // namespace

ChunkFiles chunk_files(const std::string& dir) {
  return {(fs::path(dir) / "train.chunks").string(), (fs::path(dir) / "t10k.chunks").string()};
}

ChunkFiles make_chunks(const std::string& idx_dir, const std::string& out_dir) {
  fs::create_directories(out_dir);
  ChunkFiles f = chunk_files(out_dir);
  // One split at a time: the converter holds one IDX file in memory, the trainer never does.
  f.train_bytes = write_split(data::read_idx_images(idx_file(idx_dir, "train-images-idx3-ubyte")),
                              data::read_idx_labels(idx_file(idx_dir, "train-labels-idx1-ubyte")), f.train);
  f.test_bytes = write_split(data::read_idx_images(idx_file(idx_dir, "t10k-images-idx3-ubyte")),
                             data::read_idx_labels(idx_file(idx_dir, "t10k-labels-idx1-ubyte")), f.test);
  return f;
}

std::shared_ptr<data::ChunkedDataset> open_chunks(const std::string& path, int64_t chunk_bytes,
                                                  int64_t resident_chunks) {
  SNUG_CHECK(fs::is_regular_file(path), IOError, path, ": no such chunk file (offset 0); write it with "
             "`vit --make-chunks DIR --data MNIST_IDX_DIR`, then pass --chunks DIR");
  auto decode = [](const uint8_t* rec, int64_t, int64_t) -> data::Sample {
    memory::TagScope tag(memory::Tag::data);
    Tensor x = empty({1, kSide, kSide}, DType::f32), y = empty({}, DType::i64);
    float* px = x.data<float>();
    // The training set's mean and std (0.1307, 0.3081), as data::MnistOptions::normalize.
    for (int64_t j = 0; j < kPixels; ++j) px[j] = (float(rec[1 + j]) / 255.0f - 0.1307f) / 0.3081f;
    y.data<int64_t>()[0] = int64_t(rec[0]);
    return {x, y};
  };
  return std::make_shared<data::ChunkedDataset>(
      path, data::ChunkedOptions{.record_bytes = kRecordBytes, .chunk_bytes = chunk_bytes,
                                 .max_resident_chunks = resident_chunks},
      decode);
}

}  // namespace vit_example

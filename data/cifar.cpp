// SPDX-License-Identifier: MIT
#include <snug/data/cifar.h>

#include <cstring>
#include <filesystem>

#include <snug/base/error.h>
#include <snug/core/raw_ops.h>
#include <snug/data/file_bytes.h>
#include <snug/memory/allocator.h>

namespace snug::data {

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;

std::string find_batch(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  SNUG_CHECK(fs::is_directory(dir), IOError, "load_cifar10: directory ", dir, " does not exist");
  for (const std::string& cand : {name, name + ".gz"}) {
    fs::path p = fs::path(dir) / cand;
    if (fs::is_regular_file(p)) return p.string();
  }
  throw IOError(str("load_cifar10: ", (fs::path(dir) / name).string(), " not found (nor ", name, ".gz)"));
}

}  // namespace

Cifar10Split read_cifar10_batch(const std::string& path) {
  const std::vector<uint8_t> b = read_file_bytes(path);
  SNUG_CHECK(!b.empty(), IOError, path, ": empty file (offset 0); a CIFAR-10 batch is records of ", kRecord, " bytes");
  const auto size = int64_t(b.size());
  SNUG_CHECK(size % kRecord == 0, IOError, path, ": truncated record ", size / kRecord, " at offset ",
             size / kRecord * kRecord, " (the file has ", size, " bytes, ", size % kRecord, " past the last whole ",
             kRecord, "-byte record: 1 label + ", kPixels, " pixels)");
  const int64_t n = size / kRecord;
  memory::TagScope tag(memory::Tag::data);
  Cifar10Split out{empty({n, 3, 32, 32}, DType::u8), empty({n}, DType::i64)};
  uint8_t* img = out.images.data<uint8_t>();
  int64_t* lab = out.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* rec = b.data() + i * kRecord;
    SNUG_CHECK(rec[0] <= 9, IOError, path, ": label ", int(rec[0]), " of record ", i, " at offset ", i * kRecord,
               " is out of range (expected 0..9)");
    lab[i] = rec[0];
    std::memcpy(img + i * kPixels, rec + 1, size_t(kPixels));
  }
  return out;
}

Cifar10Split load_cifar10(const std::string& dir, bool train) {
  std::vector<std::string> names;
  if (train) {
    for (int k = 1; k <= 5; ++k) names.push_back("data_batch_" + std::to_string(k) + ".bin");
  } else {
    names.push_back("test_batch.bin");
  }
  std::vector<Tensor> images, labels;
  for (const std::string& name : names) {
    Cifar10Split s = read_cifar10_batch(find_batch(dir, name));
    images.push_back(s.images);
    labels.push_back(s.labels);
  }
  memory::TagScope tag(memory::Tag::data);
  Tensor u8 = images.size() == 1 ? images[0] : raw::cat(images, 0);  // (N, 3, 32, 32) u8
  Tensor f = raw::binary_scalar(BinaryOp::mul, raw::to_dtype(u8, DType::f32), 1.0 / 255.0);
  return {f, labels.size() == 1 ? labels[0] : raw::cat(labels, 0)};
}

}  // namespace snug::data

// SPDX-License-Identifier: MIT
// CIFAR-10 binary batches: hand-made good, truncated and corrupt files.
#include <doctest/doctest.h>

#include <snug/data/cifar.h>
#include "data_files.h"

using namespace snug;
using snug::test::TempDir;
using snug::test::write_bytes;

namespace {
// n records; record i has label i % 10 and pixel p = (i + p) % 256.
std::vector<uint8_t> cifar_bytes(int n) {
  std::vector<uint8_t> b;
  for (int i = 0; i < n; ++i) {
    b.push_back(uint8_t(i % 10));
    for (int p = 0; p < 3072; ++p) b.push_back(uint8_t((i + p) % 256));
  }
  return b;
}
}  // namespace

TEST_CASE("CIFAR-10 batches: layout, labels, train and test splits") {
  TempDir d("cifar");
  for (int k = 1; k <= 5; ++k) write_bytes(d.file("data_batch_" + std::to_string(k) + ".bin"), cifar_bytes(3));
  write_bytes(d.file("test_batch.bin"), cifar_bytes(12));
  data::Cifar10Split one = data::read_cifar10_batch(d.file("test_batch.bin"));
  CHECK(one.images.shape() == Shape{12, 3, 32, 32});
  CHECK(one.images.dtype() == DType::u8);
  CHECK(one.labels.to_vector<int64_t>()[11] == 1);
  // Record 2, green plane (channel 1) row 0 col 5 is pixel 1024 + 5 of the record.
  CHECK(int(one.images.to_vector<int64_t>()[2 * 3072 + 1024 + 5]) == (2 + 1029) % 256);
  data::Cifar10Split train = data::load_cifar10(d.path.string(), true);
  CHECK(train.images.shape() == Shape{15, 3, 32, 32});
  CHECK(train.images.dtype() == DType::f32);
  CHECK(train.images.to_vector<float>()[3072 + 255] == doctest::Approx(0.0));  // record 1, pixel 255: (1+255)%256
  CHECK(train.images.to_vector<float>()[3072 + 254] == doctest::Approx(1.0));  // 255/255
  CHECK(train.labels.to_vector<int64_t>()[4] == 1);                            // the second file's record 1
  CHECK(data::load_cifar10(d.path.string(), false).labels.size(0) == 12);
}

TEST_CASE("truncated or corrupt CIFAR-10 files name the file and the offset") {
  TempDir d("cifar_bad");
  const std::string f = d.file("data_batch_1.bin");
  auto b = cifar_bytes(3);
  b.resize(2 * 3073 + 100);
  write_bytes(f, b);
  CHECK_THROWS_WITH_AS(data::read_cifar10_batch(f),
                       doctest::Contains((f + ": truncated record 2 at offset 6146").c_str()), IOError);
  b = cifar_bytes(3);
  b[3073] = 12;  // record 1's label
  write_bytes(f, b);
  CHECK_THROWS_WITH_AS(data::read_cifar10_batch(f),
                       doctest::Contains((f + ": label 12 of record 1 at offset 3073").c_str()), IOError);
  write_bytes(f, {});
  CHECK_THROWS_WITH_AS(data::read_cifar10_batch(f), doctest::Contains("empty file (offset 0)"), IOError);
  CHECK_THROWS_WITH_AS(data::load_cifar10(d.path.string(), false), doctest::Contains("test_batch.bin not found"),
                       IOError);
}

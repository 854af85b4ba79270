// SPDX-License-Identifier: MIT
// data::ChunkedWriter, the writer of the chunk files examples/vit trains from:
// what it writes a ChunkedDataset reads back record for record; the file
// appears only at close(); a wrong-sized record, a use after close() and an
// unwritable path are errors naming the file.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include <snug/data/chunked.h>
#include <snug/data/dataloader.h>
#include "data_files.h"

using namespace snug;
using namespace snug::data;
using snug::test::TempDir;

namespace {

std::vector<uint8_t> record(int64_t i, int64_t rb) {
  std::vector<uint8_t> r(static_cast<size_t>(rb));
  for (int64_t j = 0; j < rb; ++j) r[size_t(j)] = uint8_t((i * 31 + j * 7) & 0xff);
  r[0] = uint8_t(i & 0xff), r[1] = uint8_t(i >> 8);  // the record's id
  return r;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("ChunkedWriter: a ChunkedDataset reads back every record, through DataLoader workers too") {
  TempDir dir("chunked_writer");
  const std::string path = dir.file("recs.chunks");
  const int64_t rb = 785, n = 300;
  {
    // A buffer of a few records: many flushes, one record never split between them.
    ChunkedWriter w(path, rb, /*buffer_bytes=*/3000);
    for (int64_t i = 0; i < n; ++i) w.append(record(i, rb).data(), rb);
    CHECK(w.records() == n);
    CHECK_FALSE(std::filesystem::exists(path));  // not before close()
    w.close();
    CHECK(w.bytes_written() == n * rb);
  }
  CHECK(int64_t(std::filesystem::file_size(path)) == n * rb);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  auto ds = std::make_shared<ChunkedDataset>(path, ChunkedOptions{.record_bytes = rb, .chunk_bytes = 16 * rb});
  REQUIRE(ds->size() == n);
  for (int64_t i : {int64_t(0), int64_t(17), n - 1}) CHECK(ds->get(i)[0].to_vector<uint8_t>() == record(i, rb));
  DataLoader dl(ds, {.batch_size = 32, .num_workers = 2, .sampler = ds->sampler(3)});
  std::vector<int> seen(size_t(n), 0);
  for (Batch& b : dl) {
    const Tensor t = b[0].contiguous();
    for (int64_t r = 0; r < t.size(0); ++r) {
      const std::vector<uint8_t> got(t.data<uint8_t>() + r * rb, t.data<uint8_t>() + (r + 1) * rb);
      const int64_t id = int64_t(got[0]) | (int64_t(got[1]) << 8);
      REQUIRE(id < n);
      CHECK(got == record(id, rb));
      ++seen[size_t(id)];
    }
  }
  for (int64_t i = 0; i < n; ++i) CHECK(seen[size_t(i)] == 1);
}

TEST_CASE("ChunkedWriter: nothing replaces the old file unless close() runs") {
  TempDir dir("chunked_writer_abandon");
  const std::string path = dir.file("old.chunks");
  {
    ChunkedWriter w(path, 4);
    const uint8_t a[4] = {1, 2, 3, 4};
    w.append(a, 4);
    w.close();
  }
  {
    ChunkedWriter w(path, 4);
    const uint8_t b[4] = {9, 9, 9, 9};
    w.append(b, 4);
    w.append(b, 4);
  }  // destroyed without close(): a conversion that failed halfway
  CHECK(std::filesystem::file_size(path) == 4);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_CASE("ChunkedWriter: errors name the file, the record and the sizes") {
  TempDir dir("chunked_writer_bad");
  const std::string path = dir.file("bad.chunks");
  ChunkedWriter w(path, 8);
  const uint8_t rec[8] = {};
  CHECK(error_of([&] { w.append(rec, 7); }).find("record 0 has 7 bytes, expected 8") != std::string::npos);
  w.append(rec, 8);
  w.close();
  CHECK(error_of([&] { w.append(rec, 8); }).find("after close()") != std::string::npos);
  CHECK(error_of([&] { w.close(); }).find("close() twice") != std::string::npos);
  CHECK_THROWS_AS(ChunkedWriter(path, 0), ValueError);
  const std::string missing = dir.file("no/such/dir/x.chunks");
  const std::string msg = error_of([&] { ChunkedWriter bad(missing, 8); });
  CHECK(msg.find(missing) != std::string::npos);
  CHECK(msg.find("offset 0") != std::string::npos);
}

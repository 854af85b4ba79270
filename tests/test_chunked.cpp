// ChunkedDataset: every record once per epoch, shuffled within bounded memory,
// reproducible; partial records are an error naming the file and offset.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include "data/chunked.h"
#include "data_files.h"

using namespace snug;
using namespace snug::data;
using snug::test::TempDir;
using snug::test::write_bytes;

namespace {
// n records of 8 bytes: record i holds i as a little-endian uint64.
std::vector<uint8_t> records(int64_t n) {
  std::vector<uint8_t> b(size_t(n) * 8);
  for (int64_t i = 0; i < n; ++i) std::memcpy(b.data() + i * 8, &i, 8);
  return b;
}
std::vector<int64_t> epoch_ids(ChunkedDataset& ds) {
  std::vector<int64_t> ids;
  while (auto s = ds.next()) {
    const std::vector<int64_t> bytes = (*s)[0].to_vector<int64_t>();
    REQUIRE(bytes.size() == 8);
    int64_t v = 0;
    for (int k = 7; k >= 0; --k) v = (v << 8) | bytes[size_t(k)];
    ids.push_back(v);
  }
  return ids;
}
}  // namespace

TEST_CASE("every record exactly once, shuffled, reproducible, bounded memory") {
  TempDir d("chunked");
  const std::string f = d.file("r.bin");
  write_bytes(f, records(1000));
  ChunkedOptions opt{.record_bytes = 8, .chunk_bytes = 8 * 64, .shuffle_buffer = 100, .seed = 4};
  ChunkedDataset ds(f, opt);
  CHECK(ds.size() == 1000);
  CHECK(ds.memory_bytes() == 8 * 64 + 8 * 100);
  std::vector<int64_t> e0 = epoch_ids(ds);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  for (int64_t i = 0; i < 1000; ++i) iota[size_t(i)] = i;
  CHECK(sorted == iota);
  CHECK(e0 != iota);
  CHECK_FALSE(ds.next().has_value());  // the epoch is over
  ds.start_epoch(0);
  CHECK(epoch_ids(ds) == e0);
  ds.start_epoch(1);
  CHECK(epoch_ids(ds) != e0);
  // No shuffling at all: file order.
  ChunkedDataset plain(f, {.record_bytes = 8, .chunk_bytes = 100, .shuffle_chunks = false});
  CHECK(epoch_ids(plain) == iota);
  // Batches, with a decoder.
  ChunkedDataset dec(f, {.record_bytes = 8, .chunk_bytes = 256, .shuffle_chunks = false},
                     [](const uint8_t*, int64_t, int64_t index) { return Sample{scalar_tensor(double(index), DType::i64)}; });
  std::optional<Batch> b = dec.next_batch(300);
  REQUIRE(b);
  CHECK(b->size() == 300);
  CHECK(b->fields[0].to_vector<int64_t>()[299] == 299);
  dec.next_batch(300);
  dec.next_batch(300);
  CHECK(dec.next_batch(300)->size() == 100);
  CHECK_FALSE(dec.next_batch(300).has_value());
}

TEST_CASE("a partial record names the file and the offset") {
  TempDir d("chunked_bad");
  const std::string f = d.file("r.bin");
  auto b = records(10);
  b.resize(b.size() - 3);
  write_bytes(f, b);
  CHECK_THROWS_WITH_AS(ChunkedDataset(f, {.record_bytes = 8}), doctest::Contains((f + ": truncated record 9 at offset 72").c_str()),
                       IOError);
  CHECK_THROWS_AS(ChunkedDataset(f, {.record_bytes = 0}), ValueError);
}

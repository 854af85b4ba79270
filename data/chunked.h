// SPDX-License-Identifier: MIT
// ChunkedDataset: a Dataset over a file of fixed-size records that may be far
// larger than memory. Record i lives in chunk i / chunk_records(); get(i)
// copies it out of a resident chunk, reading the chunk first when it is not
// resident. At most max_resident_chunks chunks are resident at once, whatever
// the number of DataLoader workers calling get():
//
//   auto ds = std::make_shared<data::ChunkedDataset>(
//       "big.bin", data::ChunkedOptions{.record_bytes = 4096, .chunk_bytes = 16 << 20});
//   data::DataLoader loader(ds, {.batch_size = 32, .num_workers = 2, .sampler = ds->sampler(/*seed=*/1)});
//   for (data::Batch& b : loader) { /* b[0]: (32, 4096) u8 */ }
//
// NOTE [ Chunk residency ]
// Chunks are read with pread into buffers the dataset owns (one per resident
// slot, allocated on first use and reused), never mmap'ed: the kernel's page
// cache of a read() file is not part of the process's resident set, while
// every touched page of an mmap'ed file is, until it is unmapped. So the
// dataset's resident file data is at most
//   memory_bytes() = max_resident_chunks * chunk_records() * record_bytes
// (tests/test_chunked.cpp measures VmRSS to check it). A slot is pinned only
// while one record is copied out of it; when every slot is pinned or loading,
// get() waits. The slot given up for a new chunk is the unpinned one loaded
// longest ago: under a chunk-by-chunk order (ChunkShuffleSampler) that is a
// chunk the order has left behind, so each chunk is read once per epoch as
// long as the batches in flight (prefetch_factor * num_workers * batch_size
// records) span no more than max_resident_chunks chunks (a chunk kept from
// the previous epoch and used first in the next is the oldest and may be
// read once more). Any other order (RandomSampler) still gives every record,
// within the same bound, but reads a chunk for almost every record.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <snug/data/dataset.h>
#include <snug/data/sampler.h>

namespace snug::data {

// Turns the bytes of record `index` into a sample. The default gives
// {(record_bytes) u8}. Called from worker threads; must be thread-safe.
using RecordDecoder = std::function<Sample(const uint8_t* bytes, int64_t record_bytes, int64_t index)>;

struct ChunkedOptions {
  int64_t record_bytes = 0;         // required: the size of every record
  int64_t chunk_bytes = 4 << 20;    // rounded down to whole records (at least one)
  int64_t max_resident_chunks = 2;  // chunk buffers held at once (>= 1)
};

class ChunkedDataset : public Dataset {
 public:
  // Checks that the file is a whole number of records (IOError naming the
  // file and the offset of a partial record otherwise).
  ChunkedDataset(std::string path, ChunkedOptions opt, RecordDecoder decode = {});
  ~ChunkedDataset() override;
  ChunkedDataset(const ChunkedDataset&) = delete;
  ChunkedDataset& operator=(const ChunkedDataset&) = delete;

  int64_t size() const override { return records_; }  // records in the file
  // Record i (IndexError outside [0, size())); thread-safe (NOTE [ Chunk residency ]).
  Sample get(int64_t i) const override;

  int64_t chunk_records() const { return chunk_records_; }
  int64_t num_chunks() const { return num_chunks_; }
  // The most file bytes resident at once: max_resident_chunks full chunks.
  int64_t memory_bytes() const;
  // Chunks read from the file so far (a chunk read twice counts twice).
  int64_t chunk_reads() const;
  // A ChunkShuffleSampler over this file's chunks.
  std::shared_ptr<ChunkShuffleSampler> sampler(uint64_t seed, bool shuffle = true) const;

 private:
  struct Slot {
    int64_t chunk = -1;  // -1: empty
    int pins = 0;        // records being copied out of it now
    bool loading = false;
    uint64_t loaded_at = 0;  // load order, for choosing a slot to reuse
    std::unique_ptr<uint8_t[]> bytes;
  };
  // Pins the slot holding `chunk`, reading it first if needed; returns its index.
  size_t acquire(int64_t chunk) const;
  void release(size_t slot) const;
  void read_chunk(int64_t chunk, uint8_t* dst) const;
  Sample emit(const uint8_t* bytes, int64_t index) const;

  std::string path_;
  ChunkedOptions opt_;
  RecordDecoder decode_;
  int fd_ = -1;
  int64_t records_ = 0, chunk_records_ = 0, num_chunks_ = 0;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // a slot was loaded or unpinned
  mutable std::vector<Slot> slots_;
  mutable uint64_t loads_ = 0;
};

// ChunkedWriter: writes the file a ChunkedDataset reads, records appended in
// order. The bytes go to `path + ".tmp"`, which close() renames to `path`, so
// a reader never sees a half-written file and a failed conversion leaves the
// old file (if any) alone:
//
//   data::ChunkedWriter w("train.chunks", /*record_bytes=*/785);
//   for (...) w.append(record);  // exactly 785 bytes each
//   w.close();                   // IOError naming the file if the disk filled up
class ChunkedWriter {
 public:
  ChunkedWriter(std::string path, int64_t record_bytes, int64_t buffer_bytes = 1 << 20);
  // Without close(): removes the .tmp file, leaving `path` as it was.
  ~ChunkedWriter();
  ChunkedWriter(const ChunkedWriter&) = delete;
  ChunkedWriter& operator=(const ChunkedWriter&) = delete;

  // One record of exactly record_bytes bytes (ValueError otherwise).
  void append(const uint8_t* bytes, int64_t n);
  // Flushes, syncs and renames the file into place; append() is an error afterwards.
  void close();
  int64_t records() const { return records_; }
  int64_t bytes_written() const { return records_ * record_bytes_; }
  const std::string& path() const { return path_; }

 private:
  void flush();
  std::string path_, tmp_;
  int64_t record_bytes_;
  int fd_ = -1;
  int64_t records_ = 0, flushed_ = 0;  // flushed_: bytes already written to the file
  std::vector<uint8_t> buf_;
  size_t used_ = 0;
};

}  // namespace snug::data

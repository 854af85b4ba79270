// ChunkedDataset: streams a file of fixed-size records that may be far larger
// than memory. It reads chunk_bytes at a time (chunks visited in a seeded
// order) and mixes records through a shuffle buffer, so it holds at most
//   chunk_bytes + shuffle_buffer * record_bytes
// bytes of file data (memory_bytes()), whatever the file's size.
//
// A stream has no random access, so it is not a Dataset: it is iterated with
// next() / next_batch(), one epoch at a time, on one thread. The shuffle is
// local: with a buffer of S records a record moves at most about S places
// from its (chunk-shuffled) file position; bigger buffers mix better.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/collate.h"
#include "data/dataset.h"

namespace snug::data {

// Turns the bytes of record `index` into a sample. The default gives
// {(record_bytes) u8}.
using RecordDecoder = std::function<Sample(const uint8_t* bytes, int64_t record_bytes, int64_t index)>;

struct ChunkedOptions {
  int64_t record_bytes = 0;        // required: the size of every record
  int64_t chunk_bytes = 4 << 20;   // rounded down to whole records (at least one)
  int64_t shuffle_buffer = 0;      // records; 0 streams in chunk order
  bool shuffle_chunks = true;      // visit chunks in a seeded order each epoch
  uint64_t seed = 0;
};

class ChunkedDataset {
 public:
  // Checks that the file is a whole number of records (IOError naming the
  // file and the offset of a partial record otherwise).
  ChunkedDataset(std::string path, ChunkedOptions opt, RecordDecoder decode = {});
  ~ChunkedDataset();
  ChunkedDataset(const ChunkedDataset&) = delete;
  ChunkedDataset& operator=(const ChunkedDataset&) = delete;

  int64_t size() const { return records_; }  // records in the file
  // The most file bytes held at once: chunk buffer + shuffle buffer.
  int64_t memory_bytes() const;

  // Rewinds to the start of `epoch` (the chunk order and shuffle depend on
  // (seed, epoch)). The constructor starts epoch 0.
  void start_epoch(int64_t epoch);
  // The next record of the epoch, or nullopt when every record has been given.
  std::optional<Sample> next();
  // Up to B records collated (stack_collate by default); nullopt at the end.
  std::optional<Batch> next_batch(int64_t B, const CollateFn& collate = stack_collate);

 private:
  void read_chunk(int64_t chunk);
  uint64_t draw(uint64_t n);  // uniform in [0, n)
  Sample emit(const uint8_t* bytes, int64_t index) const;

  std::string path_;
  ChunkedOptions opt_;
  RecordDecoder decode_;
  int fd_ = -1;
  int64_t records_ = 0, chunk_records_ = 0, num_chunks_ = 0;
  // epoch state
  int64_t epoch_ = 0;
  std::vector<int64_t> chunk_order_;
  int64_t next_chunk_ = 0;                  // position in chunk_order_
  std::vector<uint8_t> chunk_;              // chunk_records_ * record_bytes
  int64_t chunk_first_ = 0, chunk_len_ = 0, chunk_pos_ = 0;  // records
  std::vector<uint8_t> buffer_;             // shuffle_buffer * record_bytes
  std::vector<int64_t> buffer_index_;       // record index of each buffer slot
  int64_t buffered_ = 0;
  uint64_t draws_ = 0;
};

}  // namespace snug::data

#include "data/chunked.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"
#include "data/sampler.h"
#include "memory/allocator.h"

namespace snug::data {

ChunkedDataset::ChunkedDataset(std::string path, ChunkedOptions opt, RecordDecoder decode)
    : path_(std::move(path)), opt_(opt), decode_(std::move(decode)) {
  SNUG_CHECK(opt.record_bytes >= 1, ValueError, "ChunkedDataset: record_bytes must be >= 1, got ", opt.record_bytes);
  SNUG_CHECK(opt.chunk_bytes >= 1 && opt.shuffle_buffer >= 0, ValueError,
             "ChunkedDataset: chunk_bytes must be >= 1 and shuffle_buffer >= 0, got ", opt.chunk_bytes, " and ",
             opt.shuffle_buffer);
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  SNUG_CHECK(fd_ >= 0, IOError, path_, ": cannot open (offset 0): ", std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd_, &sb) != 0) {
    const int e = errno;
    ::close(fd_);
    throw IOError(str(path_, ": cannot stat (offset 0): ", std::strerror(e)));
  }
  const auto bytes = int64_t(sb.st_size);
  if (bytes % opt.record_bytes != 0) {
    ::close(fd_);
    throw IOError(str(path_, ": truncated record ", bytes / opt.record_bytes, " at offset ",
                      bytes / opt.record_bytes * opt.record_bytes, " (the file has ", bytes, " bytes, not a whole number of ",
                      opt.record_bytes, "-byte records)"));
  }
  records_ = bytes / opt.record_bytes;
  chunk_records_ = std::max<int64_t>(1, opt.chunk_bytes / opt.record_bytes);
  num_chunks_ = (records_ + chunk_records_ - 1) / chunk_records_;
  chunk_.resize(size_t(chunk_records_ * opt.record_bytes));
  buffer_.resize(size_t(opt.shuffle_buffer * opt.record_bytes));
  buffer_index_.resize(size_t(opt.shuffle_buffer));
  start_epoch(0);
}

ChunkedDataset::~ChunkedDataset() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t ChunkedDataset::memory_bytes() const { return int64_t(chunk_.size() + buffer_.size()); }

void ChunkedDataset::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  if (opt_.shuffle_chunks) {
    chunk_order_ = permutation(num_chunks_, opt_.seed, epoch);
  } else {
    chunk_order_.resize(size_t(num_chunks_));
    std::iota(chunk_order_.begin(), chunk_order_.end(), int64_t(0));
  }
  next_chunk_ = 0;
  chunk_len_ = chunk_pos_ = 0;
  buffered_ = 0;
  draws_ = 0;
}

uint64_t ChunkedDataset::draw(uint64_t n) {
  const PhiloxState st{mix_seed(opt_.seed, uint64_t(epoch_), 0x5bu), 0};
  const uint64_t r = (uint64_t(philox_word(st, draws_)) << 32) | philox_word(st, draws_ + 1);
  draws_ += 2;
  return uint64_t((unsigned __int128)r * n >> 64);
}

void ChunkedDataset::read_chunk(int64_t chunk) {
  const int64_t rb = opt_.record_bytes;
  chunk_first_ = chunk * chunk_records_;
  chunk_len_ = std::min(chunk_records_, records_ - chunk_first_);
  chunk_pos_ = 0;
  const int64_t want = chunk_len_ * rb;
  int64_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd_, chunk_.data() + got, size_t(want - got), off_t(chunk_first_ * rb + got));
    if (n < 0 && errno == EINTR) continue;
    SNUG_CHECK(n > 0, IOError, path_, ": read ", n < 0 ? "failed" : "ended early", " at offset ",
               chunk_first_ * rb + got, " (wanted ", want - got, " more bytes of chunk ", chunk,
               n < 0 ? str("): ", std::strerror(errno)) : std::string("; was the file truncated while reading?)"));
    got += n;
  }
}

Sample ChunkedDataset::emit(const uint8_t* bytes, int64_t index) const {
  if (decode_) return decode_(bytes, opt_.record_bytes, index);
  memory::TagScope tag(memory::Tag::data);
  return {from_blob_copy(bytes, {opt_.record_bytes}, DType::u8, DType::u8)};  // (record_bytes) u8
}

std::optional<Sample> ChunkedDataset::next() {
  const auto rb = size_t(opt_.record_bytes);
  const int64_t S = opt_.shuffle_buffer;
  for (;;) {
    if (chunk_pos_ < chunk_len_) {
      const uint8_t* rec = chunk_.data() + size_t(chunk_pos_) * rb;
      const int64_t idx = chunk_first_ + chunk_pos_++;
      if (S == 0) return emit(rec, idx);
      if (buffered_ < S) {  // still filling the buffer
        std::memcpy(buffer_.data() + size_t(buffered_) * rb, rec, rb);
        buffer_index_[size_t(buffered_++)] = idx;
        continue;
      }
      // Full: give a random buffered record and put the new one in its slot.
      const auto j = size_t(draw(uint64_t(S)));
      Sample out = emit(buffer_.data() + j * rb, buffer_index_[j]);
      std::memcpy(buffer_.data() + j * rb, rec, rb);
      buffer_index_[j] = idx;
      return out;
    }
    if (next_chunk_ < num_chunks_) {
      read_chunk(chunk_order_[size_t(next_chunk_++)]);
      continue;
    }
    if (buffered_ == 0) return std::nullopt;
    // The file is done: drain the buffer in random order.
    const auto j = size_t(draw(uint64_t(buffered_)));
    Sample out = emit(buffer_.data() + j * rb, buffer_index_[j]);
    const auto last = size_t(--buffered_);
    if (j != last) {
      std::memcpy(buffer_.data() + j * rb, buffer_.data() + last * rb, rb);
      buffer_index_[j] = buffer_index_[last];
    }
    return out;
  }
}

std::optional<Batch> ChunkedDataset::next_batch(int64_t B, const CollateFn& collate) {
  SNUG_CHECK(B >= 1, ValueError, "ChunkedDataset::next_batch: B must be >= 1, got ", B);
  std::vector<Sample> samples;
  for (int64_t k = 0; k < B; ++k) {
    std::optional<Sample> s = next();
    if (!s) break;
    samples.push_back(std::move(*s));
  }
  if (samples.empty()) return std::nullopt;
  return collate(std::move(samples));
}

}  // namespace snug::data

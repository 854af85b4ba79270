// SPDX-License-Identifier: MIT
#include <snug/data/chunked.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <snug/base/error.h>
#include <snug/memory/allocator.h>

namespace snug::data {

ChunkedDataset::ChunkedDataset(std::string path, ChunkedOptions opt, RecordDecoder decode)
    : path_(std::move(path)), opt_(opt), decode_(std::move(decode)) {
  SNUG_CHECK(opt.record_bytes >= 1, ValueError, "ChunkedDataset: record_bytes must be >= 1, got ", opt.record_bytes);
  SNUG_CHECK(opt.chunk_bytes >= 1 && opt.max_resident_chunks >= 1, ValueError,
             "ChunkedDataset: chunk_bytes and max_resident_chunks must be >= 1, got ", opt.chunk_bytes, " and ",
             opt.max_resident_chunks);
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
                      bytes / opt.record_bytes * opt.record_bytes, " (the file has ", bytes,
                      " bytes, not a whole number of ", opt.record_bytes, "-byte records)"));
  }
  records_ = bytes / opt.record_bytes;
  chunk_records_ = std::max<int64_t>(1, opt.chunk_bytes / opt.record_bytes);
  num_chunks_ = (records_ + chunk_records_ - 1) / chunk_records_;
  // More slots than chunks would never be used.
  slots_.resize(size_t(std::max<int64_t>(1, std::min(opt.max_resident_chunks, num_chunks_))));
}

ChunkedDataset::~ChunkedDataset() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t ChunkedDataset::memory_bytes() const { return int64_t(slots_.size()) * chunk_records_ * opt_.record_bytes; }

int64_t ChunkedDataset::chunk_reads() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int64_t(loads_);
}

std::shared_ptr<ChunkShuffleSampler> ChunkedDataset::sampler(uint64_t seed, bool shuffle) const {
  return std::make_shared<ChunkShuffleSampler>(records_, chunk_records_, seed, shuffle);
}

void ChunkedDataset::read_chunk(int64_t chunk, uint8_t* dst) const {
  const int64_t rb = opt_.record_bytes, first = chunk * chunk_records_;
  const int64_t want = std::min(chunk_records_, records_ - first) * rb;
  int64_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd_, dst + got, size_t(want - got), off_t(first * rb + got));
    if (n < 0 && errno == EINTR) continue;
    SNUG_CHECK(n > 0, IOError, path_, ": read ", n < 0 ? "failed" : "ended early", " at offset ", first * rb + got,
               " (wanted ", want - got, " more bytes of chunk ", chunk,
               n < 0 ? str("): ", std::strerror(errno)) : std::string("; was the file truncated while reading?)"));
    got += n;
  }
}

// NOTE [ Chunk residency ]: find or load, pinning the slot under the lock;
// the read itself runs unlocked, so other workers keep copying records out
// of the other slots meanwhile.
size_t ChunkedDataset::acquire(int64_t chunk) const {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    size_t victim = slots_.size();
    bool waiting_for_load = false;
    for (size_t s = 0; s < slots_.size(); ++s) {
      Slot& sl = slots_[s];
      if (sl.chunk == chunk) {
        if (sl.loading) {
          waiting_for_load = true;
          break;
        }
        ++sl.pins;
        return s;
      }
      if (sl.pins == 0 && !sl.loading &&
          (victim == slots_.size() || sl.chunk < 0 ||
           (slots_[victim].chunk >= 0 && sl.loaded_at < slots_[victim].loaded_at)))
        victim = s;
    }
    if (waiting_for_load || victim == slots_.size()) {
      cv_.wait(lk);  // another thread is reading this chunk, or every slot is in use
      continue;
    }
    Slot& sl = slots_[victim];
    sl.chunk = chunk;
    sl.loading = true;
    sl.pins = 1;
    sl.loaded_at = ++loads_;
    const size_t bytes = size_t(chunk_records_ * opt_.record_bytes);
    if (!sl.bytes) sl.bytes.reset(new uint8_t[bytes]);  // not zeroed: only read pages become resident
    uint8_t* dst = sl.bytes.get();
    lk.unlock();
    try {
      read_chunk(chunk, dst);
    } catch (...) {
      lk.lock();
      sl.chunk = -1;
      sl.loading = false;
      sl.pins = 0;
      cv_.notify_all();
      throw;
    }
    lk.lock();
    sl.loading = false;
    cv_.notify_all();
    return victim;
  }
}

void ChunkedDataset::release(size_t slot) const {
  {
    std::lock_guard<std::mutex> lk(mu_);
    --slots_[slot].pins;
  }
  cv_.notify_all();
}

Sample ChunkedDataset::emit(const uint8_t* bytes, int64_t index) const {
  if (decode_) return decode_(bytes, opt_.record_bytes, index);
  memory::TagScope tag(memory::Tag::data);
  return {from_blob_copy(bytes, {opt_.record_bytes}, DType::u8, DType::u8)};  // (record_bytes) u8
}

Sample ChunkedDataset::get(int64_t i) const {
  SNUG_CHECK(i >= 0 && i < records_, IndexError, "ChunkedDataset(", path_, "): record ", i, " out of range (", records_,
             " records)");
  const int64_t chunk = i / chunk_records_;
  const size_t s = acquire(chunk);
  // The slot cannot be reused while pinned, so its bytes are read unlocked.
  struct Unpin {
    const ChunkedDataset* ds;
    size_t s;
    ~Unpin() { ds->release(s); }
  } unpin{this, s};
  return emit(slots_[s].bytes.get() + (i - chunk * chunk_records_) * opt_.record_bytes, i);
}

ChunkedWriter::ChunkedWriter(std::string path, int64_t record_bytes, int64_t buffer_bytes)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), record_bytes_(record_bytes) {
  SNUG_CHECK(record_bytes >= 1, ValueError, "ChunkedWriter(", path_, "): record_bytes must be >= 1, got ", record_bytes);
  // Whole records per buffer, at least one.
  buf_.resize(size_t(std::max<int64_t>(1, buffer_bytes / record_bytes) * record_bytes));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SNUG_CHECK(fd_ >= 0, IOError, tmp_, ": cannot create (offset 0): ", std::strerror(errno));
}

ChunkedWriter::~ChunkedWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void ChunkedWriter::append(const uint8_t* bytes, int64_t n) {
  SNUG_CHECK(fd_ >= 0, ValueError, "ChunkedWriter(", path_, "): append after close()");
  SNUG_CHECK(n == record_bytes_, ValueError, "ChunkedWriter(", path_, "): record ", records_, " has ", n,
             " bytes, expected ", record_bytes_);
  if (used_ + size_t(n) > buf_.size()) flush();
  std::memcpy(buf_.data() + used_, bytes, size_t(n));
  used_ += size_t(n);
  ++records_;
}

void ChunkedWriter::flush() {
  size_t done = 0;
  while (done < used_) {
    const ssize_t w = ::write(fd_, buf_.data() + done, used_ - done);
    if (w < 0 && errno == EINTR) continue;
    SNUG_CHECK(w > 0, IOError, tmp_, ": write failed at offset ", flushed_ + int64_t(done), ": ",
               w < 0 ? std::strerror(errno) : "no progress");
    done += size_t(w);
  }
  flushed_ += int64_t(used_);
  used_ = 0;
}

void ChunkedWriter::close() {
  SNUG_CHECK(fd_ >= 0, ValueError, "ChunkedWriter(", path_, "): close() twice");
  flush();
  SNUG_CHECK(::fsync(fd_) == 0, IOError, tmp_, ": fsync failed at offset ", flushed_, ": ", std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;  // from here on the destructor leaves the file alone
  if (::close(fd) != 0 || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    throw IOError(str(path_, ": cannot move ", tmp_, " into place (offset ", flushed_, "): ", std::strerror(e)));
  }
}

}  // namespace snug::data

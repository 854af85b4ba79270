// SPDX-License-Identifier: MIT
#include <snug/data/token_file.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <snug/base/error.h>
#include <snug/memory/allocator.h>

namespace snug::data {

TokenFile::TokenFile(const std::string& path, int token_bytes, int64_t vocab_size)
    : path_(path), width_(token_bytes), vocab_(vocab_size) {
  SNUG_CHECK(token_bytes == 2 || token_bytes == 4, ValueError,
             "TokenFile: token_bytes must be 2 (uint16) or 4 (uint32), got ", token_bytes);
  SNUG_CHECK(vocab_size >= 0, ValueError, "TokenFile: vocab_size must be >= 0, got ", vocab_size);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SNUG_CHECK(fd >= 0, IOError, path, ": cannot open (offset 0): ", std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    const int e = errno;
    ::close(fd);
    throw IOError(str(path, ": cannot stat (offset 0): ", std::strerror(e)));
  }
  const auto bytes = int64_t(sb.st_size);
  if (bytes == 0 || bytes % token_bytes != 0) {
    ::close(fd);
    SNUG_CHECK(bytes != 0, IOError, path, ": empty token file (offset 0)");
    throw IOError(str(path, ": truncated token at offset ", bytes / token_bytes * token_bytes, " (the file has ", bytes,
                      " bytes, not a whole number of ", token_bytes * 8, "-bit tokens)"));
  }
  void* p = ::mmap(nullptr, size_t(bytes), PROT_READ, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping keeps the file open
  SNUG_CHECK(p != MAP_FAILED, IOError, path, ": mmap of ", bytes, " bytes failed (offset 0): ", std::strerror(e));
  base_ = static_cast<const uint8_t*>(p);
  mapped_ = size_t(bytes);
  n_ = bytes / token_bytes;
}

TokenFile::~TokenFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), mapped_);
}

void TokenFile::copy_tokens(int64_t start, int64_t n, int64_t* out) const {
  SNUG_CHECK(start >= 0 && n >= 0 && start + n <= n_, IndexError, "TokenFile ", path_, ": tokens [", start, ", ",
             start + n, ") out of range (the file has ", n_, " tokens)");
  // The file is little-endian; on a little-endian host the bytes are the
  // values, and memcpy (which the compiler turns into a plain load) is the
  // portable way to read them unaligned.
  static_assert(std::endian::native == std::endian::little, "TokenFile: big-endian hosts need a byte swap here");
  const uint8_t* src = base_ + start * width_;
  if (width_ == 2) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      out[i] = v;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      out[i] = v;
    }
  }
  if (vocab_ > 0) {
    for (int64_t i = 0; i < n; ++i)
      SNUG_CHECK(out[i] < vocab_, IOError, path_, ": token ", out[i], " at offset ", (start + i) * width_, " (token ",
                 start + i, ") is outside the vocabulary of ", vocab_, " (corrupt file, or the wrong token width?)");
  }
}

int64_t TokenFile::token(int64_t i) const {
  int64_t v;
  copy_tokens(i, 1, &v);
  return v;
}

Tensor TokenFile::read(int64_t start, int64_t n) const {
  memory::TagScope tag(memory::Tag::data);
  Tensor out = empty({n}, DType::i64);  // (n)
  copy_tokens(start, n, out.data<int64_t>());
  return out;
}

std::pair<Tensor, Tensor> TokenFile::window(int64_t offset, int64_t T) const {
  SNUG_CHECK(T >= 1 && n_ >= T + 1, ValueError, "TokenFile ", path_, ": a window of ", T, " (+1) tokens needs ", T + 1,
             " tokens; the file has ", n_);
  Tensor xy = read(offset, T + 1);  // (T+1): x and y are views of one read
  return {xy.slice(0, 0, T), xy.slice(0, 1, T + 1)};
}

std::pair<Tensor, Tensor> TokenFile::random_batch(int64_t B, int64_t T, Generator& gen) const {
  SNUG_CHECK(B >= 1, ValueError, "TokenFile::random_batch: B must be >= 1, got ", B);
  SNUG_CHECK(T >= 1 && n_ >= T + 1, ValueError, "TokenFile ", path_, ": a window of ", T, " (+1) tokens needs ", T + 1,
             " tokens; the file has ", n_);
  const auto span = uint64_t(n_ - T);  // offsets 0 .. n - T - 1
  const PhiloxState st = gen.reserve(philox_counters(uint64_t(2 * B)));
  memory::TagScope tag(memory::Tag::data);
  Tensor x = empty({B, T}, DType::i64), y = empty({B, T}, DType::i64);  // (B, T) each
  std::vector<int64_t> row(size_t(T + 1));
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t r = (uint64_t(philox_word(st, 2 * uint64_t(b))) << 32) | philox_word(st, 2 * uint64_t(b) + 1);
    const auto off = int64_t((unsigned __int128)r * span >> 64);
    copy_tokens(off, T + 1, row.data());
    std::memcpy(x.data<int64_t>() + b * T, row.data(), size_t(T) * 8);
    std::memcpy(y.data<int64_t>() + b * T, row.data() + 1, size_t(T) * 8);
  }
  return {x, y};
}

RandomWindowDataset::RandomWindowDataset(std::shared_ptr<const TokenFile> file, int64_t block,
                                         int64_t samples_per_epoch)
    : file_(std::move(file)), block_(block), samples_(samples_per_epoch) {
  SNUG_CHECK(file_ != nullptr, ValueError, "RandomWindowDataset: file is null");
  SNUG_CHECK(block >= 1 && file_->size() >= block + 1, ValueError, "RandomWindowDataset: block ", block,
             " needs at least ", block + 1, " tokens; ", file_->path(), " has ", file_->size());
  SNUG_CHECK(samples_per_epoch >= 0, ValueError, "RandomWindowDataset: samples_per_epoch must be >= 0, got ",
             samples_per_epoch);
}

Sample RandomWindowDataset::get(int64_t i) const {
  SNUG_CHECK(i >= 0 && i < samples_, IndexError, "RandomWindowDataset: index ", i, " out of range [0, ", samples_, ")");
  const PhiloxState st = sample_rng().reserve(1);
  const uint64_t r = (uint64_t(philox_word(st, 0)) << 32) | philox_word(st, 1);
  const auto off = int64_t((unsigned __int128)r * uint64_t(file_->size() - block_) >> 64);
  auto [x, y] = file_->window(off, block_);
  return {x, y};
}

void write_token_file(const std::string& path, const std::vector<int64_t>& tokens, int token_bytes) {
  SNUG_CHECK(token_bytes == 2 || token_bytes == 4, ValueError,
             "write_token_file: token_bytes must be 2 (uint16) or 4 (uint32), got ", token_bytes);
  const int64_t limit = token_bytes == 2 ? (int64_t(1) << 16) : (int64_t(1) << 32);
  std::vector<uint8_t> bytes(tokens.size() * size_t(token_bytes));
  for (size_t i = 0; i < tokens.size(); ++i) {
    SNUG_CHECK(tokens[i] >= 0 && tokens[i] < limit, ValueError, "write_token_file: token ", tokens[i], " at position ",
               i, " does not fit ", token_bytes * 8, " bits (use token_bytes = 4)");
    for (int k = 0; k < token_bytes; ++k) bytes[i * size_t(token_bytes) + size_t(k)] = uint8_t(tokens[i] >> (8 * k));
  }
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  SNUG_CHECK(f != nullptr, IOError, tmp, ": cannot create (offset 0): ", std::strerror(errno));
  const size_t wrote = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = std::fclose(f) == 0 && wrote == bytes.size();
  if (!ok) {
    std::remove(tmp.c_str());
    throw IOError(str(tmp, ": write failed at offset ", wrote, " of ", bytes.size()));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  SNUG_CHECK(!ec, IOError, path, ": cannot rename ", tmp, " into place: ", ec.message());
}

int64_t write_token_file_from_text(const std::string& text_path, const std::string& path,
                                   const CharTokenizer& tokenizer, int token_bytes) {
  const std::vector<int64_t> ids = tokenizer.encode(read_text_file(text_path));
  write_token_file(path, ids, token_bytes);
  return int64_t(ids.size());
}

}  // namespace snug::data

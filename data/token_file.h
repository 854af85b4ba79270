// SPDX-License-Identifier: MIT
// TokenFile: a memory-mapped file of tokens in nanoGPT's .bin layout: raw
// little-endian uint16 (or uint32) tokens, no header. Opening it costs
// nothing (the OS pages it in on demand), so files far larger than memory are
// fine; windows are copied out as i64 tensors.
//
// With no header, corruption can only show as a size that is not a whole
// number of tokens (checked on open) or as a token outside the vocabulary
// (checked on every read when vocab_size is given). Both throw IOError naming
// the file and the byte offset.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <snug/core/generator.h>
#include <snug/data/dataset.h>
#include <snug/data/text.h>

namespace snug::data {

class TokenFile {
 public:
  // token_bytes: 2 (uint16, nanoGPT's default) or 4 (uint32). vocab_size 0: no check.
  explicit TokenFile(const std::string& path, int token_bytes = 2, int64_t vocab_size = 0);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return n_; }  // tokens
  int token_bytes() const { return width_; }
  const std::string& path() const { return path_; }

  int64_t token(int64_t i) const;
  // Tokens [start, start + n) -> (n) i64.
  Tensor read(int64_t start, int64_t n) const;
  // The language-model pair at `offset`: x = tokens [offset, offset + T),
  // y = tokens [offset + 1, offset + T + 1); each (T) i64.
  std::pair<Tensor, Tensor> window(int64_t offset, int64_t T) const;
  // B windows at offsets drawn uniformly from gen: x, y each (B, T) i64.
  std::pair<Tensor, Tensor> random_batch(int64_t B, int64_t T, Generator& gen) const;

 private:
  // Copies n tokens from `start` into out as i64, checking the vocabulary.
  void copy_tokens(int64_t start, int64_t n, int64_t* out) const;
  std::string path_;
  int width_;
  int64_t vocab_;
  int64_t n_ = 0;
  const uint8_t* base_ = nullptr;
  size_t mapped_ = 0;
};

// Random language-model windows of a TokenFile as a Dataset: sample i is
// {x (T) i64, y (T) i64} at an offset drawn from sample_rng(), so a
// DataLoader gives fresh windows every epoch, the same for any number of
// workers (NOTE [ Per-sample randomness ]). size() is how many windows an
// epoch has (the file has far more possible windows than anyone visits).
class RandomWindowDataset : public Dataset {
 public:
  RandomWindowDataset(std::shared_ptr<const TokenFile> file, int64_t block, int64_t samples_per_epoch);
  int64_t size() const override { return samples_; }
  Sample get(int64_t i) const override;

 private:
  std::shared_ptr<const TokenFile> file_;
  int64_t block_, samples_;
};

// Writes tokens in the .bin layout (little-endian, no header), atomically (a
// temporary file renamed into place). A token that does not fit token_bytes
// throws ValueError naming its position.
void write_token_file(const std::string& path, const std::vector<int64_t>& tokens, int token_bytes = 2);
// Encodes a text file with tokenizer and writes it; returns the token count.
int64_t write_token_file_from_text(const std::string& text_path, const std::string& path,
                                   const CharTokenizer& tokenizer, int token_bytes = 2);

}  // namespace snug::data

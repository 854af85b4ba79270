// SPDX-License-Identifier: MIT
// Text to tokens and back, one token per byte ("character"): the tokenizer
// of the char-level language model (examples/charlm).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <snug/core/tensor.h>

namespace snug::data {

// The whole of a text file; IOError names the file if it cannot be read.
std::string read_text_file(const std::string& path);

class CharTokenizer {
 public:
  // vocab[id] is the byte of token id; the bytes must be distinct.
  explicit CharTokenizer(std::string vocab);
  // The distinct bytes of text, sorted by byte value (for ASCII text this is
  // the order of std::set<char>, which examples/charlm uses).
  static CharTokenizer fit(std::string_view text);

  int64_t vocab_size() const { return int64_t(vocab_.size()); }
  const std::string& vocab() const { return vocab_; }
  // A byte outside the vocabulary throws ValueError naming it and its position.
  std::vector<int64_t> encode(std::string_view text) const;
  Tensor encode_tensor(std::string_view text) const;  // (n) i64
  // An id outside [0, vocab_size) throws IndexError naming it and its position.
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string decode(const Tensor& ids) const;  // any integer dtype, any shape (read row-major)

 private:
  std::string vocab_;
  int16_t id_of_[256];  // -1: not in the vocabulary
};

}  // namespace snug::data

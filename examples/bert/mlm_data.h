// SPDX-License-Identifier: MIT
// The masked-LM data of examples/bert, written so that its PyTorch peer
// (bench/peers/bert_torch.py) can make the very same batches: a text's
// non-empty lines (trailing whitespace removed) are the sequences, one
// character per token, [CLS] line [SEP]; the last tenth of the lines is the
// validation set. Which positions are masked and in which order the lines
// come are pure functions of the seed through mix() (splitmix64's finalizer),
// so no RNG library has to agree between C++ and Python.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <snug/data/dataset.h>
#include <snug/data/sampler.h>

namespace bert_example {

using namespace snug;

inline constexpr int64_t kPad = 0, kCls = 1, kSep = 2, kMask = 3, kFirstChar = 4;

// splitmix64's output function: a bijection of 64-bit integers that scatters bits.
inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// A double in [0, 1) from the top 53 bits.
inline double unit(uint64_t h) { return double(h >> 11) * 0x1.0p-53; }

struct Corpus {
  std::string chars;                            // the vocabulary's characters, sorted; token kFirstChar + i
  std::vector<std::vector<int64_t>> train, val;  // [CLS] ... [SEP], at most max_len tokens each
  int64_t vocab() const { return kFirstChar + int64_t(chars.size()); }
};

// IOError naming the file if it cannot be read or has fewer than 20 lines.
Corpus read_corpus(const std::string& path, int64_t max_len);

// One masked line: BERT's 15% of the character positions ([CLS] and [SEP]
// never), of which 80% become [MASK], 10% a random character, 10% stay;
// labels hold the original token there, -100 elsewhere. split: 0 train, 1 val.
void mask_line(const std::vector<int64_t>& ids, uint64_t seed, int split, int64_t index, int64_t vocab,
               std::vector<int64_t>& input, std::vector<int64_t>& labels);

// Sample i: {input (L) i64, labels (L) i64} of line i, masked as above.
class MlmDataset : public data::Dataset {
 public:
  MlmDataset(const std::vector<std::vector<int64_t>>& lines, uint64_t seed, int split, int64_t vocab)
      : lines_(lines), seed_(seed), split_(split), vocab_(vocab) {}
  int64_t size() const override { return int64_t(lines_.size()); }
  data::Sample get(int64_t i) const override;

 private:
  const std::vector<std::vector<int64_t>>& lines_;
  uint64_t seed_;
  int split_;
  int64_t vocab_;
};

// Epoch e's order: a Fisher-Yates shuffle driven by mix(), cut to whole
// batches of `batch` (the 32 of the recipe, so that 8 x 4 micro-batches are
// the same lines as one batch of 32).
class MixSampler : public data::Sampler {
 public:
  MixSampler(int64_t n, uint64_t seed, int64_t batch) : n_(n), seed_(seed), batch_(batch) {}
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_ / batch_ * batch_; }

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t batch_;
};

}  // namespace bert_example

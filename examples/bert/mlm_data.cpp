// SPDX-License-Identifier: MIT
#include "bert/mlm_data.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <snug/base/error.h>

namespace bert_example {

Corpus read_corpus(const std::string& path, int64_t max_len) {
  std::ifstream f(path, std::ios::binary);
  SNUG_CHECK(f.good(), IOError, path, ": cannot open the corpus");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && std::string(" \t\r\f\v").find(line.back()) != std::string::npos) line.pop_back();
    if (!line.empty()) lines.push_back(line);
    start = end + 1;
  }
  SNUG_CHECK(lines.size() >= 20, IOError, path, ": ", lines.size(), " non-empty lines; a corpus needs at least 20");
  std::set<unsigned char> seen;
  for (const std::string& l : lines) seen.insert(l.begin(), l.end());
  Corpus c;
  c.chars.assign(seen.begin(), seen.end());
  int64_t of[256] = {};
  for (size_t i = 0; i < c.chars.size(); ++i) of[static_cast<unsigned char>(c.chars[i])] = kFirstChar + int64_t(i);
  const size_t n_val = lines.size() / 10;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int64_t> ids{kCls};
    const size_t n = std::min(lines[i].size(), size_t(max_len - 2));
    for (size_t j = 0; j < n; ++j) ids.push_back(of[static_cast<unsigned char>(lines[i][j])]);
    ids.push_back(kSep);
    (i < lines.size() - n_val ? c.train : c.val).push_back(std::move(ids));
  }
  return c;
}

void mask_line(const std::vector<int64_t>& ids, uint64_t seed, int split, int64_t index, int64_t vocab,
               std::vector<int64_t>& input, std::vector<int64_t>& labels) {
  input = ids;
  labels.assign(ids.size(), -100);
  for (size_t p = 1; p + 1 < ids.size(); ++p) {
    const uint64_t h1 = mix(seed ^ (uint64_t(split) << 62) ^ (uint64_t(index) << 20) ^ uint64_t(p));
    if (unit(h1) >= 0.15) continue;
    labels[p] = ids[p];
    const uint64_t h2 = mix(h1);
    const double v = unit(h2);
    if (v < 0.8)
      input[p] = kMask;
    else if (v < 0.9)
      input[p] = kFirstChar + int64_t(mix(h2) % uint64_t(vocab - kFirstChar));
  }
}

data::Sample MlmDataset::get(int64_t i) const {
  std::vector<int64_t> input, labels;
  mask_line(lines_.at(size_t(i)), seed_, split_, i, vocab_, input, labels);
  const int64_t L = int64_t(input.size());
  Tensor x = empty({L}, DType::i64), y = empty({L}, DType::i64);
  std::copy(input.begin(), input.end(), x.data<int64_t>());
  std::copy(labels.begin(), labels.end(), y.data<int64_t>());
  return {x, y};
}

std::vector<int64_t> MixSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) order[size_t(i)] = i;
  const uint64_t base = mix(seed_ + 1000 + uint64_t(epoch));
  for (int64_t i = n_ - 1; i > 0; --i) std::swap(order[size_t(i)], order[mix(base + uint64_t(i)) % uint64_t(i + 1)]);
  order.resize(size_t(size()));
  return order;
}

}  // namespace bert_example

// SPDX-License-Identifier: MIT
#include <snug/data/text.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <snug/base/error.h>

namespace snug::data {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SNUG_CHECK(in.good(), IOError, path, ": cannot open (offset 0)");
  std::ostringstream ss;
  ss << in.rdbuf();
  SNUG_CHECK(!in.bad(), IOError, path, ": read error after offset ", ss.str().size());
  return ss.str();
}

CharTokenizer::CharTokenizer(std::string vocab) : vocab_(std::move(vocab)) {
  std::fill(std::begin(id_of_), std::end(id_of_), int16_t(-1));
  SNUG_CHECK(!vocab_.empty(), ValueError, "CharTokenizer: empty vocabulary");
  for (size_t i = 0; i < vocab_.size(); ++i) {
    const auto c = static_cast<unsigned char>(vocab_[i]);
    SNUG_CHECK(id_of_[c] < 0, ValueError, "CharTokenizer: byte ", int(c), " appears twice in the vocabulary (ids ",
               id_of_[c], " and ", i, ")");
    id_of_[c] = int16_t(i);
  }
}

CharTokenizer CharTokenizer::fit(std::string_view text) {
  bool seen[256] = {};
  for (char ch : text) seen[static_cast<unsigned char>(ch)] = true;
  std::string vocab;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) vocab.push_back(static_cast<char>(c));
  SNUG_CHECK(!vocab.empty(), ValueError, "CharTokenizer::fit: the text is empty");
  return CharTokenizer(std::move(vocab));
}

std::vector<int64_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int16_t id = id_of_[static_cast<unsigned char>(text[i])];
    SNUG_CHECK(id >= 0, ValueError, "CharTokenizer::encode: byte ", int(static_cast<unsigned char>(text[i])),
               " at position ", i, " is not in the vocabulary of ", vocab_.size(), " characters");
    ids[i] = id;
  }
  return ids;
}

Tensor CharTokenizer::encode_tensor(std::string_view text) const {
  std::vector<int64_t> ids = encode(text);
  return from_vector(ids, {int64_t(ids.size())}, DType::i64);
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    SNUG_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), IndexError, "CharTokenizer::decode: id ", ids[i], " at position ",
               i, " is outside the vocabulary [0, ", vocab_size(), ")");
    out[i] = vocab_[size_t(ids[i])];
  }
  return out;
}

std::string CharTokenizer::decode(const Tensor& ids) const {
  SNUG_CHECK(!ids.is_floating_point(), DTypeError, "CharTokenizer::decode: ids must be integers, got ",
             dtype_name(ids.dtype()));
  return decode(ids.to_vector<int64_t>());
}

}  // namespace snug::data

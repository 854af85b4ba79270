// SPDX-License-Identifier: MIT
// Byte-level BPE: GPT-2's tokenizer, read from GPT-2's vocab.json + merges.txt
// or from a Hugging Face tokenizer.json, giving the ids Hugging Face gives
// (docs/data.md, "Byte-level BPE (GPT-2)", says what is covered and what is not).
//
// NOTE [ Byte-level BPE ]
// Text is cut into pieces by GPT-2's pattern (bpe::pretokenize), each piece's
// bytes become one token per byte, and adjacent tokens are merged by the merge
// list, lowest rank first (leftmost first among equal ranks), until no
// adjacent pair has a merge. Vocabulary strings are not bytes but GPT-2's
// printable stand-ins (bpe::byte_to_unicode: "Ġ" is the space byte), which is
// why a merge "Ġ t" joins a space and a 't'. decode maps the stand-ins back.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <snug/core/tensor.h>

namespace snug::data {

class BpeTokenizer {
 public:
  // GPT-2's files: vocab.json is an object {token: id}; merges.txt holds one
  // merge "a b" a line, in rank order (a first line "#version..." is skipped,
  // as are empty lines). IOError names the file and what is wrong: the byte
  // offset of malformed JSON, the line of a malformed merge; ValueError (see
  // the constructor) names the file and line of a merge whose parts or result
  // are not in the vocabulary.
  static BpeTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // A Hugging Face tokenizer.json with model.type "BPE" and a ByteLevel
  // pre-tokenizer (GPT-2, RoBERTa and models trained like them): model.vocab,
  // model.merges ("a b" strings or ["a", "b"] pairs), model.ignore_merges,
  // pre_tokenizer.add_prefix_space and use_regex, and added_tokens (their ids
  // and strings only: text is not searched for them). Settings snug does not
  // implement (a normalizer, dropout, byte_fallback, a subword prefix, another
  // pre-tokenizer) are refused with an IOError naming them, not ignored.
  static BpeTokenizer from_tokenizer_json(const std::string& path);

  struct Options {
    bool add_prefix_space = false;  // a space before text that does not start with one
    bool use_regex = true;          // cut the text by GPT-2's pattern (else: one piece)
    bool ignore_merges = false;     // a piece that is a whole token is that token
  };
  // From memory: vocab[i] = {token, id} (token in GPT-2's stand-in characters),
  // merges in rank order. `source` names them in error messages, and
  // merge_where[r] (if given) where merge r came from ("merges.txt line 7").
  // ValueError for a vocabulary or merges that do not fit together: an empty
  // vocabulary, a negative or repeated id, a token listed twice, a merge whose
  // parts or result are not in the vocabulary.
  BpeTokenizer(const std::vector<std::pair<std::string, int64_t>>& vocab,
               const std::vector<std::pair<std::string, std::string>>& merges, Options options,
               const std::string& source, const std::vector<std::string>& merge_where = {});

  // Safe to call from several threads at once (a DataLoader's workers): the
  // per-piece cache is behind a mutex. A byte whose single-byte token is not in
  // the vocabulary throws ValueError naming it (Hugging Face drops it silently).
  std::vector<int64_t> encode(std::string_view text) const;
  Tensor encode_tensor(std::string_view text) const;  // (n) i64
  // The bytes of the tokens, concatenated: decode(encode(s)) == s for every s
  // (without add_prefix_space). An id outside the vocabulary (or in a gap of
  // its ids) throws IndexError naming it and its position.
  std::string decode(const std::vector<int64_t>& ids) const;

  // One more than the largest id (the size of an embedding table for it).
  int64_t vocab_size() const;
  // ValueError when the token is not in the vocabulary.
  int64_t token_to_id(std::string_view token) const;
  // The token's string as the vocabulary spells it ("Ġthe"); IndexError when absent.
  std::string id_to_token(int64_t id) const;
  int64_t merge_count() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;  // immutable but for its cache; copies share it
};

namespace bpe {

// GPT-2's byte-to-unicode table: the 188 printable bytes ('!'..'~', '¡'..'¬',
// '®'..'ÿ') stand for themselves, the other 68 for U+0100 + n in byte order
// (the space byte 0x20 is U+0120 'Ġ', '\n' is U+010A 'Ċ').
const std::array<char32_t, 256>& byte_to_unicode();
// Unicode general categories L* and N* (Unicode 14.0, every script), and the
// White_Space property (what \s means to Oniguruma, which Hugging Face uses).
bool is_letter(char32_t cp);
bool is_number(char32_t cp);
bool is_space(char32_t cp);
// The pieces of text by GPT-2's pattern, as views into text:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// A byte that is not part of valid UTF-8 counts as one symbol (neither letter,
// number nor space). The pieces put together are text, always.
std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace bpe

}  // namespace snug::data

// SPDX-License-Identifier: MIT
// Character tokenizer: round trip, vocabulary order, unknown bytes and ids.
#include <doctest/doctest.h>

#include <snug/data/text.h>

using namespace snug;
using namespace snug::data;

TEST_CASE("char tokenizer round trip") {
  const std::string text = "hello, world\nhello!";
  CharTokenizer tok = CharTokenizer::fit(text);
  CHECK(tok.vocab() == "\n !,dehlorw");
  CHECK(tok.vocab_size() == 11);
  std::vector<int64_t> ids = tok.encode(text);
  CHECK(ids.size() == text.size());
  CHECK(ids[0] == 6);  // 'h' follows \n, ' ', '!', ',', 'd', 'e'
  CHECK(tok.decode(ids) == text);
  Tensor t = tok.encode_tensor("world");
  CHECK(t.shape() == Shape{5});
  CHECK(tok.decode(t) == "world");
  CHECK(tok.decode(t.to(DType::i32)) == "world");
  CHECK_THROWS_WITH_AS(tok.encode("hex"), doctest::Contains("byte 120 at position 2"), ValueError);
  CHECK_THROWS_WITH_AS(tok.decode(std::vector<int64_t>{1, 11}), doctest::Contains("id 11 at position 1"), IndexError);
  CHECK_THROWS_AS(CharTokenizer("aa"), ValueError);
  CHECK_THROWS_AS(read_text_file("/nonexistent/file.txt"), IOError);
}

// SPDX-License-Identifier: MIT
// Byte-level BPE (data/bpe.h): GPT-2's pattern, merges by rank, ids worked out
// by hand on a tiny vocabulary written here (all 256 byte tokens + 15 merges),
// round trips, both tokenizer.json merge formats, and every error.
#include <doctest/doctest.h>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <snug/base/error.h>
#include <snug/data/bpe.h>

using namespace snug;
using namespace snug::data;
namespace fs = std::filesystem;

namespace {

using Ids = std::vector<int64_t>;
using Pieces = std::vector<std::string>;

// The merges of the fixture, as byte strings, in rank order; merge r makes token 256 + r.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"},     {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"},   {"o", "r"},       {" w", "or"}, {"l", "d"},
    {" wor", "ld"}, {"'", "s"}, {"1", "2"},   {" ", " "},    {"\n", "\n"}, {"\xc3", "\xa9"}, {"a", "a"}};
enum : int64_t { he = 256, ll, hell, hello, sp_w, or_, sp_wor, ld, sp_world, apos_s, d12, sp2, nl2, e_acute, aa };

std::string utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

// The vocabulary string of a byte string ("Ġw" for " w"), as code points.
std::u32string stand_in(std::string_view bytes) {
  std::u32string s;
  for (char c : bytes) s += bpe::byte_to_unicode()[static_cast<unsigned char>(c)];
  return s;
}
std::string stand_in_utf8(std::string_view bytes) {
  std::string s;
  for (char32_t cp : stand_in(bytes)) s += utf8(cp);
  return s;
}

// A JSON string literal with every non-ASCII character as \uXXXX (a surrogate
// pair above U+FFFF), so the reader's escapes are exercised too.
std::string json_str(std::u32string_view s) {
  std::string out = "\"";
  char buf[8];
  for (char32_t cp : s) {
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += char(cp);
    } else if (cp >= 0x20 && cp < 0x7F) {
      out += char(cp);
    } else if (cp < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
      out += buf;
    } else {
      const char32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(0xD800 + (v >> 10)));
      out += buf;
      std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(0xDC00 + (v & 0x3FF)));
      out += buf;
    }
  }
  return out + "\"";
}

std::string vocab_object() {
  std::string j = "{";
  for (int b = 0; b < 256; ++b) j += json_str(stand_in(std::string(1, char(b)))) + ": " + std::to_string(b) + ",\n";
  for (size_t r = 0; r < kMerges.size(); ++r)
    j += json_str(stand_in(kMerges[r].first + kMerges[r].second)) + ": " + std::to_string(256 + r) + ",\n";
  j += json_str(U"\U0001F600") + ": 271}";  // a token outside the byte stand-ins: a surrogate pair
  return j;
}

std::string merges_lines() {
  std::string m = "#version: 0.2\n";
  for (const auto& [a, b] : kMerges) m += stand_in_utf8(a) + " " + stand_in_utf8(b) + "\n";
  return m;
}

// A fresh folder under the system's temp folder, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() / ("snug_test_bpe_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = path / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
};

BpeTokenizer fixture(const TempDir& dir) {
  return BpeTokenizer::from_files(dir.write("vocab.json", vocab_object()), dir.write("merges.txt", merges_lines()));
}

Pieces pieces(std::string_view text) {
  Pieces out;
  for (std::string_view p : bpe::pretokenize(text)) out.emplace_back(p);
  return out;
}

Ids bytes_of(std::string_view s) {
  Ids ids;
  for (char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string tokenizer_json(bool pair_merges, const std::string& extra_model = "", const std::string& extra_root = "") {
  std::string merges = "[";
  for (size_t r = 0; r < kMerges.size(); ++r) {
    const std::u32string a = stand_in(kMerges[r].first), b = stand_in(kMerges[r].second);
    if (r) merges += ", ";
    merges += pair_merges ? "[" + json_str(a) + ", " + json_str(b) + "]" : json_str(a + U" " + b);
  }
  merges += "]";
  return "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
         " \"added_tokens\": [{\"id\": 272, \"content\": \"<|endoftext|>\", \"special\": true}],\n"
         " \"normalizer\": null,\n"
         " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
         "\"use_regex\": true},\n"
         " \"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"},\n" +
         extra_root + " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, " + extra_model +
         "\"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": null, \"fuse_unk\": false, "
         "\"byte_fallback\": false,\n  \"vocab\": " +
         vocab_object() + ",\n  \"merges\": " + merges + "}}";
}

}  // namespace

TEST_CASE("bpe byte_to_unicode: 188 printable bytes stand for themselves, the rest for U+0100 + n") {
  const auto& t = bpe::byte_to_unicode();
  int same = 0;
  for (int b = 0; b < 256; ++b) same += t[size_t(b)] == char32_t(b);
  CHECK(same == 188);
  CHECK(t[' '] == 0x120);   // 'Ġ'
  CHECK(t['\n'] == 0x10A);  // 'Ċ'
  CHECK(t[0] == 0x100);
  CHECK(t[0xAD] == 0x143);  // the soft hyphen is the last stand-in
  CHECK(t['a'] == 'a');
  CHECK(t[0xE9] == 0xE9);
}

TEST_CASE("bpe letter and number classes cover the scripts") {
  for (char32_t cp : {U'a', U'Z', U'é', U'ß', U'Ω', U'ж', U'Я', U'中', U'日', U'あ', U'한', U'ע', U'ب', U'ก'})
    CHECK(bpe::is_letter(cp));
  for (char32_t cp : {U'0', U'9', U'٣', U'½', U'²', U'Ⅷ', U'〇'}) CHECK(bpe::is_number(cp));
  for (char32_t cp : {U' ', U'!', U'\'', U'-', U'€', U'😀', U'\u3000'}) {
    CHECK_FALSE(bpe::is_letter(cp));
    CHECK_FALSE(bpe::is_number(cp));
  }
  for (char32_t cp : {U' ', U'\t', U'\n', U'\r', U'\u00A0', U'\u2003', U'\u3000'}) CHECK(bpe::is_space(cp));
  CHECK_FALSE(bpe::is_space(U'\u200B'));  // zero-width space is not White_Space
}

TEST_CASE("bpe pretokenize follows GPT-2's pattern") {
  CHECK(pieces("hello world") == Pieces{"hello", " world"});
  CHECK(pieces("he's don't we're I've I'm we'll I'd") ==
        Pieces{"he", "'s", " don", "'t", " we", "'re", " I", "'ve", " I", "'m", " we", "'ll", " I", "'d"});
  CHECK(pieces("HE'S") == Pieces{"HE", "'", "S"});  // the contractions are lowercase only
  CHECK(pieces("'sdf") == Pieces{"'s", "df"});      // 's matches even before more letters
  CHECK(pieces(" 's") == Pieces{" '", "s"});        // a space before the apostrophe: a symbol piece
  CHECK(pieces("a  b") == Pieces{"a", " ", " b"});  // the last space goes with the word
  CHECK(pieces("a   b") == Pieces{"a", "  ", " b"});
  CHECK(pieces("a  ") == Pieces{"a", "  "});  // trailing spaces stay together
  CHECK(pieces("\n\n") == Pieces{"\n\n"});
  CHECK(pieces("a\n\nb") == Pieces{"a", "\n", "\n", "b"});
  CHECK(pieces("a \nb") == Pieces{"a", " ", "\n", "b"});
  CHECK(pieces("x\tb") == Pieces{"x", "\t", "b"});
  CHECK(pieces("12345 67 a1") == Pieces{"12345", " 67", " a", "1"});
  CHECK(pieces("hi!! ?? (x)") == Pieces{"hi", "!!", " ??", " (", "x", ")"});
  CHECK(pieces("café 你好 世界") == Pieces{"café", " 你好", " 世界"});
  CHECK(pieces("Привет, мир") == Pieces{"Привет", ",", " мир"});
  CHECK(pieces("") == Pieces{});
  CHECK(pieces(" ") == Pieces{" "});
  // A byte that is not valid UTF-8 is a symbol of its own: never dropped, never merged into a letter.
  CHECK(pieces("ab\xff\xfe cd\xc3") == Pieces{"ab", "\xff\xfe", " cd", "\xc3"});
  CHECK(pieces("\xed\xa0\x80x") == Pieces{"\xed\xa0\x80", "x"});  // a surrogate, three invalid bytes
}

TEST_CASE("bpe encode: ids worked out by hand") {
  TempDir dir;
  BpeTokenizer tok = fixture(dir);
  CHECK(tok.vocab_size() == 272);
  CHECK(tok.merge_count() == 15);
  CHECK(tok.encode("hello") == Ids{hello});  // he, ll, hell, hello: four merges by rank
  CHECK(tok.encode("hello world") == Ids{hello, sp_world});
  CHECK(tok.encode("hell") == Ids{hell});
  CHECK(tok.encode("hel") == Ids{he, 'l'});
  CHECK(tok.encode("aaa") == Ids{aa, 'a'});  // leftmost first among equal ranks
  CHECK(tok.encode("aaaa") == Ids{aa, aa});
  CHECK(tok.encode("worlds") == Ids{'w', or_, ld, 's'});  // no space: Ġw never forms
  // Contractions.
  CHECK(tok.encode("he's") == Ids{he, apos_s});
  CHECK(tok.encode("HE'S") == Ids{'H', 'E', '\'', 'S'});
  CHECK(tok.encode("don't") == Ids{'d', 'o', 'n', '\'', 't'});
  // Spaces and newlines.
  CHECK(tok.encode("a  b") == Ids{'a', ' ', ' ', 'b'});
  CHECK(tok.encode("a   b") == Ids{'a', sp2, ' ', 'b'});
  CHECK(tok.encode("a  ") == Ids{'a', sp2});
  CHECK(tok.encode("   ") == Ids{sp2, ' '});
  CHECK(tok.encode("\n\n") == Ids{nl2});
  CHECK(tok.encode("a\n\nb") == Ids{'a', '\n', '\n', 'b'});
  // Digits.
  CHECK(tok.encode("12345") == Ids{d12, '3', '4', '5'});
  CHECK(tok.encode(" 12") == Ids{' ', d12});
  CHECK(tok.encode("a12") == Ids{'a', d12});
  // Unicode: é is bytes C3 A9, merged; 你好 has no merges, one id per byte.
  CHECK(tok.encode("café") == Ids{'c', 'a', 'f', e_acute});
  CHECK(tok.encode("你好") == bytes_of("你好"));
  CHECK(tok.encode("") == Ids{});
  // Invalid UTF-8 is encoded byte by byte and comes back as it was.
  CHECK(tok.encode("\xff"
                   "a") == Ids{0xff, 'a'});
  CHECK(tok.decode(tok.encode("x\xc3(\xff")) == "x\xc3(\xff");
  // The tensor form.
  Tensor t = tok.encode_tensor("hello world");
  CHECK(t.shape() == Shape{2});
  CHECK(t.to_vector<int64_t>() == Ids{hello, sp_world});
}

TEST_CASE("bpe vocabulary lookups and decode") {
  TempDir dir;
  BpeTokenizer tok = fixture(dir);
  CHECK(tok.token_to_id("Ġworld") == sp_world);
  CHECK(tok.token_to_id("Ċ") == '\n');
  CHECK(tok.token_to_id("\"") == '"');   // escaped in the JSON as \"
  CHECK(tok.token_to_id("\\") == '\\');  // and as a backslash escape
  CHECK(tok.token_to_id("😀") == 271);    // read from a surrogate pair
  CHECK(tok.id_to_token(sp_w) == "Ġw");
  CHECK(tok.id_to_token(e_acute) == "Ã©");
  CHECK(tok.decode({hello, sp_world, nl2}) == "hello world\n\n");
  CHECK(tok.decode({271}) == "😀");  // not made of stand-ins: its own UTF-8
  CHECK(tok.decode({}) == "");
  // A decode that splits a character gives its bytes, not U+FFFD.
  CHECK(tok.decode({0xc3}) == "\xc3");
}

TEST_CASE("bpe round trip on random text") {
  TempDir dir;
  BpeTokenizer tok = fixture(dir);
  std::mt19937 rng(7);
  // Code points from the ranges the pattern treats differently.
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {' ', ' '},       {'\n', '\n'},     {'\t', '\r'},       {'a', 'z'},         {'A', 'Z'},      {'0', '9'},
      {'!', '/'},       {'\'', '\''},     {0xA0, 0xFF},       {0x370, 0x3FF},     {0x400, 0x4FF},  {0x4E00, 0x4FFF},
      {0x3000, 0x303F}, {0x2000, 0x206F}, {0x1F300, 0x1F64F}, {0x10000, 0x1000F}, {0xE000, 0xE00F}};
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    const int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const auto& [lo, hi] = ranges[rng() % ranges.size()];
      s += utf8(lo + char32_t(rng() % (hi - lo + 1)));
    }
    std::string joined;
    for (std::string_view p : bpe::pretokenize(s)) {
      CHECK_FALSE(p.empty());
      joined += p;
    }
    CHECK(joined == s);
    CHECK(tok.decode(tok.encode(s)) == s);
  }
  // Any bytes at all, valid UTF-8 or not.
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(rng() % 32, '\0');
    for (char& c : s) c = char(rng() % 256);
    CHECK(tok.decode(tok.encode(s)) == s);
  }
}

TEST_CASE("bpe encode from several threads gives the single-thread ids") {
  TempDir dir;
  BpeTokenizer tok = fixture(dir);
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i)
    texts.push_back("hello world " + std::to_string(i * 12) + " he's café\n\n aaa" + std::string(size_t(i), 'l'));
  std::vector<Ids> want;
  {
    BpeTokenizer fresh = fixture(dir);  // its own cache
    for (const auto& t : texts) want.push_back(fresh.encode(t));
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i + size_t(w) * 7) % texts.size();
          if (tok.encode(texts[k]) != want[k]) ++bad;
        }
    });
  for (auto& t : threads) t.join();
  CHECK(bad == 0);
}

TEST_CASE("bpe tokenizer.json: both merge formats give the same ids") {
  TempDir dir;
  BpeTokenizer files = fixture(dir);
  BpeTokenizer strings = BpeTokenizer::from_tokenizer_json(dir.write("strings.json", tokenizer_json(false)));
  BpeTokenizer pairs = BpeTokenizer::from_tokenizer_json(dir.write("pairs.json", tokenizer_json(true)));
  for (std::string_view text : {"hello world", "he's café 12345\n\n", "a   b  ", "你好, Привет aaa"}) {
    CHECK(strings.encode(text) == files.encode(text));
    CHECK(pairs.encode(text) == files.encode(text));
  }
  // The added token has its id and decodes to its text; it is not searched for in text.
  CHECK(pairs.vocab_size() == 273);
  CHECK(pairs.token_to_id("<|endoftext|>") == 272);
  CHECK(pairs.decode({hello, 272}) == "hello<|endoftext|>");
  CHECK(pairs.encode("<|endoftext|>") == bytes_of("<|endoftext|>"));  // 13 bytes, none merged
}

TEST_CASE("bpe tokenizer.json options: add_prefix_space, ignore_merges") {
  TempDir dir;
  std::string j = tokenizer_json(true);
  const std::string off = "\"add_prefix_space\": false";
  j.replace(j.find(off), off.size(), "\"add_prefix_space\": true");
  BpeTokenizer prefixed = BpeTokenizer::from_tokenizer_json(dir.write("prefix.json", j));
  CHECK(prefixed.encode("world") == Ids{sp_world});
  CHECK(prefixed.encode(" world") == Ids{sp_world});  // already starts with a space
  CHECK(prefixed.decode(prefixed.encode("world")) == " world");

  // With ignore_merges a piece that is a token is taken whole; the fixture's
  // merges reach the same tokens, so a vocabulary with a token no merge makes shows it.
  std::string k = tokenizer_json(true, "\"ignore_merges\": true, ");
  const std::string smile = json_str(U"\U0001F600") + ": 271";
  k.replace(k.find(smile), smile.size(), smile + ", \"xyz\": 273");
  BpeTokenizer whole = BpeTokenizer::from_tokenizer_json(dir.write("ignore.json", k));
  CHECK(whole.encode("xyz hello") == Ids{273, ' ', hello});
  BpeTokenizer fixture_files = fixture(dir);
  CHECK(fixture_files.encode("xyz") == Ids{'x', 'y', 'z'});
}

TEST_CASE("bpe errors name the file and what is wrong") {
  TempDir dir;
  const std::string vocab = dir.write("vocab.json", vocab_object());
  auto with_merges = [&](const std::string& text) {
    return BpeTokenizer::from_files(vocab, dir.write("m.txt", "#version: 0.2\n" + text));
  };
  CHECK_THROWS_WITH_AS(with_merges("h e\nl l x\n"), doctest::Contains("m.txt: line 3: a merge is two tokens"), IOError);
  CHECK_THROWS_WITH_AS(with_merges("h e\nhe\n"), doctest::Contains("line 3"), IOError);
  CHECK_THROWS_WITH_AS(with_merges("h  e\n"), doctest::Contains("line 2"), IOError);
  CHECK_THROWS_WITH_AS(with_merges("h e\nhe zz\n"), doctest::Contains("m.txt line 3): \"zz\" is not in the vocabulary"),
                       ValueError);
  CHECK_THROWS_WITH_AS(with_merges("x y\n"), doctest::Contains("\"xy\" is not in the vocabulary"), ValueError);
  // Windows line endings and blank lines are fine.
  CHECK(with_merges("h e\r\n\r\nl l\r\n").merge_count() == 2);

  // JSON: cut short, malformed, a duplicate key, a bad id; the byte offset is named.
  const std::string whole = vocab_object();
  const std::string merges = dir.write("merges.txt", merges_lines());
  auto with_vocab = [&](const std::string& text) {
    return BpeTokenizer::from_files(dir.write("v.json", text), merges);
  };
  CHECK_THROWS_WITH_AS(with_vocab(whole.substr(0, 100)), doctest::Contains("v.json: not valid JSON at byte offset 100"),
                       IOError);
  CHECK_THROWS_WITH_AS(with_vocab("{\"a\": 1,, \"b\": 2}"), doctest::Contains("byte offset 8"), IOError);
  CHECK_THROWS_WITH_AS(with_vocab("{\"a\": 1, \"\\ud800\": 2}"), doctest::Contains("not valid JSON"), IOError);
  CHECK_THROWS_WITH_AS(with_vocab("{\"a\": 1, \"a\": 2}"), doctest::Contains("duplicate key \"a\""), IOError);
  CHECK_THROWS_WITH_AS(with_vocab("{\"a\": -1}"),
                       doctest::Contains("entry \"a\": the id must be a non-negative integer"), IOError);
  CHECK_THROWS_WITH_AS(with_vocab("{\"a\": 1.5}"), doctest::Contains("non-negative integer"), IOError);
  CHECK_THROWS_WITH_AS(with_vocab("[1, 2]"), doctest::Contains("must be a JSON object"), IOError);
  CHECK_THROWS_WITH_AS(with_vocab("{\"a\": 1, \"b\": 1}"), doctest::Contains("both have id 1"), ValueError);
  CHECK_THROWS_WITH_AS(with_vocab("{}"), doctest::Contains("the vocabulary is empty"), ValueError);
  CHECK_THROWS_AS(BpeTokenizer::from_files(dir.path.string() + "/missing.json", merges), IOError);
  CHECK_THROWS_AS(BpeTokenizer::from_files(vocab, dir.path.string() + "/missing.txt"), IOError);

  // tokenizer.json: settings that are not implemented are refused, by name.
  auto tj = [&](const std::string& text) { return BpeTokenizer::from_tokenizer_json(dir.write("t.json", text)); };
  auto edit = [](std::string j, const std::string& from, const std::string& to) {
    j.replace(j.find(from), from.size(), to);
    return j;
  };
  const std::string good = tokenizer_json(true);
  CHECK_THROWS_WITH_AS(tj(edit(good, "\"type\": \"BPE\"", "\"type\": \"WordPiece\"")),
                       doctest::Contains("model.type = \"WordPiece\" is not implemented"), IOError);
  CHECK_THROWS_WITH_AS(tj(edit(good, "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}")),
                       doctest::Contains("normalizer"), IOError);
  CHECK_THROWS_WITH_AS(tj(edit(good, "\"type\": \"ByteLevel\", \"add", "\"type\": \"Whitespace\", \"add")),
                       doctest::Contains("pre_tokenizer"), IOError);
  CHECK_THROWS_WITH_AS(tj(edit(good, "\"dropout\": null", "\"dropout\": 0.1")), doctest::Contains("model.dropout"),
                       IOError);
  CHECK_THROWS_WITH_AS(tj(edit(good, "\"byte_fallback\": false", "\"byte_fallback\": true")),
                       doctest::Contains("model.byte_fallback"), IOError);
  CHECK_THROWS_WITH_AS(tj(edit(good, "\"merges\": [[", "\"merges\": [[1, 2], [")),
                       doctest::Contains("model.merges[0] must be"), IOError);
  CHECK_THROWS_WITH_AS(tj(edit(tokenizer_json(false), "\"merges\": [\"", "\"merges\": [\"x y z\", \"")),
                       doctest::Contains("model.merges[0] must be"), IOError);
  CHECK_THROWS_WITH_AS(tj(edit(good, "\"merges\": [", "\"merges\": [[\"x\", \"y\"], ")),
                       doctest::Contains("(model.merges[0]): \"xy\" is not in the vocabulary"), ValueError);
  CHECK_THROWS_WITH_AS(tj(edit(good, "\"id\": 272", "\"id\": 256")), doctest::Contains("contradicts model.vocab"),
                       IOError);
  CHECK_THROWS_WITH_AS(tj("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, "),
                       doctest::Contains("t.json: not valid JSON at byte offset"), IOError);
  CHECK_THROWS_WITH_AS(tj("{\"version\": \"1.0\"}"), doctest::Contains("no \"model\" object"), IOError);

  // Using the tokenizer.
  BpeTokenizer tok = fixture(dir);
  CHECK_THROWS_WITH_AS(tok.decode({1, 9999}), doctest::Contains("id 9999 at position 1 is outside the vocabulary"),
                       IndexError);
  CHECK_THROWS_WITH_AS(tok.decode({-1}), doctest::Contains("id -1 at position 0"), IndexError);
  CHECK_THROWS_WITH_AS(tok.token_to_id("Ġnowhere"), doctest::Contains("\"Ġnowhere\" is not in the vocabulary"),
                       ValueError);
  CHECK_THROWS_AS(tok.id_to_token(272), IndexError);
  // A vocabulary with gaps in its ids, and without every byte.
  BpeTokenizer small({{"a", 0}, {"b", 2}, {"ab", 3}}, {{"a", "b"}}, {}, "small");
  CHECK(small.vocab_size() == 4);
  CHECK(small.encode("abab") == Ids{3, 3});
  CHECK_THROWS_WITH_AS(small.decode({1}), doctest::Contains("id 1 at position 0 is a gap"), IndexError);
  CHECK_THROWS_WITH_AS(small.encode("abz"), doctest::Contains("byte 122 at offset 2 has no token"), ValueError);
  CHECK_THROWS_WITH_AS(BpeTokenizer({{"a", 0}, {"a", 1}}, {}, {}, "dup"), doctest::Contains("appears twice"),
                       ValueError);
}

// SPDX-License-Identifier: MIT
// TokenFile: the .bin layout (little-endian, no header), windows, random
// batches, the Dataset view through a DataLoader, and corrupt files.
#include <doctest/doctest.h>

#include <snug/data/dataloader.h>
#include <snug/data/token_file.h>
#include "data_files.h"

using namespace snug;
using namespace snug::data;
using snug::test::TempDir;
using snug::test::write_bytes;

TEST_CASE("write and read a uint16 and a uint32 token file") {
  TempDir d("tokens");
  std::vector<int64_t> toks;
  for (int64_t i = 0; i < 1000; ++i) toks.push_back((i * 7919) % 60000);
  write_token_file(d.file("a.bin"), toks, 2);
  CHECK(std::filesystem::file_size(d.file("a.bin")) == 2000);
  TokenFile f(d.file("a.bin"));
  CHECK(f.size() == 1000);
  CHECK(f.token(3) == toks[3]);
  CHECK(f.read(0, 1000).to_vector<int64_t>() == toks);
  auto [x, y] = f.window(10, 5);
  CHECK(x.to_vector<int64_t>() == std::vector<int64_t>(toks.begin() + 10, toks.begin() + 15));
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>(toks.begin() + 11, toks.begin() + 16));
  // The raw bytes are little-endian: token 1 = 7919 = 0x1eef.
  TokenFile raw(d.file("a.bin"));
  CHECK(raw.token(1) == 0x1eef);
  write_token_file(d.file("b.bin"), {70000, 1, 2}, 4);
  CHECK(TokenFile(d.file("b.bin"), 4).token(0) == 70000);
  CHECK_THROWS_WITH_AS(write_token_file(d.file("c.bin"), {1, 70000}, 2), doctest::Contains("at position 1"),
                       ValueError);
}

TEST_CASE("random batches: x and y shifted by one, reproducible") {
  TempDir d("tokens_rb");
  std::vector<int64_t> toks(5000);
  for (int64_t i = 0; i < 5000; ++i) toks[size_t(i)] = i % 50000;
  write_token_file(d.file("t.bin"), toks);
  TokenFile f(d.file("t.bin"));
  Generator g(3);
  auto [x, y] = f.random_batch(8, 16, g);
  CHECK(x.shape() == Shape{8, 16});
  std::vector<int64_t> xv = x.to_vector<int64_t>(), yv = y.to_vector<int64_t>();
  for (size_t k = 0; k < xv.size(); ++k) CHECK(yv[k] == xv[k] + 1);  // the file counts up
  Generator g2(3);
  CHECK(f.random_batch(8, 16, g2).first.to_vector<int64_t>() == xv);
  CHECK(f.random_batch(8, 16, g2).first.to_vector<int64_t>() != xv);  // the generator moved on
}

TEST_CASE("text -> token file -> DataLoader of random windows") {
  TempDir d("tokens_text");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog\n";
  write_bytes(d.file("in.txt"), std::vector<uint8_t>(text.begin(), text.end()));
  CharTokenizer tok = CharTokenizer::fit(text);
  CHECK(write_token_file_from_text(d.file("in.txt"), d.file("in.bin"), tok) == int64_t(text.size()));
  auto file = std::make_shared<TokenFile>(d.file("in.bin"), 2, tok.vocab_size());
  auto ds = std::make_shared<RandomWindowDataset>(file, 32, 64);
  std::vector<std::string> seen[2];
  for (int workers : {0, 3}) {
    DataLoader loader(ds, {.batch_size = 16, .seed = 9, .num_workers = workers});
    for (Batch& b : loader) {
      CHECK(b[0].shape() == Shape{16, 32});
      for (int64_t r = 0; r < 16; ++r) {
        const std::string xs = tok.decode(b[0].select(0, r)), ys = tok.decode(b[1].select(0, r));
        CHECK(text.find(xs + ys.back()) != std::string::npos);  // a real window, y = x shifted by one
        seen[workers ? 1 : 0].push_back(xs);
      }
    }
  }
  CHECK(seen[0] == seen[1]);  // the same windows for any number of workers
}

TEST_CASE("truncated or corrupt token files name the file and the offset") {
  TempDir d("tokens_bad");
  const std::string f = d.file("bad.bin");
  write_bytes(f, {1, 0, 2, 0, 3});
  CHECK_THROWS_WITH_AS(TokenFile{f}, doctest::Contains((f + ": truncated token at offset 4").c_str()), IOError);
  write_bytes(f, {1, 0, 2, 0, 3, 0});
  CHECK_THROWS_WITH_AS(TokenFile(f, 4), doctest::Contains("truncated token at offset 4"), IOError);
  write_bytes(f, {});
  CHECK_THROWS_WITH_AS(TokenFile{f}, doctest::Contains("empty token file"), IOError);
  // A token outside the vocabulary: the 3rd token (byte offset 4) is 0x0100 = 256.
  write_bytes(f, {1, 0, 2, 0, 0, 1, 3, 0});
  TokenFile t(f, 2, 65);
  CHECK(t.token(1) == 2);
  CHECK_THROWS_WITH_AS(t.read(0, 4), doctest::Contains((f + ": token 256 at offset 4").c_str()), IOError);
  CHECK_THROWS_AS(t.read(2, 5), IndexError);
  CHECK_THROWS_WITH_AS(TokenFile(d.file("missing.bin")), doctest::Contains("cannot open"), IOError);
}

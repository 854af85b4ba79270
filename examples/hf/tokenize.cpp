// SPDX-License-Identifier: MIT
// snug-tokenize: encodes a text file with GPT-2's byte-level BPE (data/bpe.h),
// so that Python tools (tools/bpe_parity.py) can compare snug's ids with
// Hugging Face's without linking anything.
//
//   snug-tokenize --vocab vocab.json --merges merges.txt --text FILE [--json] [--decode]
//   snug-tokenize --tokenizer-json tokenizer.json --text FILE [--json] [--decode]
//
// Prints the ids on one line (or, with --json, {"ids": [...], "count": N}).
// --decode also decodes the ids and checks that they give the text back: exit
// status 1, with the first differing byte on stderr, when they do not.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "common/cli.h"

#include <snug/data/bpe.h>
#include <snug/data/text.h>

using namespace snug;

int main(int argc, char** argv) {
  std::string vocab, merges, tokenizer_json, text_file = "-";
  bool json = false, decode = false;
  CLI::App app{"Encodes a text with GPT-2's byte-level BPE, from vocab.json + merges.txt or a tokenizer.json.",
               "snug-tokenize"};
  cli::init(app);
  app.add_option("--vocab", vocab, "GPT-2's vocab.json (with --merges)")->type_name("FILE");
  app.add_option("--merges", merges, "GPT-2's merges.txt (with --vocab)")->type_name("FILE");
  app.add_option("--tokenizer-json", tokenizer_json, "a Hugging Face tokenizer.json (model.type BPE)")
      ->type_name("FILE");
  app.add_option("--text", text_file, "the text to encode; - reads stdin")->type_name("FILE");
  app.add_flag("--json", json, "stdout holds one JSON line with the ids and their count");
  app.add_flag("--decode", decode, "decode the ids again and check that the text comes back (exit 1 if not)");
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    SNUG_FLAG_CHECK(vocab.empty() == merges.empty(), "--vocab and --merges go together (got only ",
                    vocab.empty() ? "--merges" : "--vocab", ")");
    SNUG_FLAG_CHECK(vocab.empty() != tokenizer_json.empty(),
                    "give either --vocab FILE --merges FILE or --tokenizer-json FILE",
                    tokenizer_json.empty() ? "" : " (not both)");
    const data::BpeTokenizer tok = tokenizer_json.empty() ? data::BpeTokenizer::from_files(vocab, merges)
                                                          : data::BpeTokenizer::from_tokenizer_json(tokenizer_json);
    std::string text;
    if (text_file == "-")
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    else
      text = data::read_text_file(text_file);
    const std::vector<int64_t> ids = tok.encode(text);

    bool round_trip = true;
    if (decode) {
      const std::string back = tok.decode(ids);
      if (back != text) {
        round_trip = false;
        size_t i = 0;
        while (i < back.size() && i < text.size() && back[i] == text[i]) ++i;
        std::fprintf(stderr,
                     "snug-tokenize: decode(encode(text)) differs from the text at byte %zu (%zu bytes vs %zu)\n", i,
                     back.size(), text.size());
      }
    }
    std::string line = json ? "{\"ids\": [" : "";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += json ? ", " : " ";
      line += std::to_string(ids[i]);
    }
    if (json) {
      line += "], \"count\": " + std::to_string(ids.size());
      if (decode) line += std::string(", \"round_trip\": ") + (round_trip ? "true" : "false");
      line += "}";
    }
    std::printf("%s\n", line.c_str());
    if (!json)
      std::fprintf(stderr, "snug-tokenize: %zu bytes -> %zu tokens (vocabulary %lld, %lld merges)%s\n", text.size(),
                   ids.size(), static_cast<long long>(tok.vocab_size()), static_cast<long long>(tok.merge_count()),
                   decode ? (round_trip ? ", decode gives the text back" : ", decode DIFFERS") : "");
    return round_trip ? 0 : 1;
  } catch (const std::exception& e) {
    return cli::exit_status("snug-tokenize", e);
  }
}

// SPDX-License-Identifier: MIT
// libFuzzer target: token files (data/token_file.h): open (size checks, the
// mmap) and reads with a vocabulary check. The first byte picks the token
// width (2 or 4 bytes) and the vocabulary size; the rest is the file.
#include <cstdint>
#include <string>

#include <snug/base/error.h>
#include <snug/data/token_file.h>
#include "fuzz_util.h"

using namespace snug;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string u16;
  for (int t : {1, 2, 3, 64, 65, 0}) u16 += std::string{static_cast<char>(t), 0};
  fuzz::write_seed("u16_vocab65.bin", std::string(1, '\x02') + u16);
  std::string u32;
  for (int t : {5, 6, 7}) u32 += std::string{static_cast<char>(t), 0, 0, 0};
  fuzz::write_seed("u32.bin", std::string(1, '\x85') + u32);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int width = (data[0] & 0x80) ? 4 : 2;
  const int64_t vocab = (data[0] & 0x7f) == 0 ? 0 : 60 + (data[0] & 0x7f);
  const std::string& path = fuzz::scratch_file(data + 1, size - 1, ".bin");
  try {
    data::TokenFile f(path, width, vocab);
    const int64_t n = f.size();
    if (n > 0) {
      (void)f.read(0, n < 64 ? n : 64);
      (void)f.token(n - 1);
    }
    (void)f.read(n, 1);  // past the end: must be an error, not a read
  } catch (const Error&) {
  }
  return 0;
}

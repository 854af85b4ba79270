// SPDX-License-Identifier: MIT
// libFuzzer target: the allocator settings parser (memory/settings.h), the
// string users give in SNUG_ALLOC_CONF. A string that parses must print back
// to settings that parse to the same values.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <snug/base/error.h>
#include <snug/memory/settings.h>
#include "fuzz_util.h"

using namespace snug;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::write_seed("defaults.txt", memory::AllocatorSettings{}.to_string());
  fuzz::write_seed("some.txt", "round=512,small_threshold=1MiB,max_split_size=64MiB,fit=first");
  fuzz::write_seed("growth.txt", "large_growth=0,large_segment=40MiB,large_round=4MiB");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string conf(reinterpret_cast<const char*>(data), size);
  memory::AllocatorSettings s;
  try {
    s = memory::parse_settings(conf);
  } catch (const Error&) {
    return 0;
  }
  // Round trip: what parsed is valid and prints back to itself.
  if (!(memory::parse_settings(s.to_string()) == s)) std::abort();
  return 0;
}

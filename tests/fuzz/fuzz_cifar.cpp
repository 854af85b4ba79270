// SPDX-License-Identifier: MIT
// libFuzzer target: the CIFAR-10 binary batch reader (data/cifar.h).
#include <cstdint>
#include <string>

#include <snug/base/error.h>
#include <snug/data/cifar.h>
#include "fuzz_util.h"

using namespace snug;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string rec(1 + 3 * 32 * 32, '\x40');
  rec[0] = 3;
  fuzz::write_seed("two_records.bin", rec + rec);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::scratch_file(data, size, ".bin");
  try {
    (void)data::read_cifar10_batch(path);
  } catch (const Error&) {
  }
  return 0;
}

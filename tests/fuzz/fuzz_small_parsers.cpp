// SPDX-License-Identifier: MIT
// libFuzzer target: the small parsers of command-line and config text: byte
// sizes ("150MiB"), dtypes, devices, device lists, placement policies and
// pipeline schedules. The first byte picks the parser.
#include <cstdint>
#include <string>

#include <snug/base/device.h>
#include <snug/base/error.h>
#include <snug/core/dtype.h>
#include <snug/nn/planner.h>
#include <snug/parallel/placement.h>
#include "fuzz_util.h"

using namespace snug;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::write_seed("bytes.txt", std::string("\0", 1) + "1.5GiB");
  fuzz::write_seed("dtype.txt",
                   "\x01"
                   "bfloat16");
  fuzz::write_seed("device.txt",
                   "\x02"
                   "cpu:3");
  fuzz::write_seed("devices.txt",
                   "\x03"
                   "cpu:1,cpu:2,cuda:0");
  fuzz::write_seed("schedule.txt",
                   "\x04"
                   "1f1b");
  fuzz::write_seed("policy.txt",
                   "\x05"
                   "memory");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string s(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 6) {
      case 0: {
        const int64_t b = nn::parse_bytes(s);
        if (b < 0) std::abort();  // sizes are never negative
        break;
      }
      case 1:
        (void)parse_dtype(s);
        break;
      case 2:
        (void)Device(s);
        break;
      case 3:
        (void)parallel::parse_devices(s);
        break;
      case 4:
        (void)parallel::parse_schedule(s);
        break;
      case 5:
        (void)parallel::parse_policy(s);
        break;
    }
  } catch (const Error&) {
  }
  return 0;
}

// SPDX-License-Identifier: MIT
#include "vit/rss.h"

#include <fstream>
#include <string>

namespace vit_example {

namespace {

// "VmRSS:     1234 kB" -> 1234 * 1024; 0 if the field is missing.
int64_t status_field(const char* name) {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == name) {
      int64_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    std::getline(f, key);
  }
  return 0;
}

}  // namespace

bool rss_available() { return status_field("VmRSS:") > 0; }
int64_t rss_bytes() { return status_field("VmRSS:"); }
int64_t rss_peak_bytes() { return status_field("VmHWM:"); }

bool reset_rss_peak() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return bool(f);
}

}  // namespace vit_example

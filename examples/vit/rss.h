// SPDX-License-Identifier: MIT
// The process's resident set, from /proc/self/status (Linux): what the data
// path's bound is checked against (docs/vit.md). Elsewhere every figure is 0
// and available() is false.
#pragma once
#include <cstdint>

namespace vit_example {

bool rss_available();
int64_t rss_bytes();       // VmRSS now
int64_t rss_peak_bytes();  // VmHWM: the most since start or reset_rss_peak()
// Sets VmHWM to the current VmRSS (writes "5" to /proc/self/clear_refs);
// false where the kernel does not allow it.
bool reset_rss_peak();

}  // namespace vit_example

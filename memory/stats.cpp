// SPDX-License-Identifier: MIT
#include <snug/memory/stats.h>

#include <cstdio>

namespace snug::memory {

std::string format_bytes(std::size_t n) {
  if (n == SIZE_MAX) return "unlimited";
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%zu B", n);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace snug::memory

// SPDX-License-Identifier: MIT
// A preload shim for tests only (tests/CMakeLists.txt, check_maps.cmake): at
// exit it copies the process's /proc/self/maps and the VmHWM / VmRSS / VmPeak /
// VmSize lines of /proc/self/status into the file named by SNUG_MAPS_OUT, so a ctest can see
// what a finished program mapped and how much of it was resident at its peak
// (LD_PRELOAD=libsnug_maps_at_exit.so SNUG_MAPS_OUT=f program ...).
// Plain C library calls only: the shim adds nothing the program would not map.
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// Copies the lines of `path` that start with one of `prefixes` (all lines when
// prefixes is null) to `out`.
void append(std::FILE* out, const char* path, const char* const* prefixes) {
  std::FILE* in = std::fopen(path, "r");
  if (!in) return;
  char line[4096];
  while (std::fgets(line, sizeof line, in)) {
    bool keep = prefixes == nullptr;
    for (const char* const* p = prefixes; p && *p && !keep; ++p) keep = std::strncmp(line, *p, std::strlen(*p)) == 0;
    if (keep) std::fputs(line, out);
  }
  std::fclose(in);
}

__attribute__((destructor)) void write_maps_at_exit() {
  const char* path = std::getenv("SNUG_MAPS_OUT");
  if (!path || !*path) return;
  std::FILE* out = std::fopen(path, "w");
  if (!out) return;
  // "VmHWM:   12345 kB": peak and current resident memory, peak and current address space.
  static const char* const kStatus[] = {"VmHWM:", "VmRSS:", "VmPeak:", "VmSize:", nullptr};
  append(out, "/proc/self/status", kStatus);
  append(out, "/proc/self/maps", nullptr);
  std::fclose(out);
}

}  // namespace

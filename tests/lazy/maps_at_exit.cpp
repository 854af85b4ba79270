// SPDX-License-Identifier: MIT
// A preload shim for tests only (tests/CMakeLists.txt, check_maps.cmake): at
// exit it copies the process's /proc/self/maps and the VmHWM / VmRSS lines of
// /proc/self/status into the file named by SNUG_MAPS_OUT, so a ctest can see
// what a finished program mapped and how much of it was resident at its peak
// (LD_PRELOAD=libsnug_maps_at_exit.so SNUG_MAPS_OUT=f program ...).
// Plain C library calls only: the shim adds nothing the program would not map.
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

void append(std::FILE* out, const char* path, const char* only_prefix_a, const char* only_prefix_b) {
  std::FILE* in = std::fopen(path, "r");
  if (!in) return;
  char line[4096];
  while (std::fgets(line, sizeof line, in)) {
    if (only_prefix_a && std::strncmp(line, only_prefix_a, std::strlen(only_prefix_a)) != 0 &&
        std::strncmp(line, only_prefix_b, std::strlen(only_prefix_b)) != 0)
      continue;
    std::fputs(line, out);
  }
  std::fclose(in);
}

__attribute__((destructor)) void write_maps_at_exit() {
  const char* path = std::getenv("SNUG_MAPS_OUT");
  if (!path || !*path) return;
  std::FILE* out = std::fopen(path, "w");
  if (!out) return;
  append(out, "/proc/self/status", "VmHWM:", "VmRSS:");  // "VmHWM:   12345 kB"
  append(out, "/proc/self/maps", nullptr, nullptr);
  std::fclose(out);
}

}  // namespace

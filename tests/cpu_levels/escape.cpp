// SPDX-License-Identifier: MIT
// A program with a deliberate escape for tools/check_cpu_levels.py to find
// (ctest cpu_levels_finds_escape): built with -mavx2, its dot() is outside
// the snug::avx2 namespace and main, baseline code, calls it.
#include <cstdio>

__attribute__((noinline)) float dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];  // vectorized with ymm registers at -O3 -mavx2
  return s;
}

int main(int argc, char**) {
  float a[64], b[64];
  for (int i = 0; i < 64; ++i) a[i] = b[i] = float(i + argc);
  std::printf("%g\n", double(dot(a, b, 64)));
  return 0;
}

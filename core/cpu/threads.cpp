// SPDX-License-Identifier: MIT
#include <snug/core/cpu/threads.h>

#include <algorithm>
#include <atomic>

#include <omp.h>

#include <snug/base/error.h>
#include <snug/core/cpu/gemm_eigen.h>

namespace snug::cpu_threads {

namespace {
std::atomic<int> g_num_threads{0};  // 0: not set, follow omp_get_max_threads()
}

void set_num_threads(int n) {
  SNUG_CHECK(n >= 1, ValueError, "set_num_threads: expected n >= 1, got ", n);
  g_num_threads.store(n);
  omp_set_num_threads(n);
  eigen_gemm::set_threads(n);
}

int get_num_threads() {
  const int n = g_num_threads.load();
  return n > 0 ? n : std::max(1, omp_get_max_threads());
}

}  // namespace snug::cpu_threads

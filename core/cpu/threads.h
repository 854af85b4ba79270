// SPDX-License-Identifier: MIT
// snug's CPU thread count, one for every CPU level (compiled once, outside
// them: NOTE [ CPU levels ] in core/cpu/level.h).
#pragma once

namespace snug::cpu_threads {

// Defaults to omp_get_max_threads() (which honours OMP_NUM_THREADS).
// set_num_threads(n) also calls omp_set_num_threads(n), so other OpenMP loops
// in snug agree, and sets Eigen's count. n < 1 throws snug::ValueError.
void set_num_threads(int n);
int get_num_threads();

}  // namespace snug::cpu_threads

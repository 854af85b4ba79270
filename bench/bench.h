// SPDX-License-Identifier: MIT
// snug-bench: one program, one subcommand per benchmark. Each bench_*.cpp
// registers its subcommand with SNUG_BENCH(name, "help") and gets an Args.
// With --json a benchmark prints exactly one JSON line on stdout at the end.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace snug::bench {

// Flags: --key value or --flag; positional arguments kept in order.
struct Args {
  std::map<std::string, std::string> kv;
  std::vector<std::string> positional;
  bool has(const std::string& k) const { return kv.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def) const;
  long long get_int(const std::string& k, long long def) const;   // throws snug::ValueError if not an integer
  double get_double(const std::string& k, double def) const;      // throws snug::ValueError if not a number
  bool json() const { return has("json"); }
};

using BenchFn = std::function<int(const Args&)>;
struct Registry {
  static std::map<std::string, std::pair<BenchFn, std::string>>& all();
};
struct Registrar {
  Registrar(const char* name, const char* help, BenchFn fn) {
    Registry::all()[name] = {std::move(fn), help};
  }
};

// GFLOP/s of `threads` threads each running `iters` steps of 12 independent
// float32 FMA chains at once (bench_fma.cpp): the machine's FMA peak, measured.
double fma_peak_gflops(int threads, long long iters);

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace snug::bench

#define SNUG_BENCH_CAT2(a, b) a##b
#define SNUG_BENCH_CAT(a, b) SNUG_BENCH_CAT2(a, b)
// SNUG_BENCH(gemm, "float32 NxNxN GEMM") { ... use args ...; return 0; }
#define SNUG_BENCH(name, help)                                                          \
  static int SNUG_BENCH_CAT(bench_fn_, name)(const ::snug::bench::Args& args);         \
  static ::snug::bench::Registrar SNUG_BENCH_CAT(bench_reg_, name)(#name, help,       \
                                                                   SNUG_BENCH_CAT(bench_fn_, name)); \
  static int SNUG_BENCH_CAT(bench_fn_, name)([[maybe_unused]] const ::snug::bench::Args& args)

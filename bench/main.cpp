// SPDX-License-Identifier: MIT
// snug-bench SUBCOMMAND [flags] -- see bench/bench.h.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "bench/bench.h"
#include <snug/core/error.h>

namespace snug::bench {

std::map<std::string, std::pair<BenchFn, std::string>>& Registry::all() {
  static std::map<std::string, std::pair<BenchFn, std::string>> m;
  return m;
}

std::string Args::get(const std::string& k, const std::string& def) const {
  auto it = kv.find(k);
  return it == kv.end() ? def : it->second;
}
long long Args::get_int(const std::string& k, long long def) const {
  auto it = kv.find(k);
  if (it == kv.end()) return def;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  SNUG_CHECK(end && *end == 0 && !it->second.empty(), ValueError, "snug-bench: --", k,
             " expects an integer, got \"", it->second, "\"");
  return v;
}
double Args::get_double(const std::string& k, double def) const {
  auto it = kv.find(k);
  if (it == kv.end()) return def;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  SNUG_CHECK(end && *end == 0 && !it->second.empty(), ValueError, "snug-bench: --", k,
             " expects a number, got \"", it->second, "\"");
  return v;
}

}  // namespace snug::bench

int main(int argc, char** argv) {
  using namespace snug::bench;
  auto& reg = Registry::all();
  if (argc < 2 || reg.count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: snug-bench SUBCOMMAND [--flag value ...] [--json]\n");
    for (auto& [name, e] : reg) std::fprintf(stderr, "  %-10s %s\n", name.c_str(), e.second.c_str());
    return argc < 2 ? 2 : (std::fprintf(stderr, "unknown subcommand \"%s\"\n", argv[1]), 2);
  }
  Args a;
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      std::string key = s.substr(2), val;
      auto eq = key.find('=');
      if (eq != std::string::npos) {
        val = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
        val = argv[++i];
      }
      a.kv[key] = val;
    } else {
      a.positional.push_back(s);
    }
  }
  try {
    return reg[argv[1]].first(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "snug-bench %s: %s\n", argv[1], e.what());
    return 1;
  }
}

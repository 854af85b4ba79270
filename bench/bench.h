// SPDX-License-Identifier: MIT
// snug-bench: one program, one subcommand per benchmark. Each bench_*.cpp
// registers its subcommand with SNUG_BENCH(name, "help", flags...) and gets
// an Args holding the parsed flags. The flags are declared where the
// subcommand is (their names, defaults, checks and meanings), so that
// `snug-bench NAME --help` lists them and CLI11 checks them before the
// benchmark runs (docs/programs.md): an unknown flag or a bad value exits 2
// naming the flag. Every subcommand takes --json: stdout then holds exactly
// one JSON line at the end, and any other text goes to stderr.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/cli.h"

namespace snug::nn::models {
struct GPTConfig;
}

namespace snug::bench {

// One flag of a subcommand: --name VALUE (or a bare --name for a switch), or a
// positional argument. Made with the functions below.
struct Flag {
  std::string name;  // without "--"
  std::string help;
  std::string default_value;            // as text; "" when there is none
  std::optional<CLI::Validator> check;  // checks (and may rewrite) the value
  enum class Kind { value, switch_, positional } kind = Kind::value;
  std::string type_name;  // shown in --help when there is no check ("FILE")
};
// --name INT, at least lo.
Flag int_flag(const std::string& name, long long def, const std::string& help, long long lo = 1);
// --name INT, at least lo, with no default: read it only when has(name).
Flag int_flag_unset(const std::string& name, const std::string& help, long long lo = 1);
// --name NUMBER in the range.
Flag num_flag(const std::string& name, double def, const std::string& help, cli::Range range = {});
// --name TEXT (a path, a list); def "" means none.
Flag text_flag(const std::string& name, const std::string& def, const std::string& help,
               const std::string& type_name = "TEXT");
// --name, one of `choices`.
Flag choice_flag(const std::string& name, const std::string& def, std::vector<std::string> choices,
                 const std::string& help);
// --name BYTES: "4096", "64MiB", ... (cli::bytes); get_int() reads the byte count.
Flag bytes_flag(const std::string& name, const std::string& def, const std::string& help);
// --name with no value: has("name") says whether it was given.
Flag switch_flag(const std::string& name, const std::string& help);
// A required positional argument, read with get(name).
Flag positional(const std::string& name, const std::string& help);

// The parsed flags of the subcommand that runs. Reading a flag the subcommand
// did not declare is a programming error (std::logic_error).
struct Args {
  std::map<std::string, std::string> values;  // every declared flag: given or default
  std::set<std::string> given;                // the flags on the command line
  bool has(const std::string& k) const;       // given on the command line (a switch: present)
  std::string get(const std::string& k) const;
  long long get_int(const std::string& k) const;
  double get_double(const std::string& k) const;
  bool json() const { return has("json"); }
};

using BenchFn = std::function<int(const Args&)>;
struct Bench {
  BenchFn fn;
  std::string help;
  std::vector<Flag> flags;
};
struct Registry {
  static std::map<std::string, Bench>& all();
};
struct Registrar {
  Registrar(const char* name, const char* help, std::vector<Flag> flags, BenchFn fn) {
    Registry::all()[name] = {std::move(fn), help, std::move(flags)};
  }
};

// GPTConfig::validate, its error a FlagError (exit 2): the GPT benchmarks
// build their model from flags (--layers, --embd, --heads, --block).
void check_gpt_flags(const nn::models::GPTConfig& cfg);

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
// SNUG_BENCH(gemm, "float32 NxNxN GEMM", int_flag("n", 1024, "size")) { ... args.get_int("n") ...; return 0; }
// (--json is added to every subcommand.)
#define SNUG_BENCH(name, help, ...)                                                                 \
  static int SNUG_BENCH_CAT(bench_fn_, name)(const ::snug::bench::Args& args);                      \
  static ::snug::bench::Registrar SNUG_BENCH_CAT(bench_reg_, name)(                                 \
      #name, help, std::vector<::snug::bench::Flag>{__VA_ARGS__}, SNUG_BENCH_CAT(bench_fn_, name)); \
  static int SNUG_BENCH_CAT(bench_fn_, name)([[maybe_unused]] const ::snug::bench::Args& args)

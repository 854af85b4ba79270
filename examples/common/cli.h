// SPDX-License-Identifier: MIT
// One command-line convention for every snug program (docs/programs.md):
// charlm, mnist, demo and snug-bench with each of its subcommands parse their
// flags with CLI11 through these few functions, so that
//   - `--help` prints every flag with its default and meaning and exits 0;
//   - an unknown flag, a malformed value (`--lr abc`, `--steps 1.5`) or a value
//     out of range (`--steps -3`) is an error naming the flag, on stderr, with
//     exit status 2; so is a combination of flags that cannot work, which the
//     program reports with SNUG_FLAG_CHECK after parsing;
//   - `--flag value` and `--flag=value` both work.
//
// Typical use:
//   CLI::App app{"what the program does", "prog"};
//   snug::cli::init(app);
//   int64_t steps = 3000;
//   app.add_option("--steps", steps, "training steps")->transform(snug::cli::integer(1));
//   if (int rc = snug::cli::parse(app, argc, argv); rc >= 0) return rc;
//   try { ... SNUG_FLAG_CHECK(ok, "--a and --b ...") ... }
//   catch (const std::exception& e) { return snug::cli::exit_status("prog", e); }
//
// This is a helper of the programs, not of libsnug: CLI11 is a private
// dependency of the programs only (cmake/cli.cmake).
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

#include <snug/base/error.h>

namespace snug::cli {

// NOTE [ Program exit status ]: 0 success (and --help); 2 the command line is
// wrong (an unknown flag, a malformed or out-of-range value, flags that do not
// go together); 1 anything that went wrong while running (a file that cannot
// be read, a loss that diverged, out of memory). A FlagError is what a
// program throws for the second kind after parsing, so that exit_status()
// returns 2 for it.
class FlagError : public ValueError {
 public:
  using ValueError::ValueError;
};

template <class... Args>
[[noreturn]] void fail(const Args&... parts) {
  throw FlagError(str(parts...));
}

// Throws a FlagError (exit 2) with the message unless cond holds; the message
// should name the flags involved ("--accum 3 must divide --batch 16").
#define SNUG_FLAG_CHECK(cond, ...)               \
  do {                                           \
    if (!(cond)) ::snug::cli::fail(__VA_ARGS__); \
  } while (0)

// The convention's settings on a (sub)command: every option's help shows its
// default, and the help text is laid out by the convention's formatter.
// Subcommands added afterwards inherit both.
void init(CLI::App& app);

// Parses argv into app. Returns -1 when the program should go on, otherwise
// the status main() should return: 0 after printing --help (on stdout), 2
// after printing a command-line error naming the flag (on stderr).
int parse(CLI::App& app, int argc, char** argv);

// Prints an exception that escaped the program as "prog: error: ..." on
// stderr and returns the exit status (NOTE [ Program exit status ]): 2 for a
// FlagError, 1 for anything else.
int exit_status(const std::string& prog, const std::exception& e);

// Validators, given to Option::transform (they rewrite the value into the
// canonical form the option's variable is read from) or Option::check.
//
// A decimal integer in [lo, hi]. Written as a transform it also keeps CLI11's
// base-0 conversion from reading "010" as octal 8, and it catches overflow.
CLI::Validator integer(int64_t lo = std::numeric_limits<int64_t>::min(),
                       int64_t hi = std::numeric_limits<int64_t>::max());
// A finite decimal number in a range: number() any, number({.lo = 0}) >= 0,
// number({.lo = 0, .lo_open = true}) > 0, number({.lo = 0, .hi = 1, .hi_open = true}) in [0, 1).
struct Range {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
};
CLI::Validator number(Range r = {});
// A byte count: "4096", "150MiB", "1.5G", "2GB" (nn::parse_bytes); the value
// becomes the number of bytes, so the option can be bound to an integer.
CLI::Validator bytes();
// A value `accept` takes: it throws a snug::Error whose message says what is
// wrong. For the library's own parsers (parallel::parse_devices, ...).
CLI::Validator accepted_by(std::function<void(const std::string&)> accept, const std::string& description);

// --device: the one device a program trains on: "cpu", "cuda", "cuda:N", or
// a virtual CPU device "cpu:N" (its own memory pool, docs/placement.md; a
// run on cpu:1 shows that nothing stays behind on cpu:0). The name must
// parse (Device::parse) and a CUDA device must exist, so that `--device cuda`
// on a machine without a GPU stops at once with exit 2 and says why (no GPU,
// or a build without the CUDA backend). "cuda" means cuda:0.
CLI::Validator device();

}  // namespace snug::cli

// SPDX-License-Identifier: MIT
#include "common/cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include <snug/base/device.h>
#include <snug/core/backend.h>
#include <snug/nn/planner.h>  // nn::parse_bytes

namespace snug::cli {
namespace {

// Help lines of the form
//   --steps INT >= 1       training steps [default: 3000]
// The value's form comes first (the validator's description when there is
// one, else CLI11's type name), the default at the end of the meaning, where
// a reader looks for it.
class Formatter : public CLI::Formatter {
 public:
  Formatter() { column_width(34); }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    if (opt->get_type_size() == 0) return "";  // a flag
    std::string type = opt->get_type_name();   // "INT", or "INT:<validator>"
    if (const auto colon = type.find(':'); colon != std::string::npos) type = type.substr(colon + 1);
    std::string out = type.empty() ? "" : " " + type;
    if (opt->get_required()) out += " (required)";
    return out;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string d = opt->get_description();
    if (!opt->get_default_str().empty()) d += " [default: " + opt->get_default_str() + "]";
    return d;
  }
};

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

// Shortest text that reads back as v ("1e-3" stays readable as 0.001).
std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Levenshtein distance, for "did you mean --steps?".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "unknown flag --stpes (did you mean --steps?)" or "unexpected argument
// \"x\"" for what CLI11 left over; `cmd` is the innermost parsed (sub)command.
std::string extras_message(const CLI::App& cmd, const std::vector<std::string>& extra) {
  for (const std::string& a : extra) {
    if (a.size() < 2 || a[0] != '-') continue;
    const std::string flag = a.substr(0, a.find('='));
    std::string best;
    std::size_t best_d = 3;  // suggest only close names
    for (const CLI::Option* o : cmd.get_options())
      for (const std::string& n : o->get_lnames())
        if (const std::size_t d = edit_distance(flag, "--" + n); d < best_d) {
          best_d = d;
          best = "--" + n;
        }
    return "unknown flag " + flag + (best.empty() ? "" : " (did you mean " + best + "?)");
  }
  return extra.empty() ? "unexpected arguments" : "unexpected argument " + in_quotes(extra.front());
}

}  // namespace

void init(CLI::App& app) {
  app.option_defaults()->always_capture_default();
  // A flag given twice takes its last value, so a script's defaults can be
  // overridden by appending ("charlm --steps 200 \"$@\"", scripts/demo.sh).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.formatter(std::make_shared<Formatter>());
  app.set_help_flag("-h,--help", "print this help (every flag, its default and meaning) and exit");
}

int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp&) {
    // App::help() describes the subcommand --help was given to, if any.
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    // CLI11's own exit codes (100+) are not the convention: a command-line
    // error is 2. Its messages name the flag ("--steps: must be ...",
    // "Could not convert: --lr = abc"); left-over arguments are said here.
    const CLI::App* cmd = &app;
    std::string name = app.get_name();
    for (auto subs = app.get_subcommands(); !subs.empty(); subs = subs.front()->get_subcommands()) {
      cmd = subs.front();
      name += " " + cmd->get_name();
    }
    std::string what = dynamic_cast<const CLI::ExtrasError*>(&e) ? extras_message(*cmd, app.remaining(true)) : e.what();
    // A program of subcommands given a word it does not know.
    const std::vector<std::string> left = app.remaining();
    if (cmd == &app && !app.get_subcommands({}).empty() && !left.empty() && !left.front().starts_with("-"))
      what = "unknown subcommand " + in_quotes(left.front()) + " (the subcommands are listed by --help)";
    std::fprintf(stderr, "%s: error: %s\nRun '%s --help' for the flags.\n", name.c_str(), what.c_str(), name.c_str());
    return 2;
  }
}

int exit_status(const std::string& prog, const std::exception& e) {
  std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), e.what());
  return dynamic_cast<const FlagError*>(&e) ? 2 : 1;
}

CLI::Validator integer(int64_t lo, int64_t hi) {
  std::string desc = "INT";
  if (lo == 1 && hi == std::numeric_limits<int64_t>::max())
    desc = "INT >= 1";
  else if (lo != std::numeric_limits<int64_t>::min() && hi == std::numeric_limits<int64_t>::max())
    desc = "INT >= " + std::to_string(lo);
  else if (lo != std::numeric_limits<int64_t>::min())
    desc = "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != 0 || errno == ERANGE) return "expects an integer, got " + in_quotes(s);
        if (v < lo || v > hi) {
          if (hi == std::numeric_limits<int64_t>::max())
            return (lo == 1 ? std::string("must be a positive integer")
                            : "must be an integer >= " + std::to_string(lo)) +
                   ", got " + s;
          return "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + s;
        }
        s = std::to_string(v);  // canonical: no leading zeros or '+' for CLI11's base-0 reading
        return "";
      },
      desc);
}

CLI::Validator number(Range r) {
  const bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi);
  std::string range;
  if (has_lo && has_hi)
    range = str("in ", r.lo_open ? "(" : "[", num(r.lo), ", ", num(r.hi), r.hi_open ? ")" : "]");
  else if (has_lo && r.lo_open && r.lo == 0)
    range = "positive";
  else if (has_lo)
    range = str(r.lo_open ? "> " : ">= ", num(r.lo));
  else if (has_hi)
    range = str(r.hi_open ? "< " : "<= ", num(r.hi));
  return CLI::Validator(
      [r, range](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != 0 || errno == ERANGE || !std::isfinite(v))
          return "expects a finite number, got " + in_quotes(s);
        if (v < r.lo || v > r.hi || (r.lo_open && v == r.lo) || (r.hi_open && v == r.hi))
          return "must be " + range + ", got " + s;
        return "";
      },
      range.empty() ? "NUMBER" : "NUMBER " + range);
}

CLI::Validator bytes() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          s = std::to_string(nn::parse_bytes(s));
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      "BYTES");
}

CLI::Validator accepted_by(std::function<void(const std::string&)> accept, const std::string& description) {
  return CLI::Validator(
      [accept = std::move(accept)](std::string& s) -> std::string {
        try {
          accept(s);
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      description);
}

CLI::Validator device() {
  return accepted_by(
      [](const std::string& s) {
        const Device d = Device::parse(s);
        if (!d.is_cuda()) return;
        const int n = device_count(DeviceType::CUDA);
        if (n == 0) {
          try {
            (void)backend_for(DeviceType::CUDA);  // its error says why (no plugin, no driver, no GPU)
          } catch (const DeviceError& e) {
            throw DeviceError(str(d.str(), ": no CUDA GPU here (", e.what(), ")"));
          }
          throw DeviceError(str(d.str(), ": no CUDA GPU here"));
        }
        SNUG_CHECK(d.index < n, DeviceError, d.str(), ": no such CUDA device (", n, " present: cuda:0 to cuda:", n - 1,
                   ")");
      },
      "DEVICE");
}

}  // namespace snug::cli

// SPDX-License-Identifier: MIT
// snug-bench SUBCOMMAND [flags] -- see bench/bench.h. The command line is
// parsed by CLI11 through snug_cli (docs/programs.md): each registered
// benchmark is a subcommand with the flags it declared, plus --json.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>

#include <snug/base/error.h>
#include <snug/nn/models/gpt.h>
#include "bench/bench.h"

namespace snug::bench {

std::map<std::string, Bench>& Registry::all() {
  static std::map<std::string, Bench> m;
  return m;
}

Flag int_flag(const std::string& name, long long def, const std::string& help, long long lo) {
  return {name, help, std::to_string(def), cli::integer(lo), Flag::Kind::value, ""};
}
Flag int_flag_unset(const std::string& name, const std::string& help, long long lo) {
  return {name, help, "", cli::integer(lo), Flag::Kind::value, ""};
}
Flag num_flag(const std::string& name, double def, const std::string& help, cli::Range range) {
  return {name, help, str(def), cli::number(range), Flag::Kind::value, ""};
}
Flag text_flag(const std::string& name, const std::string& def, const std::string& help, const std::string& type_name) {
  return {name, help, def, std::nullopt, Flag::Kind::value, type_name};
}
Flag choice_flag(const std::string& name, const std::string& def, std::vector<std::string> choices,
                 const std::string& help) {
  return {name, help, def, CLI::IsMember(std::move(choices)), Flag::Kind::value, ""};
}
Flag bytes_flag(const std::string& name, const std::string& def, const std::string& help) {
  return {name, help, def, cli::bytes(), Flag::Kind::value, ""};
}
Flag switch_flag(const std::string& name, const std::string& help) {
  return {name, help, "", std::nullopt, Flag::Kind::switch_, ""};
}
Flag positional(const std::string& name, const std::string& help) {
  return {name, help, "", std::nullopt, Flag::Kind::positional, ""};
}

void check_gpt_flags(const nn::models::GPTConfig& cfg) {
  try {
    cfg.validate();
  } catch (const ValueError& e) {
    cli::fail("the model's flags (--layers, --embd, --heads, --block): ", e.what());
  }
}

namespace {
const std::string& lookup(const Args& a, const std::string& k) {
  auto it = a.values.find(k);
  if (it == a.values.end())
    throw std::logic_error("snug-bench: the subcommand reads --" + k + " but does not declare it");
  return it->second;
}
}  // namespace

bool Args::has(const std::string& k) const {
  lookup(*this, k);
  return given.count(k) != 0;
}
std::string Args::get(const std::string& k) const { return lookup(*this, k); }
// The values were checked by the flags' validators (cli::integer, cli::number)
// when the command line was parsed; a default is written by the declaration.
long long Args::get_int(const std::string& k) const {
  const std::string& s = lookup(*this, k);
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != 0) throw std::logic_error("snug-bench: --" + k + " is not an integer flag (\"" + s + "\")");
  return v;
}
double Args::get_double(const std::string& k) const {
  const std::string& s = lookup(*this, k);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != 0) throw std::logic_error("snug-bench: --" + k + " is not a number flag (\"" + s + "\")");
  return v;
}

}  // namespace snug::bench

int main(int argc, char** argv) {
  using namespace snug::bench;
  CLI::App app{
      "snug-bench: snug's benchmarks, one subcommand each. `snug-bench SUBCOMMAND --help` lists its flags; "
      "with --json a benchmark prints one JSON line on stdout.",
      "snug-bench"};
  snug::cli::init(app);
  app.require_subcommand(1);
  // Each subcommand binds its flags to the strings of its own Args, and its
  // switches to bools (so that --json=false is off).
  struct Sub {
    CLI::App* cmd = nullptr;
    Args args;
    std::map<std::string, bool> switches;
  };
  std::map<std::string, Sub> subs;
  for (auto& [name, bench] : Registry::all()) {
    Sub& sub = subs[name];
    CLI::App*& cmd = sub.cmd;
    Args& args = sub.args;
    cmd = app.add_subcommand(name, bench.help);
    std::vector<Flag> flags = bench.flags;
    flags.push_back(switch_flag("json", "print one JSON line on stdout with the results (other text goes to stderr)"));
    for (const Flag& f : flags) {
      std::string& slot = args.values[f.name];
      slot = f.default_value;
      CLI::Option* o = nullptr;
      if (f.kind == Flag::Kind::switch_) {
        o = cmd->add_flag("--" + f.name, sub.switches[f.name], f.help);
      } else if (f.kind == Flag::Kind::positional) {
        o = cmd->add_option(f.name, slot, f.help)->required();
      } else {
        o = cmd->add_option("--" + f.name, slot, f.help);
        if (!f.type_name.empty()) o->type_name(f.type_name);
        if (f.check) o->transform(*f.check);
      }
      (void)o;
    }
  }
  if (const int rc = snug::cli::parse(app, argc, argv); rc >= 0) return rc;
  for (auto& [name, sub] : subs) {
    Args& args = sub.args;
    if (!sub.cmd->parsed()) continue;
    for (const CLI::Option* o : sub.cmd->get_options()) {
      const std::string flag = o->get_lnames().empty() ? o->get_name() : o->get_lnames().front();
      if (o->count() > 0 && sub.switches.count(flag) == 0) args.given.insert(flag);
    }
    for (const auto& [flag, on] : sub.switches)
      if (on) args.given.insert(flag);
    try {
      return Registry::all()[name].fn(args);
    } catch (const std::exception& e) {
      // NOTE [ Program exit status ]: 2 for a FlagError, 1 otherwise.
      return snug::cli::exit_status("snug-bench " + name, e);
    }
  }
  return 2;  // not reached: require_subcommand(1)
}

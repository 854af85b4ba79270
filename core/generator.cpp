// SPDX-License-Identifier: MIT
#include <snug/core/generator.h>

namespace snug {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mu_);
  return offset_;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  offset_ = offset;
}

PhiloxState Generator::reserve(uint64_t n_counters) {
  std::lock_guard<std::mutex> lock(mu_);
  const PhiloxState s{seed_, offset_};
  offset_ += n_counters;
  return s;
}

PhiloxState Generator::get_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return PhiloxState{seed_, offset_};
}

void Generator::set_state(PhiloxState state) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = state.seed;
  offset_ = state.offset;
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace snug

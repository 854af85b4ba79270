// SPDX-License-Identifier: MIT
// Small helpers shared by the doctest unit tests (tests/test_*.cpp).
// Header-only; every function is inline. Test files pull in what they need
// with using-declarations (using snug::testing::make; ...) so a file can keep
// a private helper of the same name when its logic differs.
#pragma once
#include <cstdlib>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <snug/autograd/gradcheck.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>

namespace snug::testing {

using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;

// ---- building tensors ----------------------------------------------------

// A tensor of dtype dt (default f32) holding v in shape s.
inline Tensor make(const std::vector<double>& v, const Shape& s, DType dt = kFloat32) {
  return from_vector<double>(v, s, TensorOptions(dt));
}
// An int64 index tensor holding v in shape s (1-D when s is omitted).
inline Tensor idx(const std::vector<int64_t>& v, const Shape& s) {
  return from_vector<int64_t>(v, s, TensorOptions(kInt64));
}
inline Tensor idx(const std::vector<int64_t>& v) { return idx(v, {static_cast<int64_t>(v.size())}); }
// start, start+1, ... in shape s.
inline Tensor iota(const Shape& s, double start = 0, DType dt = kFloat32) {
  std::vector<double> v(numel_of(s));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  return make(v, s, dt);
}
// Seeded standard-normal tensors.
inline Tensor rnd(const Shape& s, uint64_t seed, DType dt = kFloat64) {
  Generator g(seed);
  return randn(s, TensorOptions(dt), &g);
}
inline Tensor randn_f64(const Shape& s, uint64_t seed) { return rnd(s, seed, kFloat64); }

// Under qemu-aarch64 libgomp's two-thread parallel regions do not finish (an
// emulator problem: a plain `omp parallel for num_threads(2)` hangs there too),
// so cmake/toolchains/aarch64-linux-gnu.cmake runs the tests with one thread
// and SNUG_TEST_ONE_THREAD=1; the tests that force a second thread skip, and
// say so.
inline bool one_thread_only() {
  const char* e = std::getenv("SNUG_TEST_ONE_THREAD");
  return e != nullptr && e[0] == '1';
}
// The thread counts a test compares: {1, 2}, or {1} under the emulator.
inline std::vector<int> thread_counts() { return one_thread_only() ? std::vector<int>{1} : std::vector<int>{1, 2}; }
#define SNUG_SKIP_IF_ONE_THREAD()                                                              \
  do {                                                                                         \
    if (snug::testing::one_thread_only()) {                                                    \
      MESSAGE("skipped: needs two OpenMP threads (SNUG_TEST_ONE_THREAD=1, under an emulator)"); \
      return;                                                                                  \
    }                                                                                          \
  } while (0)

// ---- reading and checking values ------------------------------------------

// The logical values of t, as doubles.
inline std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// Element-wise relative comparison; NaN wants need NaN, infinite wants need
// the same infinity.
inline void check_vals(const Tensor& t, const std::vector<double>& want, double eps = 1e-6) {
  auto got = vals(t);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(eps));
    }
  }
}

// Element-wise comparison with doctest::Approx at scale 1 (so eps is also an
// absolute tolerance near zero); finite wants only.
inline void check_approx(const Tensor& t, const std::vector<double>& want, double eps = 1e-5) {
  auto got = vals(t);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(eps).scale(1.0));
  }
}

// The largest |t| and |a - b| over all elements (read as f32), for tolerance checks.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.contiguous().to_vector<float>()) m = std::max(m, double(std::fabs(v)));
  return m;
}
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  auto x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, double(std::fabs(x[i] - y[i])));
  return m;
}

// Finite-difference gradient check of fn at in (see autograd/gradcheck.h).
inline void check_grad(const GradFn& fn, const std::vector<Tensor>& in) {
  auto r = autograd::gradcheck(fn, in);
  INFO(r.message);
  CHECK(r.ok);
}

// ---- errors ----------------------------------------------------------------

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The message of the snug::Error f throws, or "<no error>".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// The message of the E that f throws; fails the test if f throws another
// std::exception or nothing.
template <class E, class Fn>
std::string error_of(Fn&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("wrong exception type: " << e.what());
    return "";
  }
  FAIL("expected an exception");
  return "";
}

}  // namespace snug::testing

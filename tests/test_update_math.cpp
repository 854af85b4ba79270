// SPDX-License-Identifier: MIT
// core/update_math.h: the per-element optimizer updates and the loss
// scaler's unscale that the CPU loops and the CUDA kernels share, checked
// here against plain double arithmetic; and the backend entries built on
// them (Backend::adam_update, sgd_update, unscale_and_check in
// core/backend.h): which tensors the CPU's fused loops take, and that the
// loops agree with the composed default that takes the rest. The CUDA
// kernels are compared with the CPU loops in tests/test_cuda_parity.cpp
// (skipped without a GPU).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include <snug/core/backend.h>
#include <snug/core/profiler.h>
#include <snug/core/update_math.h>
#include "test_util.h"

using namespace snug;
using snug::testing::error_of;

namespace {

bool near(double got, double want, double tol) { return std::fabs(got - want) <= tol * (1 + std::fabs(want)); }

}  // namespace

TEST_CASE("update::adam follows Adam and AdamW in f32 (against f64 arithmetic)") {
  std::mt19937 rng(3);
  std::normal_distribution<double> n01;
  for (bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    for (int t = 1; t <= 3; ++t) {
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      const update::AdamConsts k = update::make_adam_consts(lr, b1, b2, eps, wd, bc1, bc2, decoupled);
      for (int i = 0; i < 200; ++i) {
        const double p0 = n01(rng), g0 = n01(rng), m0 = 0.1 * n01(rng), v0 = 0.01 * std::fabs(n01(rng));
        float p = float(p0), m = float(m0), v = float(v0);
        update::adam(p, float(g0), m, v, k);
        // f64 reference from the same (f32-rounded) inputs.
        double rp = double(float(p0)), g = double(float(g0));
        if (decoupled)
          rp *= 1 - lr * wd;
        else
          g += wd * rp;
        const double rm = b1 * double(float(m0)) + (1 - b1) * g;
        const double rv = b2 * double(float(v0)) + (1 - b2) * g * g;
        rp -= (lr / bc1) * rm / (std::sqrt(rv) / std::sqrt(bc2) + eps);
        INFO("t ", t, " p0 ", p0, " g0 ", g0);
        CHECK(near(m, rm, 1e-6));
        CHECK(near(v, rv, 1e-6));
        CHECK(near(p, rp, 1e-6));
      }
    }
  }
}

TEST_CASE(
    "update::sgd_momentum and sgd_plain: plain, momentum (first step and later), dampening, Nesterov, weight decay") {
  struct Case {
    double lr, mom, damp, wd;
    bool nesterov, first;
  };
  const Case cases[] = {{0.1, 0, 0, 0, false, false},     {0.1, 0.9, 0, 0, false, true},
                        {0.1, 0.9, 0, 0, false, false},   {0.05, 0.8, 0.3, 0, false, false},
                        {0.1, 0.9, 0, 0.01, true, false}, {0.2, 0.5, 0, 0.1, true, true}};
  for (const Case& c : cases) {
    CAPTURE(c.mom);
    CAPTURE(c.first);
    const update::SgdConsts k = update::make_sgd_consts(c.lr, c.mom, c.damp, c.wd, c.nesterov, c.first);
    const double p0 = 1.5, g0 = -0.25, b0 = 0.75;
    float p = float(p0), b = float(b0);
    if (c.mom != 0)
      update::sgd_momentum(p, float(g0), b, k);
    else
      update::sgd_plain(p, float(g0), k);
    double d = g0 + c.wd * p0, rb = b0;
    if (c.mom != 0) {
      rb = c.first ? d : c.mom * b0 + (1 - c.damp) * d;
      d = c.nesterov ? d + c.mom * rb : rb;
    }
    CHECK(near(p, p0 - c.lr * d, 1e-6));
    CHECK(near(b, rb, 1e-6));  // untouched without momentum
  }
}

TEST_CASE("update::unscale: the unscaled value and whether it is finite, in f32 and f64") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  bool finite = false;
  CHECK(update::unscale(1024.0f, 1.0f / 1024, finite) == 1.0f);
  CHECK(finite);
  CHECK(update::unscale(-3e-5f, 1.0f / 65536, finite) == -3e-5f / 65536);
  CHECK(finite);
  CHECK(update::unscale(0.0f, 1.0f / 65536, finite) == 0.0f);
  CHECK(finite);
  (void)update::unscale(inf, 1.0f / 1024, finite);
  CHECK_FALSE(finite);
  (void)update::unscale(-inf, 1.0f / 1024, finite);
  CHECK_FALSE(finite);
  (void)update::unscale(nan, 1.0f / 1024, finite);
  CHECK_FALSE(finite);
  (void)update::unscale(3e38f, 1024.0f, finite);  // a scale below 1: finite in, inf out
  CHECK_FALSE(finite);
  CHECK(update::unscale(1e300, 1e-300, finite) == doctest::Approx(1.0));
  CHECK(finite);
  (void)update::unscale(1e300, 1e10, finite);
  CHECK_FALSE(finite);
}

namespace {

// How many times `op` was recorded while fn ran.
template <class Fn>
int64_t recorded(const char* op, Fn fn) {
  profiler::Profile prof;
  fn();
  prof.stop();
  int64_t n = 0;
  for (const auto& e : prof.events()) n += e.name == op;
  return n;
}

double max_diff(const Tensor& a, const Tensor& b) {
  return a.numel() == 0 ? 0.0 : max(abs(a.to(kFloat64) - b.to(kFloat64))).item();
}

}  // namespace

TEST_CASE("CPU fused updates: which tensors the loops take (the rest go to the composed default)") {
  Backend& cpu = backend_for(kCPU);
  const update::AdamArgs ak{1e-2, 0.9, 0.999, 1e-8, 0.1, 0.1, 0.001, true};
  auto adam_fused = [&](const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v) {
    return recorded("fused_adam", [&] { cpu.adam_update(p, g, m, v, ak); }) == 1;
  };
  const Tensor g16 = randn({6}).to(kFloat16);
  CHECK(adam_fused(randn({6}), g16, zeros({6}), zeros({6})));
  CHECK(adam_fused(randn({6}), randn({6}, TensorOptions(kBFloat16, Device("cpu:1"))), zeros({6}),
                   zeros({6})));  // CPU devices share host memory
  CHECK_FALSE(
      adam_fused(randn({6}).to(kFloat64), randn({6}).to(kFloat64), zeros({6}, kFloat64), zeros({6}, kFloat64)));  // f64
  CHECK_FALSE(adam_fused(randn({6}), randn({6}).to(kFloat64), zeros({6}), zeros({6})));     // gradient dtype
  CHECK_FALSE(adam_fused(randn({3, 2}).t(), randn({2, 3}), zeros({2, 3}), zeros({2, 3})));  // strided target
  const update::SgdArgs sk{0.1, 0.9, 0, 0, false, true};
  auto sgd_fused = [&](const Tensor& p, const Tensor& g, const Tensor& buf, const update::SgdArgs& a) {
    return recorded("fused_sgd", [&] { cpu.sgd_update(p, g, buf, a); }) == 1;
  };
  CHECK(sgd_fused(randn({6}), g16, zeros({6}), sk));
  CHECK(sgd_fused(randn({6}), g16, Tensor(), {0.1, 0, 0, 0, false, false}));  // no momentum, no buffer
  CHECK_FALSE(sgd_fused(randn({6}), g16, zeros({6}, kFloat64), sk));          // the buffer must be f32
  // Momentum without a buffer is a clear error, not a crash in the loop.
  CHECK(error_of<ValueError>([&] { cpu.sgd_update(randn({6}), g16, Tensor(), sk); }).find("momentum") !=
        std::string::npos);
}

TEST_CASE("CPU fused Adam and SGD agree with the composed default (f32, f16 and bf16 gradients)") {
  Backend& cpu = backend_for(kCPU);
  for (DType gd : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(gd));
    manual_seed(7);
    const Tensor p0 = randn({1000}), g = randn({1000}).to(gd), m0 = randn({1000}) * 0.1, v0 = rand({1000}) * 0.01;
    for (bool decoupled : {false, true}) {
      const update::AdamArgs a{1e-2, 0.9, 0.999, 1e-8, 0.1, 1 - 0.9 * 0.9, 1 - 0.999 * 0.999, decoupled};
      Tensor pf = p0.clone(), mf = m0.clone(), vf = v0.clone(), pd = p0.clone(), md = m0.clone(), vd = v0.clone();
      cpu.adam_update(pf, g, mf, vf, a);
      cpu.Backend::adam_update(pd, g, md, vd, a);  // the composed default, called past the override
      CHECK(max_diff(pf, p0) > 1e-4);              // it did update
      CHECK(max_diff(pf, pd) < 1e-6);
      CHECK(max_diff(mf, md) < 1e-6);
      CHECK(max_diff(vf, vd) < 1e-6);
    }
    for (const update::SgdArgs& a :
         {update::SgdArgs{0.1, 0, 0, 0.01, false, false}, update::SgdArgs{0.1, 0.9, 0, 0, false, true},
          update::SgdArgs{0.05, 0.8, 0.3, 0.01, false, false}, update::SgdArgs{0.1, 0.9, 0, 0.01, true, false}}) {
      CAPTURE(a.momentum);
      Tensor pf = p0.clone(), bf = m0.clone(), pd = p0.clone(), bd = m0.clone();
      const Tensor buf_f = a.momentum != 0 ? bf : Tensor(), buf_d = a.momentum != 0 ? bd : Tensor();
      cpu.sgd_update(pf, g, buf_f, a);
      cpu.Backend::sgd_update(pd, g, buf_d, a);
      CHECK(max_diff(pf, p0) > 1e-4);
      CHECK(max_diff(pf, pd) < 1e-6);
      CHECK(max_diff(bf, bd) < 1e-6);
    }
  }
}

TEST_CASE("unscale_and_check: out = g / scale, and only a non-finite result sets its slot") {
  Backend& cpu = backend_for(kCPU);
  const double inv = 1.0 / 1024;
  for (bool fused : {true, false}) {
    CAPTURE(fused);
    auto unscale = [&](const Tensor& g, const Tensor& out, const Tensor& flags, int64_t slot) {
      if (fused)
        cpu.unscale_and_check(g, out, inv, flags, slot);
      else
        cpu.Backend::unscale_and_check(g, out, inv, flags, slot);
    };
    const Tensor flags = from_vector<int32_t>({0, 0, 1, 0}, {4});
    // f32 in place; f16 widened into a new f32 tensor; f64 in place.
    const Tensor g32 = from_vector<float>({1024, -2048, 0.5f}, {3});
    unscale(g32, g32, flags, 0);
    CHECK(g32.to_vector<float>() == std::vector<float>{1, -2, 0.5f / 1024});
    const Tensor g16 = from_vector<float>({3072, -1}, {2}).to(kFloat16), o16 = empty({2}, kFloat32);
    unscale(g16, o16, flags, 1);
    CHECK(o16.to_vector<float>() == std::vector<float>{3, -1.0f / 1024});
    const Tensor g64 = from_vector<double>({1e300, 2048}, {2}, TensorOptions(kFloat64));
    unscale(g64, g64, flags, 3);
    CHECK(g64.to_vector<double>() == std::vector<double>{1e300 / 1024, 2});
    CHECK(flags.to_vector<int32_t>() == std::vector<int32_t>{0, 0, 1, 0});  // all finite: flags untouched
    // inf in a bf16 gradient; NaN in an f32 one; each sets its own slot only.
    const Tensor gi = from_vector<float>({1, std::numeric_limits<float>::infinity()}, {2}).to(kBFloat16);
    unscale(gi, empty({2}, kFloat32), flags, 1);
    const Tensor gn = from_vector<float>({std::numeric_limits<float>::quiet_NaN(), 1}, {2});
    unscale(gn, gn, flags, 3);
    CHECK(flags.to_vector<int32_t>() == std::vector<int32_t>{0, 1, 1, 1});
    // Finite in, inf out: a scale below 1 overflows f32.
    const Tensor f0 = zeros({1}, kInt32), big = from_vector<float>({3e38f}, {1});
    if (fused)
      cpu.unscale_and_check(big, big, 1024.0, f0, 0);
    else
      cpu.Backend::unscale_and_check(big, big, 1024.0, f0, 0);
    CHECK(f0.item() == 1);
  }
  // A strided gradient takes the default, in place: same values.
  const Tensor s = from_vector<float>({1024, 2048, 3072, 4096, 5120, 6144}, {2, 3}).t();
  const Tensor f = zeros({1}, kInt32);
  CHECK(recorded("unscale_check", [&] { cpu.unscale_and_check(s, s, inv, f, 0); }) == 0);
  CHECK(s.contiguous().to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(f.item() == 0);
}

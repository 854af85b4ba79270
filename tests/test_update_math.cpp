// SPDX-License-Identifier: MIT
// core/update_math.h: the per-element optimizer updates and the loss
// scaler's unscale that the CPU loops and the CUDA kernels share, checked
// here against plain double arithmetic; and the host side of the CUDA entry
// points (cuda/fused_api.h), which refuse tensors that are not on a GPU in
// every build. The kernels themselves are compared with the CPU loops in
// tests/test_cuda_parity.cpp (skipped without a GPU).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include <snug/core/update_math.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/fused_api.h>
#include <snug/nn/optim/fused.h>
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
        if (decoupled) rp *= 1 - lr * wd;
        else g += wd * rp;
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

TEST_CASE("update::sgd_momentum and sgd_plain: plain, momentum (first step and later), dampening, Nesterov, weight decay") {
  struct Case {
    double lr, mom, damp, wd;
    bool nesterov, first;
  };
  const Case cases[] = {{0.1, 0, 0, 0, false, false},    {0.1, 0.9, 0, 0, false, true},
                        {0.1, 0.9, 0, 0, false, false},  {0.05, 0.8, 0.3, 0, false, false},
                        {0.1, 0.9, 0, 0.01, true, false}, {0.2, 0.5, 0, 0.1, true, true}};
  for (const Case& c : cases) {
    CAPTURE(c.mom);
    CAPTURE(c.first);
    const update::SgdConsts k = update::make_sgd_consts(c.lr, c.mom, c.damp, c.wd, c.nesterov, c.first);
    const double p0 = 1.5, g0 = -0.25, b0 = 0.75;
    float p = float(p0), b = float(b0);
    if (c.mom != 0) update::sgd_momentum(p, float(g0), b, k);
    else update::sgd_plain(p, float(g0), k);
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

TEST_CASE("fused::supported: CPU devices together, or one CUDA device; contiguous f32 state") {
  using nn::optim::fused::supported;
  const Tensor p = zeros({6}), g = zeros({6}, kFloat16), m = zeros({6});
  CHECK(supported(p, g, m, m));
  CHECK(supported(p, zeros({6}, TensorOptions(kBFloat16, Device("cpu:1"))), m));  // host memory is shared
  CHECK_FALSE(supported(p, zeros({6}, kFloat64)));                                // gradient dtype
  CHECK_FALSE(supported(p, g, zeros({7})));                                       // state size
  CHECK_FALSE(supported(zeros({2, 3}).t(), zeros({3, 2})));                       // strided target
  CHECK_FALSE(supported(p.to(kFloat16), g));                                      // the target must be f32
}

TEST_CASE("cuda fused entry points refuse tensors that are not on a GPU, in every build") {
  const Tensor p = zeros({4}), g = zeros({4}), m = zeros({4}), v = zeros({4});
  const auto ak = update::make_adam_consts(1e-3, 0.9, 0.999, 1e-8, 0, 0.1, 0.001, true);
  const auto sk = update::make_sgd_consts(0.1, 0, 0, 0, false, false);
  // Without CUDA compiled in the stand-in names the missing support; with it,
  // the check names the tensor's device.
  const std::string want = cuda::compiled() ? "not on a CUDA device" : "no CUDA support";
  CHECK(error_of<DeviceError>([&] { cuda::fused_adam(p, g, m, v, ak); }).find(want) != std::string::npos);
  CHECK(error_of<DeviceError>([&] { cuda::fused_sgd(p, g, Tensor(), sk); }).find(want) != std::string::npos);
  CHECK(error_of<DeviceError>([&] { cuda::unscale_check(g, g, 1.0, zeros({1}, kInt32), 0); }).find(want) !=
        std::string::npos);
  // cuDNN's batch norm: x (N, C) = (3, 4), per-channel tensors (4).
  const Tensor x = zeros({3, 4}), y = zeros({3, 4});
  CHECK(error_of<DeviceError>([&] { cuda::batch_norm_forward_training(x, p, p, m, v, 0.1, 1e-5, y, g, g); })
            .find(want) != std::string::npos);
  CHECK(error_of<DeviceError>([&] { cuda::batch_norm_forward_inference(x, p, p, m, v, 1e-5, y); }).find(want) !=
        std::string::npos);
  CHECK(error_of<DeviceError>([&] { cuda::batch_norm_backward(x, y, p, m, v, 1e-5, y, g, g); }).find(want) !=
        std::string::npos);
}

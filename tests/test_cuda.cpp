// SPDX-License-Identifier: MIT
// The CUDA runtime API (cuda/cuda_api.h) and the elementwise kernels, checked
// against the CPU functors they share (NOTE [ One definition of each op's
// math ]). The same file builds with and without CUDA and needs no #ifdef:
// without CUDA, or without a GPU, device_count() is 0 and the GPU cases skip
// themselves with a message saying so.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <snug/autograd/ops.h>
#include <snug/base/error.h>
#include <snug/core/backend.h>
#include <snug/core/functors.h>
#include <snug/cuda/cuda_api.h>

using namespace snug;

namespace {

bool skip_without_gpu() {
  if (cuda::device_count() > 0) return false;
  const std::string why =
      cuda::compiled() ? "CUDA is compiled in, but the driver sees no device" : "this build of snug has no CUDA";
  MESSAGE(str("skipped: no CUDA GPU (", why, ")"));
  return true;
}

// Inputs covering negatives, zero, small and large magnitudes; ops with a
// restricted domain give NaN on both sides, which compare equal below.
std::vector<float> inputs(int n, float lo, float hi) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = lo + (hi - lo) * float(i) / float(n - 1);
  v[n / 2] = 0.0f;
  return v;
}

bool close(float got, float want) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  // Device libm (expf, erff, tanhf, ...) may differ from the host's by a few ulps.
  return std::fabs(got - want) <= 1e-5f + 1e-5f * std::fabs(want);
}

// RAII device buffer for the test only.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t bytes) : p(cuda::device_malloc(bytes)) {}
  ~DeviceBuffer() { cuda::device_free(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* f() const { return static_cast<float*>(p); }
};

}  // namespace

TEST_CASE("cuda: device queries are safe in every build") {
  const int n = cuda::device_count();
  CHECK(n >= 0);
  CHECK(cuda::is_available() == (n > 0));
  if (!cuda::compiled()) {
    CHECK(n == 0);
    CHECK(cuda::runtime_version() == 0);
    CHECK_THROWS_AS(cuda::properties(0), DeviceError);
    CHECK_THROWS_AS(cuda::device_malloc(16), DeviceError);
  } else {
    CHECK(cuda::runtime_version() > 0);
    MESSAGE(str("CUDA runtime ", cuda::runtime_version(), ", ", n, " device(s)"));
  }
  if (n == 0) {
    // No device: asking for one is an error that says so, never a crash.
    CHECK_THROWS_AS(cuda::current_device(), DeviceError);
    try {
      cuda::properties(0);
      FAIL("properties(0) should throw without a GPU");
    } catch (const DeviceError& e) {
      const std::string msg = e.what();
      CHECK(msg.find("properties") != std::string::npos);
    }
  }
}

TEST_CASE("cuda: device properties") {
  if (skip_without_gpu()) return;
  CHECK(cuda::current_device() >= 0);
  for (int d = 0; d < cuda::device_count(); ++d) {
    const auto p = cuda::properties(d);
    MESSAGE(str("cuda:", d, " ", p.name, ", ", p.total_memory >> 20, " MiB, sm_", p.compute_capability(), ", ",
                p.multiprocessor_count, " SMs"));
    CHECK(p.index == d);
    CHECK(!p.name.empty());
    CHECK(p.total_memory > 0);
    CHECK(p.major >= 3);
    CHECK(p.multiprocessor_count > 0);
  }
  CHECK_THROWS_AS(cuda::properties(cuda::device_count()), DeviceError);
  CHECK_THROWS_AS(cuda::set_device(-1), DeviceError);
}

TEST_CASE("cuda: unary kernels match the CPU functors") {
  if (skip_without_gpu()) return;
  const int n = 1000;  // not a multiple of the block size
  const auto x = inputs(n, -4.0f, 4.0f);
  DeviceBuffer dx(n * sizeof(float)), dout(n * sizeof(float));
  cuda::copy_to_device(dx.p, x.data(), n * sizeof(float));
  struct Case {
    UnaryOp op;
    double a, b;
  };
  std::vector<Case> cases;
  for (int i = 0; i < kNumUnaryOps; ++i) cases.push_back({UnaryOp(i), 0.0, 0.0});
  cases.push_back({UnaryOp::clamp, -0.5, 1.5});
  cases.push_back({UnaryOp::pow_scalar, 3.0, 0.0});
  cases.push_back({UnaryOp::pow_scalar, 0.5, 0.0});
  cases.push_back({UnaryOp::affine, 2.0, -1.0});
  for (const auto& c : cases) {
    CAPTURE(unary_op_name(c.op));
    CAPTURE(c.a);
    std::vector<float> got(n), want(n);
    cuda::unary_f32(c.op, c.a, c.b, dx.f(), dout.f(), n);
    cuda::copy_to_host(got.data(), dout.p, n * sizeof(float));
    for (int i = 0; i < n; ++i) want[i] = visit_unary(c.op, c.a, c.b, [&](auto f) { return f(x[i]); });
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += !close(got[i], want[i]);
    CHECK(bad == 0);
  }
}

TEST_CASE("cuda: binary kernels match the CPU functors") {
  if (skip_without_gpu()) return;
  const int n = 777;
  const auto x = inputs(n, -3.0f, 3.0f);
  auto y = inputs(n, 2.5f, -2.0f);
  DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float)), dout(n * sizeof(float));
  cuda::copy_to_device(dx.p, x.data(), n * sizeof(float));
  cuda::copy_to_device(dy.p, y.data(), n * sizeof(float));
  for (int i = 0; i < kNumBinaryOps; ++i) {
    const auto op = BinaryOp(i);
    CAPTURE(binary_op_name(op));
    std::vector<float> got(n), want(n);
    cuda::binary_f32(op, dx.f(), dy.f(), dout.f(), n);
    cuda::copy_to_host(got.data(), dout.p, n * sizeof(float));
    for (int j = 0; j < n; ++j) want[j] = visit_binary(op, [&](auto f) { return f(x[j], y[j]); });
    int bad = 0;
    for (int j = 0; j < n; ++j) bad += !close(got[j], want[j]);
    CHECK(bad == 0);
  }
}

TEST_CASE("cuda: large launch uses the grid-stride loop") {
  if (skip_without_gpu()) return;
  const int64_t n = int64_t(65535) * 256 + 12345;  // more elements than one grid covers
  std::vector<float> x(n), got(n);
  for (int64_t i = 0; i < n; ++i) x[i] = float(i % 1000) - 500.0f;
  DeviceBuffer dx(n * sizeof(float)), dout(n * sizeof(float));
  cuda::copy_to_device(dx.p, x.data(), n * sizeof(float));
  cuda::unary_f32(UnaryOp::relu, 0, 0, dx.f(), dout.f(), n);
  cuda::synchronize();
  cuda::copy_to_host(got.data(), dout.p, n * sizeof(float));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += got[i] != (x[i] > 0 ? x[i] : 0.0f);
  CHECK(bad == 0);
}

TEST_CASE("cuda: without a GPU, cuda tensors fail with a clear DeviceError") {
  if (cuda::device_count() > 0) return;  // covered by tests/test_cuda_parity.cpp on a GPU
  CHECK_FALSE(has_backend(DeviceType::CUDA));
  try {
    (void)zeros({2, 3}, TensorOptions(kFloat32, Device("cuda:0")));
    FAIL("creating a cuda:0 tensor should throw without a GPU");
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("no GPU is present") != std::string::npos);
  }
  CHECK_THROWS_AS(ones({2}).to(Device("cuda:0")), DeviceError);
  CHECK_THROWS_AS(cuda::pinned_allocate(64), DeviceError);
  CHECK_THROWS_AS(cuda::create_stream(), DeviceError);
  CHECK_THROWS_AS(cuda::record_event(0), DeviceError);
  cuda::ensure_registered();  // a no-op without a GPU, and safe to repeat
  CHECK_FALSE(has_backend(DeviceType::CUDA));
  // The TF32 switch round-trips in every build.
  cuda::set_allow_tf32(true);
  CHECK(cuda::allow_tf32());
  cuda::set_allow_tf32(false);
  CHECK_FALSE(cuda::allow_tf32());
}

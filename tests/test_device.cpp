// SPDX-License-Identifier: MIT
// Device: parsing "cpu", "cpu:N", "cuda:N", printing, ordering, and the
// DeviceError raised (naming the offending string) for anything else.
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <unordered_set>

#include <snug/base/device.h>
#include <snug/core/backend.h>
#include <snug/cuda/cuda_api.h>

using namespace snug;

TEST_CASE("device: parse cpu forms") {
  Device d("cpu");
  CHECK(d.type == DeviceType::CPU);
  CHECK(d.index == 0);
  CHECK(d.is_cpu());
  CHECK_FALSE(d.is_cuda());
  CHECK(d == kCPU);

  Device d2("cpu:2");
  CHECK(d2.is_cpu());
  CHECK(d2.index == 2);
  CHECK(d2 != kCPU);

  Device d0("cpu:0");
  CHECK(d0 == kCPU);

  Device big("cpu:123456");  // six digits is the documented limit
  CHECK(big.index == 123456);
}

TEST_CASE("device: parse cuda forms") {
  Device c("cuda:1");
  CHECK(c.is_cuda());
  CHECK_FALSE(c.is_cpu());
  CHECK(c.index == 1);
  Device c0("cuda");
  CHECK(c0.is_cuda());
  CHECK(c0.index == 0);
  CHECK(c0 != kCPU);
  CHECK(Device(DeviceType::CUDA, 3) == Device("cuda:3"));
}

TEST_CASE("device: printing and round trip") {
  CHECK(Device("cpu:2").str() == "cpu:2");
  CHECK(Device("cuda:1").str() == "cuda:1");
  // The bare host prints with its index; parsing the printed form gives it back.
  CHECK(Device("cpu").str() == "cpu:0");
  for (const char* s : {"cpu", "cpu:0", "cpu:2", "cpu:17", "cuda", "cuda:1", "cuda:7"}) {
    Device d(s);
    CHECK(Device(d.str()) == d);
  }
  std::ostringstream os;
  os << Device("cuda:1") << "|" << Device("cpu:3");
  CHECK(os.str() == "cuda:1|cpu:3");
}

TEST_CASE("device: std::string and const char* constructors agree") {
  std::string s = "cpu:5";
  CHECK(Device(s) == Device("cpu:5"));
  CHECK(Device::parse(s).index == 5);
}

TEST_CASE("device: ordering and hashing") {
  CHECK(Device("cpu:0") < Device("cpu:1"));
  CHECK(Device("cpu:9") < Device("cuda:0"));  // CPU sorts before CUDA
  CHECK_FALSE(Device("cuda:0") < Device("cpu:9"));
  CHECK_FALSE(Device("cpu:1") < Device("cpu:1"));
  std::unordered_set<Device> set{Device("cpu"), Device("cpu:0"), Device("cpu:1"), Device("cuda:0")};
  CHECK(set.size() == 3);
  CHECK(set.count(Device("cpu:1")) == 1);
  CHECK(set.count(Device("cuda:1")) == 0);
}

TEST_CASE("device: bad strings throw DeviceError naming the string") {
  const char* bad[] = {"gpu",      "gpu:0",       "",   "CPU",     "cpu:", "cpu:-1",  "cpu:x", "cpu:1a",
                       "cuda:one", "cpu:1234567", ":1", "cpu:1:2", " cpu", "cuda:+1", "tpu:0"};
  for (const char* s : bad) {
    INFO("input: \"" << s << "\"");
    bool threw = false;
    try {
      Device d(s);
      (void)d;
    } catch (const DeviceError& e) {
      threw = true;
      std::string msg = e.what();
      CHECK(msg.find(std::string("\"") + s + "\"") != std::string::npos);
      CHECK(msg.find("Device") != std::string::npos);
    }
    CHECK(threw);
  }
  // DeviceError is a snug::Error.
  CHECK_THROWS_AS(Device("nope"), Error);
  CHECK_THROWS_AS(Device::parse(std::string("cuda:")), DeviceError);
}

TEST_CASE("device_count: one CPU; the GPUs the CUDA plugin sees, never an exception") {
  CHECK(snug::device_count(snug::DeviceType::CPU) == 1);
  const int n = snug::device_count(snug::DeviceType::CUDA);
  CHECK(n >= 0);
  CHECK(n == snug::cuda::device_count());  // the same answer through core/ as through cuda/
  if (n == 0) {
    MESSAGE("skipped the GPU half: no CUDA GPU");
    CHECK_THROWS_AS(snug::backend_for(snug::DeviceType::CUDA), snug::DeviceError);
  }
}

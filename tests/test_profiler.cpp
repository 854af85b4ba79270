// SPDX-License-Identifier: MIT
// core/profiler: op events, folding of nested ops, FLOPs and bytes, ranges,
// the summary table and the Chrome trace file.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <snug/autograd/ops.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/nn/functional.h>

using namespace snug;

namespace {
std::vector<profiler::Event> named(const std::vector<profiler::Event>& ev, const std::string& name) {
  std::vector<profiler::Event> out;
  for (const auto& e : ev)
    if (e.name == name) out.push_back(e);
  return out;
}
}  // namespace

TEST_CASE("nothing is recorded without a Profile") {
  Tensor a = ones({4, 4});
  Tensor b = matmul(a, a);
  profiler::Profile p;
  p.stop();
  CHECK(p.events().empty());
  CHECK_FALSE(profiler::enabled());
}

TEST_CASE("matmul records its name, device, FLOPs and output bytes") {
  Tensor a = randn({2, 8, 16}), b = randn({16, 32});
  profiler::Profile p;
  Tensor c = matmul(a, b);  // (2, 8, 32)
  p.stop();
  auto mm = named(p.events(), "matmul");
  REQUIRE(mm.size() == 1);
  CHECK(mm[0].kind == profiler::EventKind::op);
  CHECK(mm[0].device == kCPU);
  CHECK(mm[0].flops == doctest::Approx(2.0 * 2 * 8 * 32 * 16));
  CHECK(mm[0].bytes >= 2 * 8 * 32 * sizeof(float));
  CHECK(mm[0].dur_ns >= 0);
}

TEST_CASE("an op inside another op is folded into the outer one") {
  Tensor a = randn({64});
  profiler::Profile p;
  Tensor b = raw::binary_scalar(BinaryOp::add, a, 1.0);  // calls raw::binary inside
  p.stop();
  auto ev = p.events();
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].name == "add");
}

TEST_CASE("backward nodes and optimizer-like ranges nest around ops") {
  Tensor w = randn({8, 8}, TensorOptions().with_requires_grad(true));
  Tensor x = randn({4, 8});
  profiler::Profile p;
  {
    profiler::RecordRange user("my_step");
    Tensor y = sum(matmul(x, w));
    y.backward();
  }
  p.stop();
  auto ev = p.events();
  auto step = named(ev, "my_step");
  REQUIRE(step.size() == 1);
  CHECK(step[0].kind == profiler::EventKind::range);
  CHECK(named(ev, "backward:matmul").size() == 1);
  // matmul runs twice in backward (the gradient of w needs x^T g); plus the forward one.
  CHECK(named(ev, "matmul").size() >= 2);
  for (const auto& e : ev) {  // every event lies inside the user range
    CHECK(e.start_ns >= step[0].start_ns);
    CHECK(e.start_ns + e.dur_ns <= step[0].start_ns + step[0].dur_ns);
  }
  std::string table = p.summary();
  CHECK(table.find("matmul") != std::string::npos);
  CHECK(table.find("backward:matmul") != std::string::npos);
  CHECK(table.find("all ops") != std::string::npos);
}

TEST_CASE("the Chrome trace is valid JSON with one X event per recorded event") {
  Tensor a = randn({32, 32}), b = randn({32, 32});
  profiler::Profile p;
  Tensor c = relu(matmul(a, b) + b);
  p.stop();
  const std::string path = "test_profiler_trace.json";
  p.write_chrome_trace(path);
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f);
  const auto& te = j.at("traceEvents");
  CHECK(te.size() == p.events().size());
  bool saw_matmul = false;
  for (const auto& e : te) {
    CHECK(e.at("ph") == "X");
    if (e.at("name") == "matmul") {
      saw_matmul = true;
      CHECK(e.at("args").at("flops").get<double>() == doctest::Approx(2.0 * 32 * 32 * 32));
    }
  }
  CHECK(saw_matmul);
  std::remove(path.c_str());
}

TEST_CASE("device intervals: their own trace tracks, in neither table, nothing without a Profile") {
  profiler::record_device_interval("dropped", Device("cuda:0"), 0, 10, 1);  // no Profile: nothing
  profiler::Profile p;
  Tensor c = relu(ones({8}));
  const int64_t t = profiler::clock_ns();
  CHECK(t > 0);
  profiler::record_device_interval("step (compute stream)", Device("cuda:0"), t, 5000, 0);
  profiler::record_device_interval("h2d copy (prefetch, copy stream)", Device("cuda:0"), t + 1000, 2000, 1);
  p.stop();
  int device_events = 0;
  for (const auto& e : p.events())
    if (e.kind == profiler::EventKind::device) {
      ++device_events;
      CHECK(e.thread >= 1000);  // apart from the host threads
      CHECK(e.name != "dropped");
    }
  CHECK(device_events == 2);
  CHECK(p.summary().find("copy stream") == std::string::npos);  // not an op or a range
  const std::string path = "test_profiler_device.json";
  p.write_chrome_trace(path);
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f);
  int tracks = 0;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("cat") == "device") tracks += e.at("tid").get<int>() == 1000 ? 1 : e.at("tid").get<int>() == 1001 ? 10 : 0;
  CHECK(tracks == 11);  // one event on each of the two tracks
  std::remove(path.c_str());
}

TEST_CASE("only one Profile records at a time, and a new one starts empty") {
  {
    profiler::Profile p;
    CHECK_THROWS_AS(profiler::Profile(), ValueError);
    Tensor a = ones({3}) * 2.0;
  }
  profiler::Profile q;
  q.stop();
  CHECK(q.events().empty());
}

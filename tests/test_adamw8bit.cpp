// SPDX-License-Identifier: MIT
// optim::AdamW8bit: the quantization maps, block-wise error bounds, f32 state
// for small tensors (equal to AdamW), tracking AdamW on a real problem with a
// quarter of the state, checkpoint round trips (bitwise resume), pruning
// masks and compaction with quantized state, and errors.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/adamw8bit.h>
#include <snug/nn/training_state.h>
#include <snug/prune/compact.h>
#include <snug/prune/prune.h>
#include "test_util.h"

using namespace snug;
using namespace snug::nn::optim;
using snug::testing::error_of;

namespace {
// Least squares: loss = mean((x W^T - t)^2) with a fixed random problem.
struct Problem {
  Tensor x, t;
  explicit Problem(uint64_t seed, int64_t in = 128, int64_t out = 64) {
    Generator g(seed);
    x = randn({32, in}, {}, &g);
    t = randn({32, out}, {}, &g);
  }
  double step(nn::Linear& fc, Optimizer& opt) const {
    opt.zero_grad();
    Tensor loss = mean(square(fc.forward(x) - t));
    loss.backward();
    opt.step();
    return loss.item();
  }
};
double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, double(std::fabs(x[i] - y[i])));
  return m;
}
}  // namespace

TEST_CASE("the dynamic quantization maps") {
  for (bool is_signed : {true, false}) {
    const auto& m = is_signed ? AdamW8bit::signed_map() : AdamW8bit::unsigned_map();
    REQUIRE(m.size() == 256);
    for (size_t i = 1; i < m.size(); ++i) CHECK(m[i - 1] < m[i]);
    CHECK(m.back() == 1.0f);
    CHECK(std::find(m.begin(), m.end(), 0.0f) != m.end());
    CHECK(m.front() == (is_signed ? -1.0f : 0.0f));
    // Dense near zero: values down to 1e-6 are represented within 20% relative error.
    float smallest_pos = 1;
    for (float v : m)
      if (v > 0) smallest_pos = std::min(smallest_pos, v);
    CHECK(smallest_pos <= 1e-6f);
  }
}

TEST_CASE("block-wise quantization: error bounded by the map's spacing times the block absmax") {
  Generator g(1);
  const int64_t n = 1000, block = 256;
  std::vector<float> x = randn({n}, {}, &g).to_vector<float>();
  for (int64_t i = 256; i < 512; ++i) x[size_t(i)] *= 1e-4f;  // a block of tiny values keeps its own scale
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  std::vector<float> absmax(4), back(static_cast<size_t>(n));
  const auto& map = AdamW8bit::signed_map();
  AdamW8bit::quantize_blockwise(x.data(), n, block, map, codes.data(), absmax.data());
  AdamW8bit::dequantize_blockwise(codes.data(), absmax.data(), n, block, map, back.data());
  double max_gap = 0;
  for (size_t i = 1; i < map.size(); ++i) max_gap = std::max(max_gap, double(map[i] - map[i - 1]));
  for (int64_t i = 0; i < n; ++i) {
    const double a = absmax[size_t(i / block)];
    CHECK(std::fabs(back[size_t(i)] - x[size_t(i)]) <= 0.5 * max_gap * a * (1 + 1e-5));
  }
  CHECK(absmax[1] < 1e-3f);  // the tiny block
  // The block maximum itself is exact.
  for (int64_t b = 0; b < 4; ++b) {
    float m = 0;
    int64_t at = 0;
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
      if (std::fabs(x[size_t(i)]) > m) m = std::fabs(x[size_t(at = i)]);
    if (x[size_t(at)] > 0) CHECK(back[size_t(at)] == doctest::Approx(x[size_t(at)]).epsilon(1e-6));
  }
}

TEST_CASE("tensors under min_8bit_size keep f32 moments and match AdamW") {
  manual_seed(2);
  nn::Linear a(20, 10), b(20, 10);  // 200 + 10 elements: f32 state
  {
    NoGradGuard ng;
    b.weight.copy_(a.weight);
    b.bias.copy_(a.bias);
  }
  AdamW o1(a.parameters(), {.lr = 0.01, .weight_decay = 0.1});
  AdamW8bit o2(b.parameters(), {.lr = 0.01, .weight_decay = 0.1});
  Problem pr(3, 20, 10);
  for (int s = 0; s < 10; ++s) {
    pr.step(a, o1);
    pr.step(b, o2);
  }
  CHECK(max_abs_diff(a.weight, b.weight) <= 1e-6);
  CHECK(o2.state_bytes() == o1.state_bytes());
}

TEST_CASE("8-bit state tracks AdamW with about a quarter of the bytes") {
  manual_seed(4);
  nn::Linear a(128, 64), b(128, 64);  // 8192-element weight: 8-bit; 64-element bias: f32
  {
    NoGradGuard ng;
    b.weight.copy_(a.weight);
    b.bias.copy_(a.bias);
  }
  AdamW o1(a.parameters(), {.lr = 3e-3, .weight_decay = 0.01});
  AdamW8bit o2(b.parameters(), {.lr = 3e-3, .weight_decay = 0.01});
  Problem pr(5);
  double l1 = 0, l2 = 0, first = 0;
  for (int s = 0; s < 200; ++s) {
    l1 = pr.step(a, o1);
    l2 = pr.step(b, o2);
    if (s == 0) first = l1;
  }
  INFO("AdamW loss ", l1, ", AdamW8bit loss ", l2, ", first ", first);
  CHECK(l1 < 0.5 * first);
  CHECK(std::fabs(l2 - l1) <= 0.05 * l1);
  const double ratio = double(o2.state_bytes()) / double(o1.state_bytes());
  CHECK(ratio < 0.3);
  CHECK(o2.state_bytes() == 2 * (8192 + 32 * 4) + 2 * 64 * 4);
}

TEST_CASE("8-bit state round-trips through checkpoints: a resumed run equals an uninterrupted one bitwise") {
  const std::string path = (std::filesystem::temp_directory_path() / "snug_test_adamw8bit.ckpt").string();
  Problem pr(6);
  auto make = [] {
    manual_seed(7);
    return std::make_shared<nn::Linear>(128, 64);
  };
  auto straight = make();
  AdamW8bit os(straight->parameters(), {.lr = 1e-3});
  for (int s = 0; s < 6; ++s) pr.step(*straight, os);

  auto first = make();
  AdamW8bit of(first->parameters(), {.lr = 1e-3});
  for (int s = 0; s < 3; ++s) pr.step(*first, of);
  nn::save_training_state(path, {first.get(), &of, nullptr, {}}, 3);
  bool has_u8 = false;
  for (auto& [k, v] : of.state_dict())
    has_u8 = has_u8 || (v.dtype() == DType::u8 && k.find("exp_avg_q") != std::string::npos);
  CHECK(has_u8);

  auto resumed = make();
  AdamW8bit orr(resumed->parameters(), {.lr = 1e-3});
  auto ck = nn::load_training_state(path, {resumed.get(), &orr, nullptr, {}});
  CHECK(ck.step == 3);
  CHECK(orr.state_bytes() == of.state_bytes());
  for (int s = 0; s < 3; ++s) pr.step(*resumed, orr);
  CHECK(max_abs_diff(resumed->weight, straight->weight) == 0);
  CHECK(max_abs_diff(resumed->bias, straight->bias) == 0);
  std::filesystem::remove(path);
}

TEST_CASE("pruning masks hold with AdamW8bit, and compaction shrinks its quantized state") {
  manual_seed(8);
  auto fc1 = std::make_shared<nn::Linear>(128, 64), fc2 = std::make_shared<nn::Linear>(64, 16);
  auto net = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{fc1, std::make_shared<nn::ReLU>(), fc2});
  AdamW8bit opt(net->parameters(), {.lr = 1e-2, .min_8bit_size = 1024});
  Generator g(9);
  Tensor x = randn({16, 128}, {}, &g);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = sum(square(net->forward(x)));
    loss.backward();
    opt.step();
  };
  step();
  prune::output_channels(*fc1, 0.5);
  for (int s = 0; s < 3; ++s) step();
  int zero_rows = 0;
  auto w = fc1->weight.to_vector<float>();
  for (int r = 0; r < 64; ++r)
    zero_rows += std::all_of(w.begin() + r * 128, w.begin() + (r + 1) * 128, [](float v) { return v == 0; });
  CHECK(zero_rows == 32);
  const std::size_t before = opt.state_bytes();
  prune::compact(*net, &opt);
  CHECK(fc1->weight.shape() == Shape{32, 128});
  CHECK(opt.state_bytes() < before);
  bool ok = false;
  for (auto& [k, v] : opt.state_dict())
    if (k == "state.0.0.exp_avg_q") ok = v.shape() == Shape{32, 128};
  CHECK(ok);
  step();  // trains on with the shrunk state
  CHECK(fc2->weight.grad().shape() == Shape{16, 32});
}

TEST_CASE("AdamW8bit errors") {
  Tensor p = zeros({4}, DType::f64).requires_grad_(true);
  CHECK(error_of([&] { AdamW8bit({p}, {}); }).find("f32") != std::string::npos);
  Tensor q = zeros({4}).requires_grad_(true);
  CHECK(error_of([&] { AdamW8bit({q}, {.block_size = 8}); }).find("block_size") != std::string::npos);
  CHECK(error_of([&] { AdamW8bit({q}, {.beta1 = 1.0}); }).find("betas") != std::string::npos);
}

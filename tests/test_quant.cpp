// SPDX-License-Identifier: MIT
// Quantization (quant/): quantize/dequantize error bounds, observers,
// fake-quant with the straight-through estimator, quantized Linear/Conv2d
// against float references built from the same int8 values, the dynamic,
// static and QAT pipelines, and saving/loading int8 models.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/core/safetensors.h>
#include <snug/nn/conv.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/pool.h>
#include <snug/quant/convert.h>
#include <snug/quant/modules.h>
#include <snug/quant/observer.h>
#include "test_util.h"

using namespace snug;
using snug::testing::max_abs;
using snug::testing::max_abs_diff;
using namespace snug::quant;
using snug::testing::error_of;
namespace F = snug::nn::functional;

namespace {
std::shared_ptr<nn::Sequential> small_cnn(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 3 * 3, 8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 3)});
}
}  // namespace

TEST_CASE("quantize/dequantize: error at most scale/2 inside the range, 0 exact, clamping outside") {
  Generator g(1);
  Tensor x = rand({1000}, {}, &g) * 8.0 - 3.0;  // [-3, 5)
  std::vector<float> mins, maxs;
  min_max(x, -1, mins, maxs);
  for (bool sym : {false, true})
    for (DType dt : {DType::u8, DType::i8}) {
      CAPTURE(sym);
      CAPTURE(dtype_name(dt));
      QParams qp = choose_qparams(mins, maxs, dt, sym);
      Tensor q = quantize(x, qp);
      CHECK(q.dtype() == dt);
      Tensor back = dequantize(q, qp);
      CHECK(max_abs_diff(back, x) <= qp.scale[0] / 2 * (1 + 1e-5));
      CHECK(dequantize(quantize(zeros({1}), qp), qp).item() == 0.0);
      // Far outside the range: clamped to the end of the integer range.
      Tensor far = quantize(full({1}, 1e6), qp);
      CHECK(double(far.to(DType::f64).item()) == double(qp.qmax()));
    }
  // Per channel, symmetric i8, along axis 0 of a weight whose rows differ in scale by 1000x.
  Tensor w = randn({4, 50}, {}, &g) * from_vector<float>({0.001f, 0.1f, 1.f, 10.f}, {4, 1});
  min_max(w, 0, mins, maxs);
  QParams qp = choose_qparams(mins, maxs, DType::i8, true, 0);
  REQUIRE(qp.scale.size() == 4);
  Tensor back = dequantize(quantize(w, qp), qp);
  for (int64_t c = 0; c < 4; ++c) {
    CHECK(qp.zero_point[size_t(c)] == 0);
    CHECK(max_abs_diff(back.select(0, c), w.select(0, c)) <= qp.scale[size_t(c)] / 2 * (1 + 1e-5));
  }
  CHECK(error_of([&] { quantize(w, choose_qparams({0.f}, {1.f}, DType::u8, false, 0)); }).find("channel") !=
        std::string::npos);
  CHECK(error_of([&] { choose_qparams({1.f}, {0.f}, DType::u8, false); }).find("bad range") != std::string::npos);
  CHECK(error_of([&] { choose_qparams({0.f}, {1.f}, DType::f32, false); }).find("u8 or i8") != std::string::npos);
}

TEST_CASE("observers: min-max, moving average, percentile") {
  MinMaxObserver mm;
  mm.observe(from_vector<float>({-1.f, 2.f}));
  mm.observe(from_vector<float>({-3.f, 1.f}));
  std::vector<float> lo, hi;
  mm.range(lo, hi);
  CHECK(lo[0] == -3.f);
  CHECK(hi[0] == 2.f);
  MovingAverageMinMaxObserver ma({}, 0.5);
  ma.observe(from_vector<float>({-1.f, 2.f}));
  ma.observe(from_vector<float>({-3.f, 4.f}));
  ma.range(lo, hi);
  CHECK(lo[0] == doctest::Approx(-2.0));
  CHECK(hi[0] == doctest::Approx(3.0));
  // One outlier among 20000 normals: min-max stretches to it, the percentile does not.
  Generator g(2);
  std::vector<float> v = randn({20000}, {}, &g).to_vector<float>();
  v[123] = 1000.f;
  Tensor x = from_vector<float>(v);
  PercentileObserver pc({}, 99.9);
  MinMaxObserver mm2;
  pc.observe(x);
  mm2.observe(x);
  pc.range(lo, hi);
  CHECK(hi[0] < 5.f);
  CHECK(hi[0] > 2.f);
  CHECK(lo[0] < -2.f);
  CHECK(mm2.qparams().scale[0] > 10 * pc.qparams().scale[0]);
  MinMaxObserver per_channel({DType::i8, true, 0});
  per_channel.observe(from_vector<float>({1.f, -2.f, 30.f, 4.f}, {2, 2}));
  CHECK(per_channel.qparams().scale.size() == 2);
  CHECK(error_of([] { MinMaxObserver().qparams(); }).find("nothing was observed") != std::string::npos);
  CHECK(error_of([] { make_observer("histo", {}); }).find("unknown observer") != std::string::npos);
}

TEST_CASE("fake_quantize: forward is dequantize(quantize(x)); the STE passes gradients inside the range only") {
  QParams qp = choose_qparams({-1.f}, {1.f}, DType::u8, false);
  Tensor x = from_vector<float>({-2.f, -0.5f, 0.f, 0.3f, 0.99f, 3.f});
  x.requires_grad_(true);
  Tensor y = fake_quantize(x, qp);
  CHECK(max_abs_diff(y.detach(), dequantize(quantize(x.detach(), qp), qp)) == 0);
  sum(y * from_vector<float>({1.f, 2.f, 3.f, 4.f, 5.f, 6.f})).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0.f, 2.f, 3.f, 4.f, 5.f, 0.f});
}

TEST_CASE("QuantizedLinear (dynamic) equals a float product of its int8 values, and is close to the float layer") {
  manual_seed(3);
  nn::Linear fc(37, 19);
  Generator g(4);
  Tensor x = randn({5, 37}, {}, &g);
  QuantizedLinear q(fc);
  CHECK(q.is_dynamic());
  CHECK(q.weight_int8.dtype() == DType::i8);
  Tensor y = q.forward(x);
  // Reference: the same quantized input and weights, dequantized, multiplied in float.
  std::vector<float> lo, hi;
  min_max(x, -1, lo, hi);
  QParams qx = choose_qparams(lo, hi, DType::u8, false);
  QParams qw = weight_qparams(fc.weight.detach());
  Tensor ref =
      F::linear(dequantize(quantize(x, qx), qx), dequantize(quantize(fc.weight.detach(), qw), qw), fc.bias.detach());
  CHECK(max_abs_diff(y, ref) <= 1e-4 * (1 + max_abs(ref)));
  Tensor yf = fc.forward(x).detach();
  CHECK(max_abs_diff(y, yf) <= 0.02 * max_abs(yf));
  CHECK(error_of([&] { q.forward(randn({2, 36})); }).find("expected last dim 37") != std::string::npos);
}

TEST_CASE("QuantizedConv2d (static, padded, strided) equals a float conv of its int8 values") {
  manual_seed(5);
  nn::Conv2d conv(3, 6, 3, 2, 1);
  Generator g(6);
  Tensor x = randn({2, 3, 9, 8}, {}, &g);
  std::vector<float> lo, hi;
  min_max(x, -1, lo, hi);
  QParams qx = choose_qparams(lo, hi, DType::u8, false);
  QuantizedConv2d q(conv, qx);
  CHECK_FALSE(q.is_dynamic());
  Tensor y = q.forward(x);
  QParams qw = weight_qparams(conv.weight.detach());
  Tensor ref = F::conv2d(dequantize(quantize(x, qx), qx), dequantize(quantize(conv.weight.detach(), qw), qw),
                         conv.bias.detach(), conv.stride, conv.padding);
  REQUIRE(y.shape() == ref.shape());
  CHECK(max_abs_diff(y, ref) <= 1e-4 * (1 + max_abs(ref)));
  CHECK(max_abs_diff(y, conv.forward(x).detach()) <= 0.03 * max_abs(ref));
}

TEST_CASE("static quantization: calibrate, convert, close to float; convert without calibration fails") {
  auto net = small_cnn(7);
  Generator g(8);
  Tensor x = randn({16, 2, 6, 6}, {}, &g);
  net->eval();
  Tensor yf = net->forward(x).detach();
  Report prepared = prepare_static(*net, "minmax");
  CHECK(prepared.converted == std::vector<std::string>{"0", "4", "6"});
  CHECK(error_of([&] { convert(*net); }).find("saw no data") != std::string::npos);
  CHECK(net->pretty().find("ObservedConv2d") != std::string::npos);  // the failed convert changed nothing
  {
    NoGradGuard ng;
    net->forward(x);
  }
  Report r = convert(*net);
  CHECK(r.converted.size() == 3);
  CHECK(r.left_float.empty());
  CHECK(net->pretty().find("QuantizedConv2d") != std::string::npos);
  CHECK(net->pretty().find("QuantizedLinear") != std::string::npos);
  CHECK(max_abs_diff(net->forward(x), yf) <= 0.05 * max_abs(yf));
}

TEST_CASE("QAT: training through fake-quant lowers the loss; convert reproduces the fake-quant model") {
  auto net = small_cnn(9);
  Generator g(10);
  Tensor x = randn({32, 2, 6, 6}, {}, &g);
  Tensor y = randint(0, 3, {32}, DType::i64, &g);
  nn::optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});  // built on the float model
  prepare_qat(*net);
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    (s == 0 ? first : last) = loss.item();
  }
  CHECK(last < first);
  net->eval();
  Tensor fq = net->forward(x).detach();
  convert(*net);
  CHECK(max_abs_diff(net->forward(x), fq) <= 1e-4 * (1 + max_abs(fq)));
}

TEST_CASE("int8 models save and load: about a quarter of the float file, identical outputs after loading") {
  auto big = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(256, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 10)});
  Generator g(12);
  Tensor x = randn({4, 256}, {}, &g);
  const auto dir = std::filesystem::temp_directory_path();
  const std::string qp = (dir / "snug_test_quant_int8.safetensors").string(),
                    fp = (dir / "snug_test_quant_f32.safetensors").string();
  TensorMap t;
  for (auto& [k, v] : big->state_dict()) t.emplace_back(k, v);
  save_safetensors(fp, t);
  quantize_dynamic(*big);
  save_quantized(qp, *big);
  const double ratio = double(std::filesystem::file_size(qp)) / double(std::filesystem::file_size(fp));
  CHECK(ratio < 0.27);
  CHECK(ratio > 0.24);
  manual_seed(99);  // different float weights
  auto other = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(256, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 10)});
  quantize_dynamic(*other);
  CHECK(max_abs_diff(other->forward(x), big->forward(x)) > 0);
  load_quantized(qp, *other);
  CHECK(max_abs_diff(other->forward(x), big->forward(x)) == 0);
  CHECK(error_of([&] { load_quantized(fp, *other); }).find("not a snug quantized model") != std::string::npos);
  std::filesystem::remove(qp);
  std::filesystem::remove(fp);
}

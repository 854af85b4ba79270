// SPDX-License-Identifier: MIT
// parallel/: layer stacks, placement planning, pipelined micro-batches on
// virtual CPU devices (cpu:1, cpu:2, ...). Each test uses its own devices, so
// capacities and peaks set by one do not leak into another.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include <snug/autograd/engine.h>
#include <snug/core/generator.h>
#include <snug/cuda/cuda_api.h>
#include <snug/memory/allocator.h>
#include <snug/nn/accumulate.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/parallel/layer_stack.h>
#include <snug/parallel/pipeline.h>
#include <snug/parallel/placement.h>
#include "test_util.h"

using namespace snug;
using namespace snug::parallel;
using snug::testing::contains;

namespace {

nn::models::GPTConfig small_cfg(int64_t layers = 4) {
  nn::models::GPTConfig c;
  c.vocab = 65;
  c.block = 16;
  c.layers = layers;
  c.heads = 2;
  c.embd = 32;
  return c;
}

struct Batch {
  Tensor x, y;  // (B, T) i64 each
};

Batch make_batch(int64_t B, int64_t T, uint64_t seed) {
  manual_seed(seed);
  Tensor seq = randint(0, 65, Shape{B, T + 1});
  return {seq.narrow(1, 0, T).contiguous(), seq.narrow(1, 1, T).contiguous()};
}

// Gradients by parameter name, copied to cpu:0.
std::map<std::string, Tensor> grads_of(const nn::Module& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, p] : m.named_parameters()) {
    const std::string pname = name;  // clang 14 cannot capture structured bindings
    REQUIRE_MESSAGE(p.grad().defined(), pname);
    out[name] = p.grad().to(kCPU).contiguous();
  }
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

double rel_diff(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    num += (va[i] - vb[i]) * (va[i] - vb[i]);
    den += vb[i] * vb[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// The single-device reference: the same micro-batches, accumulated in order.
double reference_step(nn::models::GPT& gpt, const Batch& b, int64_t M) {
  LayerStack s = gpt_stack(gpt);
  auto xs = nn::split_batch(b.x, M), ys = nn::split_batch(b.y, M);
  double total = 0;
  for (int64_t m = 0; m < M; ++m) {
    const double w = static_cast<double>(ys[m].size(0)) / static_cast<double>(b.x.size(0));
    Tensor loss = s.loss(run_stack(s, xs[m]), ys[m]) * w;
    total += loss.item();
    loss.backward();
  }
  return total;
}

// `steps` pipelined steps on the same batch: the first and the last loss.
std::pair<double, double> train_same_batch(Pipeline& pipe, nn::optim::Optimizer& opt, const Batch& b, int steps) {
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    last = pipe.step(b.x, b.y);
    if (step == 0) first = last;
    opt.step();
  }
  return {first, last};
}

void reset_device(Device d) {
  memory::set_capacity(d, std::numeric_limits<std::size_t>::max());
  memory::empty_cache(d);
}

}  // namespace

TEST_CASE("stage_schedule: GPipe and 1F1B orders") {
  // Every stage runs each micro-batch's forward once and its backward once,
  // the backward after the forward; 1F1B keeps at most K - k in flight.
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b})
    for (int64_t K : {1, 2, 3, 4})
      for (int64_t M : {1, 2, 3, 8})
        for (int64_t k = 0; k < K; ++k) {
          auto ops = stage_schedule(s, k, K, M);
          REQUIRE(ops.size() == static_cast<size_t>(2 * M));
          std::vector<int> f(M, 0), b(M, 0);
          int64_t in_flight = 0, most = 0, next_b = 0;
          for (const auto& op : ops) {
            if (!op.backward) {
              CHECK(b[op.micro_batch] == 0);
              ++f[op.micro_batch];
              most = std::max(most, ++in_flight);
            } else {
              CHECK(f[op.micro_batch] == 1);
              CHECK(op.micro_batch == next_b++);  // backwards in micro-batch order
              ++b[op.micro_batch];
              --in_flight;
            }
          }
          for (int64_t m = 0; m < M; ++m) CHECK((f[m] == 1 && b[m] == 1));
          if (s == Schedule::one_f_one_b)
            CHECK(most == std::min(K - k, M));
          else
            CHECK(most == M);
        }
  auto ops = stage_schedule(Schedule::one_f_one_b, 0, 3, 4);
  std::string seq;
  for (const auto& op : ops) seq += str(op.backward ? "B" : "F", op.micro_batch, " ");
  CHECK(seq == "F0 F1 F2 B0 F3 B1 B2 B3 ");
  CHECK_THROWS_AS(stage_schedule(Schedule::gpipe, 3, 3, 4), ValueError);
}

TEST_CASE("run_stack across devices: the differentiable copy gives the single-device gradients") {
  set_num_threads(1);
  const Batch b = make_batch(4, 16, 7);
  manual_seed(1);
  nn::models::GPT ref(small_cfg(2));
  Tensor l0 = ref.loss(b.x, b.y);
  l0.backward();
  manual_seed(1);
  nn::models::GPT gpt(small_cfg(2));
  LayerStack s = gpt_stack(gpt);
  REQUIRE(s.size() == 4);
  place(s, manual_placement({Device("cpu:11"), Device("cpu:12")}, {0, 2, 4}, 4));
  CHECK(gpt.wte->weight.device() == Device("cpu:11"));
  CHECK(gpt.ln_f->weight.device() == Device("cpu:12"));
  Tensor l1 = s.loss(run_stack(s, b.x), b.y.to(Device("cpu:12")));
  CHECK(l1.item() == l0.item());
  l1.backward();
  auto g0 = grads_of(ref), g1 = grads_of(gpt);
  REQUIRE(g0.size() == g1.size());
  for (const auto& [name, g] : g0) {
    const std::string pname = name;  // clang 14 cannot capture structured bindings
    CHECK_MESSAGE(rel_diff(g1[pname], g) < 1e-6, pname);
  }
}

TEST_CASE("pipeline: losses and gradients equal the single-device run, 2 and 3 stages, both schedules") {
  set_num_threads(1);
  const int64_t M = 4;
  const Batch b = make_batch(8, 16, 11);
  manual_seed(5);
  nn::models::GPT ref(small_cfg(4));
  const double ref_loss = reference_step(ref, b, M);
  const auto ref_grads = grads_of(ref);
  // One backward of the whole batch's mean loss: equal up to summation order.
  manual_seed(5);
  nn::models::GPT full(small_cfg(4));
  const double full_loss = full.loss(b.x, b.y).item();
  full.loss(b.x, b.y).backward();
  const auto full_grads = grads_of(full);

  int dev = 20;
  for (int64_t K : {2, 3})
    for (Schedule sched : {Schedule::gpipe, Schedule::one_f_one_b})
      for (bool ckpt : {false, true}) {
        CAPTURE(K);
        CAPTURE(schedule_name(sched));
        CAPTURE(ckpt);
        manual_seed(5);
        nn::models::GPT gpt(small_cfg(4));
        LayerStack s = gpt_stack(gpt);
        std::vector<Device> devs;
        for (int64_t k = 0; k < K; ++k) devs.push_back(Device(DeviceType::CPU, dev++));
        // 6 layers: embed, 4 blocks, head.
        Placement p = K == 2 ? manual_placement(devs, {0, 3, 6}, 6) : manual_placement(devs, {0, 2, 4, 6}, 6);
        place(s, p);
        Pipeline pipe(s, p,
                      {.micro_batches = M, .schedule = sched, .checkpoint_stages = ckpt, .record_timeline = true});
        const double loss = pipe.step(b.x, b.y);
        CHECK(loss == doctest::Approx(ref_loss).epsilon(1e-12));
        CHECK(loss == doctest::Approx(full_loss).epsilon(1e-6));
        const auto g = grads_of(gpt);
        REQUIRE(g.size() == ref_grads.size());
        for (const auto& [name, rg] : ref_grads) {
          const std::string pname = name;  // clang 14 cannot capture structured bindings
          CAPTURE(pname);
          // The tied embedding gets one part from the first stage and one from
          // the last; they may arrive in either order.
          if (name == "wte.weight")
            CHECK(rel_diff(g.at(name), rg) < 1e-6);
          else
            CHECK(bitwise_equal(g.at(name), rg));
          CHECK(rel_diff(g.at(name), full_grads.at(name)) < 1e-5);
        }
        CHECK(pipe.timeline().size() == static_cast<size_t>(2 * M * K));
        CHECK(pipe.idle_fraction() >= 0.0);
        CHECK(pipe.idle_fraction() < 1.0);
        for (const Device& d : devs) reset_device(d);
      }
}

TEST_CASE("placement: each device's measured peak matches the plan within 10%") {
  set_num_threads(1);
  nn::models::GPTConfig cfg = small_cfg(6);
  cfg.embd = 64;
  cfg.block = 64;
  const int64_t B = 8, M = 4;
  const Batch b = make_batch(B, cfg.block, 3);
  for (Schedule sched : {Schedule::gpipe, Schedule::one_f_one_b}) {
    CAPTURE(schedule_name(sched));
    const int base = sched == Schedule::gpipe ? 40 : 45;
    manual_seed(2);
    nn::models::GPT gpt(cfg);
    LayerStack s = gpt_stack(gpt);
    auto mb_x = nn::split_batch(b.x, M)[0].contiguous(), mb_y = nn::split_batch(b.y, M)[0].contiguous();
    StackProfile prof = profile_stack(s, mb_x, mb_y, /*optimizer_slots=*/2);
    REQUIRE(prof.layers.size() == 8);
    std::vector<Device> devs{Device(DeviceType::CPU, base), Device(DeviceType::CPU, base + 1),
                             Device(DeviceType::CPU, base + 2)};
    const StepShape shape{.micro_batches = M, .schedule = sched};
    Placement p = plan_placement(prof, devs, Policy::balance_memory, shape);
    place(s, p);
    nn::optim::AdamW opt(s.parameters(), {.lr = 1e-3});
    Pipeline pipe(s, p, {.micro_batches = M, .schedule = sched});
    // Step 1 creates the optimizer state; step 2 is the steady state the plan describes.
    for (int step = 0; step < 2; ++step) {
      for (const Device& d : devs) memory::reset_peak(d);
      opt.zero_grad();
      pipe.step(b.x, b.y);
      opt.step();
    }
    for (size_t k = 0; k < devs.size(); ++k) {
      const double measured = static_cast<double>(memory::peak_allocated(devs[k]));
      const double predicted = static_cast<double>(p.predicted_peak[k]);
      INFO(devs[k].str(), " measured ", measured, " predicted ", predicted, " plan ", p.str());
      CHECK(std::abs(measured - predicted) <= 0.10 * measured);
    }
    for (const Device& d : devs) reset_device(d);
  }
}

TEST_CASE("placement: a 16-layer GPT that runs out of memory on one device trains on two") {
  set_num_threads(1);
  nn::models::GPTConfig cfg;
  cfg.layers = 16;  // width 128, block 128, 4 heads: the recomputation issue's GPT, batch 4
  const int64_t B = 4;
  const Batch b = make_batch(B, cfg.block, 9);
  // C is 80% of what one unconstrained step needs on one device (measured on
  // cpu:59), so the test keeps its meaning when kernels change a step's memory.
  std::size_t C = 0;
  {
    const Device free_dev("cpu:59");
    manual_seed(4);
    nn::models::GPT gpt(cfg);
    gpt.to(free_dev);
    nn::optim::AdamW opt(gpt.parameters(), {.lr = 1e-3});
    memory::reset_peak(free_dev);
    opt.zero_grad();
    gpt.loss(b.x.to(free_dev), b.y.to(free_dev)).backward();
    opt.step();
    C = memory::peak_allocated(free_dev) * 8 / 10;
    MESSAGE("capacity C = ", C, " bytes (80% of an unconstrained step on one device)");
  }
  reset_device(Device("cpu:59"));
  {
    const Device one("cpu:60");
    memory::set_capacity(one, C);
    manual_seed(4);
    nn::models::GPT gpt(cfg);
    gpt.to(one);
    nn::optim::AdamW opt(gpt.parameters(), {.lr = 1e-3});
    auto step = [&] {
      opt.zero_grad();
      gpt.loss(b.x.to(one), b.y.to(one)).backward();
      opt.step();
    };
    CHECK_THROWS_AS(step(), OutOfMemoryError);
    reset_device(one);
  }
  {
    const std::vector<Device> devs{Device("cpu:61"), Device("cpu:62")};
    for (const Device& d : devs) memory::set_capacity(d, C);
    manual_seed(4);
    nn::models::GPT gpt(cfg);
    LayerStack s = gpt_stack(gpt);
    StackProfile prof = profile_stack(s, b.x, b.y, 2);  // on cpu:0, before placing
    Placement p = plan_placement(prof, devs, Policy::balance_memory, {.micro_batches = 1});
    place(s, p);
    nn::optim::AdamW opt(s.parameters(), {.lr = 1e-3});
    Pipeline pipe(s, p, {.micro_batches = 1});
    const auto [first, last] = train_same_batch(pipe, opt, b, 3);
    CHECK(last < first);  // it trains (same batch three times)
    for (const Device& d : devs) {
      MESSAGE(d.str(), " peak ", memory::peak_allocated(d), " of ", C);
      CHECK(memory::peak_allocated(d) <= C);
      reset_device(d);
    }
  }
}

TEST_CASE("placement: impossible and malformed placements get clear errors") {
  set_num_threads(1);
  manual_seed(1);
  nn::models::GPT gpt(small_cfg(2));
  LayerStack s = gpt_stack(gpt);
  const Batch b = make_batch(4, 16, 1);
  StackProfile prof = profile_stack(s, b.x, b.y, 2);
  const std::vector<Device> devs{Device("cpu:70"), Device("cpu:71")};
  try {
    plan_placement(prof, devs, Policy::balance_memory, {.micro_batches = 1}, {64 << 10, 64 << 10});
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    CHECK(contains(msg, "no split of 4 layers"));
    CHECK(contains(msg, "cpu:70"));
    CHECK(contains(msg, "over"));
    CHECK(contains(msg, "largest single layer"));
    CHECK(e.capacity() == (64u << 10));
    CHECK(e.requested() > e.capacity());
  }
  CHECK_THROWS_AS(plan_placement(prof, devs, Policy::balance_time, {.micro_batches = 1}, {1 << 20}), ValueError);
  CHECK_THROWS_AS(plan_placement(prof, std::vector<Device>(5, Device("cpu:1")), Policy::balance_memory, {}),
                  ValueError);
  CHECK_THROWS_AS(manual_placement(devs, {0, 0, 4}, 4), ValueError);
  CHECK_THROWS_AS(manual_placement(devs, {0, 2, 3}, 4), ValueError);
  CHECK_THROWS_AS(manual_placement(devs, {0, 4}, 4), ValueError);
  CHECK_THROWS_AS(manual_placement({Device("cpu:1"), Device("cpu:1")}, {0, 2, 4}, 4), ValueError);
  CHECK_THROWS_AS(parse_devices("cpu:1,,cpu:2"), ValueError);
  CHECK_THROWS_AS(parse_devices("cpu:1,cpu:1"), ValueError);
  CHECK_THROWS_AS(parse_devices("tpu:0"), DeviceError);
  CHECK(parse_devices("cpu:1,cpu:2").size() == 2);
  CHECK_THROWS_AS(parse_schedule("zigzag"), ValueError);
  CHECK_THROWS_AS(parse_policy("fastest"), ValueError);
  // A pipeline over a stack that was not placed as its placement says.
  CHECK_THROWS_AS(Pipeline(s, manual_placement(devs, {0, 2, 4}, 4), {}), DeviceError);
  // Both policies agree on a split that fits when memory is plentiful.
  Placement pm = plan_placement(prof, devs, Policy::balance_memory, {.micro_batches = 2});
  Placement pt = plan_placement(prof, devs, Policy::balance_time, {.micro_batches = 2});
  CHECK(pm.bounds.size() == 3);
  CHECK(pt.bounds.size() == 3);
  CHECK(pm.predicted_peak.size() == 2);
}

// The offload cases' model: a 6-layer GPT of width 64, its stack measured on the host.
struct OffloadCase {
  OffloadCase() : cfg(make_cfg()), b(make_batch(8, cfg.block, 5)), gpt((manual_seed(3), cfg)), s(gpt_stack(gpt)) {
    prof = profile_stack(s, b.x, b.y, 2);
    N = static_cast<int64_t>(prof.layers.size());
  }
  static nn::models::GPTConfig make_cfg() {
    set_num_threads(1);
    nn::models::GPTConfig c = small_cfg(6);
    c.embd = 64;
    c.block = 64;
    return c;
  }
  nn::models::GPTConfig cfg;
  Batch b;
  nn::models::GPT gpt;
  LayerStack s;
  StackProfile prof;
  int64_t N = 0;
};

TEST_CASE("placement: the fill (offload) policy keeps all it can on the first device") {
  // The offload case on virtual devices: a small first device (as a GPU short
  // of memory) and a large second one (as the host).
  OffloadCase c;
  const Batch& b = c.b;
  LayerStack& s = c.s;
  const StackProfile& prof = c.prof;
  const int64_t N = c.N;
  const std::vector<Device> devs{Device("cpu:90"), Device("cpu:91")};
  const StepShape shape{.micro_batches = 1};
  // A first-device capacity that holds about half the stack, by the planner's own numbers.
  Placement half = manual_placement(devs, {0, N / 2, N}, N);
  predict(prof, shape, half);
  const int64_t cap0 = half.predicted_peak[0] + 1024, cap1 = int64_t(1) << 40;
  Placement p = plan_placement(prof, devs, Policy::fill, shape, {cap0, cap1});
  MESSAGE("fill: ", p.str(), " (first device ", cap0, " bytes)");
  REQUIRE(p.bounds.size() == 3);
  const int64_t cut = p.bounds[1];
  CHECK(cut >= N / 2);
  CHECK(p.predicted_peak[0] <= cap0);
  if (cut < N - 1) {  // one more layer would not have fitted
    Placement more = manual_placement(devs, {0, cut + 1, N}, N);
    predict(prof, shape, more);
    CHECK(more.predicted_peak[0] > cap0);
  }
  // It trains. The planner budgets allocated bytes; the device's limit is on
  // reserved bytes, which come in 2 MiB segments, so the limit gets that slack
  // and the allocated peak is held to the plan's 10% accuracy.
  memory::set_capacity(devs[0], static_cast<std::size_t>(cap0 + (4 << 20)));
  place(s, p);
  nn::optim::AdamW opt(s.parameters(), {.lr = 1e-3});
  Pipeline pipe(s, p, {.micro_batches = 1});
  const auto [first, last] = train_same_batch(pipe, opt, b, 3);
  CHECK(last < first);
  CHECK(static_cast<double>(memory::peak_allocated(devs[0])) <= 1.10 * static_cast<double>(cap0));
  // When even one layer does not fit the first device, it says so.
  CHECK_THROWS_AS(plan_placement(prof, devs, Policy::fill, shape, {1024, cap1}), OutOfMemoryError);
  CHECK(parse_policy("offload") == Policy::fill);
  for (const Device& d : devs) reset_device(d);
}

TEST_CASE("placement on a GPU: cuda:0 plus CPU offload, capacities from the GPU's free memory") {
  if (cuda::device_count() == 0) {
    MESSAGE("skipped: no CUDA GPU (", cuda::compiled() ? "none visible" : cuda::plugin_error(), ")");
    return;
  }
  OffloadCase c;
  const Batch& b = c.b;
  LayerStack& s = c.s;
  const StackProfile& prof = c.prof;
  const int64_t N = c.N;
  const Device gpu("cuda:0");
  const std::vector<Device> devs{gpu, kCPU};
  const StepShape shape{.micro_batches = 1};
  // No capacity set: the GPU's is its free memory (plus the pool's own), far
  // more than this model needs, so fill keeps all but the last layer there.
  const std::size_t avail = memory::available(gpu);
  CHECK(avail > 0);
  CHECK(avail <= cuda::properties(0).total_memory);
  Placement roomy = plan_placement(prof, devs, Policy::fill, shape);
  CHECK(roomy.bounds[1] == N - 1);
  // A capacity that holds half the stack: the rest is offloaded to the host, and it trains.
  Placement half = manual_placement(devs, {0, N / 2, N}, N);
  predict(prof, shape, half);
  const int64_t cap0 = half.predicted_peak[0] + 1024;
  memory::set_capacity(gpu, static_cast<std::size_t>(cap0 + (4 << 20)));
  Placement p = plan_placement(prof, devs, Policy::fill, shape, {cap0, int64_t(1) << 40});
  MESSAGE("cuda:0 + cpu: ", p.str());
  CHECK(p.bounds[1] >= N / 2);
  CHECK(p.bounds[1] < N);
  place(s, p);
  nn::optim::AdamW opt(s.parameters(), {.lr = 1e-3});
  Pipeline pipe(s, p, {.micro_batches = 2});
  const auto [first, last] = train_same_batch(pipe, opt, b, 3);
  CHECK(last < first);
  CHECK(static_cast<double>(memory::peak_allocated(gpu)) <= 1.10 * static_cast<double>(cap0));
  memory::set_capacity(gpu, SIZE_MAX);  // no limit again
}

TEST_CASE("pipeline: a stage that fails stops the others with the error instead of hanging") {
  set_num_threads(1);
  manual_seed(1);
  nn::models::GPTConfig cfg = small_cfg(4);
  cfg.embd = 64;
  cfg.block = 64;
  nn::models::GPT gpt(cfg);
  LayerStack s = gpt_stack(gpt);
  const std::vector<Device> devs{Device("cpu:80"), Device("cpu:81"), Device("cpu:82")};
  Placement p = manual_placement(devs, {0, 2, 4, 6}, 6);
  place(s, p);
  // The middle stage's device keeps what it holds (its parameters) and gets
  // no more: its activations (megabytes) need a new segment.
  memory::set_capacity(devs[1], memory::reserved(devs[1]));
  const Batch b = make_batch(8, 64, 2);
  for (Schedule sched : {Schedule::gpipe, Schedule::one_f_one_b}) {
    Pipeline pipe(s, p, {.micro_batches = 4, .schedule = sched});
    CHECK_THROWS_AS(pipe.step(b.x, b.y), OutOfMemoryError);
  }
  // With the limit lifted the same pipeline runs.
  reset_device(devs[1]);
  gpt.zero_grad();
  Pipeline pipe(s, p, {.micro_batches = 4});
  CHECK(std::isfinite(pipe.step(b.x, b.y)));
  for (const Device& d : devs) reset_device(d);
}

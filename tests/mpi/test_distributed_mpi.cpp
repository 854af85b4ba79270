// SPDX-License-Identifier: MIT
// distributed/ across processes: run by ctest as
//   mpirun -np 2 test_distributed_mpi
// (tests/CMakeLists.txt; any world size >= 2 works). Every rank runs every
// test case in the same order, so the collectives line up.
//
// The equivalence tests compare, on each rank, a DataParallel model trained
// on this rank's b rows with a plain model trained in the same process on all
// N*b rows: after k steps both must hold the same parameters.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <snug/autograd/checkpoint.h>
#include <snug/distributed/data_parallel.h>
#include <snug/distributed/mpi.h>
#include <snug/nn/accumulate.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/training_state.h>
#include "test_util.h"

using namespace snug;
namespace dist = snug::distributed;

namespace {

std::shared_ptr<dist::ProcessGroup> world() {
  auto pg = dist::init_process_group({.backend = "mpi", .timeout = std::chrono::seconds(60)});
  REQUIRE(pg->size() >= 2);
  return pg;
}

struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> a, b, c;
  bool recompute = false;  // the middle layer in a recomputation segment (autograd::checkpoint)
  explicit Mlp(DType dt, bool recompute_middle = false) : nn::Module("Mlp"), recompute(recompute_middle) {
    a = register_module("a", std::make_shared<nn::Linear>(6, 16, true, TensorOptions(dt)));
    b = register_module("b", std::make_shared<nn::Linear>(16, 16, true, TensorOptions(dt)));
    c = register_module("c", std::make_shared<nn::Linear>(16, 3, true, TensorOptions(dt)));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = a->forward(x).tanh();
    if (recompute)
      h = autograd::checkpoint([this](const std::vector<Tensor>& in) { return std::vector<Tensor>{b->forward(in[0])}; },
                               {h})[0];
    else
      h = b->forward(h);
    return c->forward(h.tanh());
  }
  Tensor loss(const Tensor& x, const Tensor& y) { return nn::functional::mse_loss(forward(x), y); }
};

// The largest, over parameters, of ||a - b|| / ||b||.
double max_rel_diff(nn::Module& a, nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    auto va = pa[i].to_vector<double>(), vb = pb[i].to_vector<double>();
    double num = 0, den = 0;
    for (size_t k = 0; k < va.size(); ++k) {
      num += (va[k] - vb[k]) * (va[k] - vb[k]);
      den += vb[k] * vb[k];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

// Step s's global batch of n*b rows: the same on every rank.
std::pair<Tensor, Tensor> global_batch(int64_t rows, int64_t step, DType dt) {
  Generator g(1000 + static_cast<uint64_t>(step));
  return {randn({rows, 6}, dt, &g), randn({rows, 3}, dt, &g)};
}

enum class Opt { sgd, adamw };
std::unique_ptr<nn::optim::Optimizer> make_opt(Opt o, nn::Module& m) {
  if (o == Opt::sgd)
    return std::make_unique<nn::optim::SGD>(m.parameters(), nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  return std::make_unique<nn::optim::AdamW>(m.parameters(), nn::optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
}

// k steps of DataParallel on this rank's b rows (accum micro-batches each,
// all but the last under no_sync) against k steps of one model on all rows.
double dp_vs_single(DType dt, Opt o, int64_t b, int64_t k, int64_t accum, int64_t bucket_bytes,
                    bool recompute = false) {
  auto pg = world();
  const int64_t n = pg->size(), r = pg->rank();
  // Different initial weights per rank: DataParallel must copy rank 0's.
  manual_seed(42 + static_cast<uint64_t>(r));
  Mlp model(dt, recompute);
  manual_seed(42);
  Mlp ref(dt);
  dist::DataParallel dp(model, pg, {.bucket_bytes = bucket_bytes});
  CHECK(max_rel_diff(model, ref) == 0.0);
  auto opt = make_opt(o, model), ref_opt = make_opt(o, ref);
  for (int64_t s = 0; s < k; ++s) {
    auto [x, y] = global_batch(n * b, s, dt);
    ref_opt->zero_grad();
    ref.loss(x, y).backward();
    ref_opt->step();

    opt->zero_grad();
    Tensor xr = x.narrow(0, r * b, b), yr = y.narrow(0, r * b, b);
    std::vector<Tensor> xs = nn::split_batch(xr, accum), ys = nn::split_batch(yr, accum);
    nn::GradAccumulator acc(static_cast<double>(b));
    for (int64_t m = 0; m < accum; ++m) {
      if (m + 1 < accum) {
        auto guard = dp.no_sync();
        acc.backward(model.loss(xs[m], ys[m]), static_cast<double>(xs[m].size(0)));
      } else {
        acc.backward(model.loss(xs[m], ys[m]), static_cast<double>(xs[m].size(0)));
      }
    }
    opt->step();
  }
  CHECK(dp.stats().syncs == k);  // one sync per step, none on micro-steps
  return max_rel_diff(model, ref);
}

}  // namespace

TEST_CASE("all_reduce: sum, avg, max, min over ranks, in f32, f64 and i64") {
  auto pg = world();
  const int n = pg->size(), r = pg->rank();
  Tensor f = from_vector(std::vector<float>{float(r), float(r * 10), 1.5f});
  pg->all_reduce(f, dist::ReduceOp::sum);
  const float tri = float(n * (n - 1) / 2);
  CHECK(f.to_vector<float>() == std::vector<float>{tri, 10 * tri, 1.5f * n});
  Tensor d = from_vector(std::vector<double>{double(r), 1.0});
  pg->all_reduce(d, dist::ReduceOp::avg);
  CHECK(d.to_vector<double>() == std::vector<double>{double(n - 1) / 2, 1.0});
  Tensor i = from_vector(std::vector<int64_t>{r, -r, int64_t(1) << 40});
  Tensor j = i.clone();
  pg->all_reduce(i, dist::ReduceOp::max);
  pg->all_reduce(j, dist::ReduceOp::min);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{n - 1, 0, int64_t(1) << 40});
  CHECK(j.to_vector<int64_t>() == std::vector<int64_t>{0, -(n - 1), int64_t(1) << 40});
  // A large one (several MPI segments), started async and waited later.
  Tensor big = full({1 << 20}, double(r + 1));
  auto w = pg->all_reduce_async(big);
  w->wait();
  CHECK(w->is_completed());
  const double want = double(n * (n + 1) / 2);
  CHECK((big - want).abs().sum().item() == 0.0);
}

TEST_CASE("broadcast, all_gather and barrier") {
  auto pg = world();
  const int n = pg->size(), r = pg->rank();
  Tensor t = full({2, 3}, double(r));
  pg->broadcast(t, n - 1);
  CHECK(t.to_vector<float>() == std::vector<float>(6, float(n - 1)));
  Tensor h = full({4}, double(r), DType::f16);  // no arithmetic: any dtype moves
  pg->broadcast(h, 0);
  CHECK(h.to_vector<float>() == std::vector<float>(4, 0.f));
  Tensor g = pg->all_gather(from_vector(std::vector<int32_t>{r, 100 + r}));
  REQUIRE(g.shape() == Shape{n, 2});
  for (int k = 0; k < n; ++k) CHECK(g.select(0, k).to_vector<int32_t>() == std::vector<int32_t>{k, 100 + k});
  pg->barrier();
}

TEST_CASE("collectives refuse what they cannot do, with errors that say why") {
  auto pg = world();
  CHECK_THROWS_WITH_AS(pg->all_reduce(ones({2}, DType::f16)), doctest::Contains("f16"), DTypeError);
  CHECK_THROWS_AS(pg->all_reduce(ones({2}, DType::i32), dist::ReduceOp::avg), DTypeError);
  CHECK_THROWS_WITH_AS(pg->all_reduce(zeros({3, 3}).t()), doctest::Contains("contiguous"), ValueError);
  CHECK_THROWS_AS(pg->broadcast(zeros({2}), pg->size()), ValueError);
  CHECK_THROWS_AS(pg->all_gather(zeros({2}), zeros({2})), ShapeError);
  pg->barrier();  // still in step after the refusals (none reached MPI)
}

TEST_CASE("DataParallel: N ranks with batch b equal one process with batch N*b after k steps") {
  // f64: exact up to summation order. f32: the same up to rounding.
  const double sgd64 = dp_vs_single(DType::f64, Opt::sgd, 4, 5, 1, 25 << 20);
  const double adamw64 = dp_vs_single(DType::f64, Opt::adamw, 4, 5, 1, 25 << 20);
  const double sgd32 = dp_vs_single(DType::f32, Opt::sgd, 4, 5, 1, 256);  // 256-byte buckets: many of them
  const double adamw32 = dp_vs_single(DType::f32, Opt::adamw, 4, 5, 1, 256);
  MESSAGE("max relative parameter difference after 5 steps: f64 SGD ", sgd64, ", f64 AdamW ", adamw64, ", f32 SGD ",
          sgd32, ", f32 AdamW ", adamw32);
  CHECK(sgd64 < 1e-12);
  CHECK(adamw64 < 1e-12);
  CHECK(sgd32 < 1e-6);
  CHECK(adamw32 < 1e-6);
}

TEST_CASE("DataParallel: accumulation with no_sync micro-steps gives the same parameters") {
  const double a64 = dp_vs_single(DType::f64, Opt::adamw, 6, 4, 3, 25 << 20);
  const double a32 = dp_vs_single(DType::f32, Opt::sgd, 6, 4, 2, 512);
  MESSAGE("with accumulation (3 and 2 micro-batches per step): f64 AdamW ", a64, ", f32 SGD ", a32);
  CHECK(a64 < 1e-12);
  CHECK(a32 < 1e-6);
}

TEST_CASE("DataParallel + recomputation: a checkpointed segment's gradients are reduced like the others") {
  // The middle layer's gradients are accumulated in backward's recomputation;
  // their hooks must still start their bucket (with accumulation, too).
  const double plain = dp_vs_single(DType::f64, Opt::adamw, 4, 3, 1, 25 << 20, /*recompute=*/true);
  const double accum = dp_vs_single(DType::f32, Opt::sgd, 6, 3, 2, 256, /*recompute=*/true);
  MESSAGE("with a recomputed middle layer: f64 AdamW ", plain, ", f32 SGD with accumulation ", accum);
  CHECK(plain < 1e-12);
  CHECK(accum < 1e-6);
}

TEST_CASE("DataParallel + GradScaler: an inf on one rank makes every rank skip the step") {
  auto pg = world();
  manual_seed(9);
  Mlp model(DType::f32);
  dist::DataParallel dp(model, pg);
  nn::optim::SGD opt(model.parameters(), {.lr = 0.1});
  nn::amp::GradScaler scaler({.init_scale = 1024.0});
  auto before = model.a->weight.clone();
  auto [x, y] = global_batch(4, 0, DType::f32);
  if (pg->rank() == 1) y = full_like(y, INFINITY);  // an inf loss and gradient on this rank only
  opt.zero_grad();
  scaler.scale(model.loss(x, y)).backward();
  CHECK_FALSE(scaler.step(opt));  // every rank: the reduced gradient has the inf
  scaler.update();
  CHECK(scaler.get_scale() == 512.0);
  CHECK(model.a->weight.to_vector<float>() == before.to_vector<float>());
  // A clean step: gradients reduced while scaled, unscaled afterwards, equal on every rank.
  auto [x2, y2] = global_batch(4, 1, DType::f32);
  opt.zero_grad();
  scaler.scale(model.loss(x2.narrow(0, pg->rank() % 4, 1), y2.narrow(0, pg->rank() % 4, 1))).backward();
  CHECK(scaler.step(opt));
  scaler.update();
  Tensor w = model.a->weight.detach().contiguous();
  Tensor all = pg->all_gather(w);
  for (int k = 1; k < pg->size(); ++k)
    CHECK(all.select(0, k).to_vector<float>() == all.select(0, 0).to_vector<float>());
}

TEST_CASE("DataParallel + checkpoints: rank 0 saves, every rank resumes, the run continues as if uninterrupted") {
  auto pg = world();
  const std::string path = "dist_ckpt_test.safetensors";
  auto train = [&](Mlp& m, nn::optim::Optimizer& o, dist::DataParallel& dp, int64_t from, int64_t to) {
    for (int64_t s = from; s < to; ++s) {
      auto [x, y] = global_batch(2 * pg->size(), s, DType::f32);
      o.zero_grad();
      m.loss(x.narrow(0, 2 * pg->rank(), 2), y.narrow(0, 2 * pg->rank(), 2)).backward();
      o.step();
    }
  };
  manual_seed(11);
  Mlp full_run(DType::f32);
  dist::DataParallel dp_full(full_run, pg);
  nn::optim::AdamW opt_full(full_run.parameters(), {.lr = 1e-2});
  train(full_run, opt_full, dp_full, 0, 6);

  manual_seed(11);
  Mlp first(DType::f32);
  dist::DataParallel dp_first(first, pg);
  nn::optim::AdamW opt_first(first.parameters(), {.lr = 1e-2});
  train(first, opt_first, dp_first, 0, 3);
  if (pg->rank() == 0) nn::save_training_state(path, {&first, &opt_first}, 3);
  pg->barrier();  // the file is complete before anyone reads it

  manual_seed(12345);  // a different start: everything must come from the file
  Mlp resumed(DType::f32);
  nn::optim::AdamW opt_resumed(resumed.parameters(), {.lr = 1e-2});
  auto ck = nn::load_training_state(path, {&resumed, &opt_resumed});
  CHECK(ck.step == 3);
  dist::DataParallel dp_resumed(resumed, pg);
  train(resumed, opt_resumed, dp_resumed, 3, 6);
  CHECK(max_rel_diff(resumed, full_run) == 0.0);
  pg->barrier();
  if (pg->rank() == 0) std::filesystem::remove(path);
}

TEST_CASE("DataParallel refuses ranks whose models differ") {
  auto pg = world();
  nn::Linear same(4, 4), differs(4, pg->rank() == 0 ? 4 : 5);
  CHECK_NOTHROW(dist::DataParallel(same, pg));
  CHECK_THROWS_WITH_AS(dist::DataParallel(differs, pg), doctest::Contains("differs"), DistributedError);
}

TEST_CASE("a rank that does not join a collective makes the others time out with a clear error, not hang") {
  // Its own group (communicator), so the broken group does not touch the others.
  auto pg = dist::make_mpi_group(std::chrono::milliseconds(500));
  Tensor t = ones({8});
  if (pg->rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    try {
      pg->all_reduce(t);
    } catch (const DistributedTimeoutError& e) {
      msg = e.what();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("rank 0 got after ", s, " s: ", msg);
    CHECK(msg.find("all_reduce(sum) of 32 bytes") != std::string::npos);
    CHECK(msg.find("did not finish within 0.5 s") != std::string::npos);
    CHECK(s < 5.0);
    CHECK(pg->broken());
    CHECK_THROWS_WITH_AS(pg->barrier(), doctest::Contains("broken"), DistributedError);
  } else {
    // Late by 1.2 s (as a crashed or stuck rank would be forever); joining
    // at last lets rank 0's abandoned request end (its group gives a broken
    // group's collectives 2 s when it goes) so the job exits cleanly.
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    pg->all_reduce(t);
  }
}

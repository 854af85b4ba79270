// SPDX-License-Identifier: MIT
// distributed/ in one process: the local group, finding the world from the
// environment, and DataParallel's buckets, hooks and no_sync on a group of
// one. The multi-process tests run under mpirun: tests/mpi/.
#include <cstdlib>

#include <snug/autograd/engine.h>
#include <snug/autograd/node.h>
#include <snug/distributed/data_parallel.h>
#include <snug/distributed/mpi.h>
#include <snug/distributed/nccl.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include "test_util.h"

using namespace snug;
namespace dist = snug::distributed;

namespace {

// Sets (or clears, value null) an environment variable for one scope.
struct EnvVar {
  std::string name;
  std::string old;
  bool had;
  EnvVar(const char* n, const char* value) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    if (value)
      setenv(n, value, 1);
    else
      unsetenv(n);
  }
  ~EnvVar() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> a, b, unused;
  explicit Mlp(bool with_unused = false) : nn::Module("Mlp") {
    a = register_module("a", std::make_shared<nn::Linear>(4, 8));
    b = register_module("b", std::make_shared<nn::Linear>(8, 2));
    if (with_unused) unused = register_module("unused", std::make_shared<nn::Linear>(3, 3));
  }
  Tensor forward(const Tensor& x) override { return b->forward(a->forward(x).tanh()); }
};

}  // namespace

TEST_CASE("detect_world reads the launchers' variables, explicit ones first") {
  EnvVar e1("SNUG_RANK", nullptr), e2("SNUG_WORLD_SIZE", nullptr), e3("OMPI_COMM_WORLD_RANK", nullptr),
      e4("OMPI_COMM_WORLD_SIZE", nullptr), e5("PMI_RANK", nullptr), e6("PMI_SIZE", nullptr),
      e7("SLURM_PROCID", nullptr), e8("SLURM_NTASKS", nullptr), e9("SLURM_LOCALID", nullptr);
  CHECK(dist::detect_world().size == 1);
  CHECK(dist::detect_world().source == "none");
  {
    EnvVar r("SLURM_PROCID", "3"), n("SLURM_NTASKS", "8"), l("SLURM_LOCALID", "1");
    dist::WorldInfo w = dist::detect_world();
    CHECK(w.rank == 3);
    CHECK(w.size == 8);
    CHECK(w.local_rank == 1);
    CHECK(w.source.find("Slurm") != std::string::npos);
    EnvVar r2("OMPI_COMM_WORLD_RANK", "1"), n2("OMPI_COMM_WORLD_SIZE", "2");
    CHECK(dist::detect_world().size == 2);  // mpirun inside an allocation wins over Slurm
    EnvVar r3("SNUG_RANK", "0"), n3("SNUG_WORLD_SIZE", "4");
    CHECK(dist::detect_world().size == 4);
  }
  {
    EnvVar r("PMI_RANK", "5"), n("PMI_SIZE", "2");
    CHECK_THROWS_AS(dist::detect_world(), ValueError);  // rank 5 of 2
  }
  {
    EnvVar r("SNUG_RANK", "x"), n("SNUG_WORLD_SIZE", "2");
    CHECK_THROWS_WITH_AS(dist::detect_world(), doctest::Contains("SNUG_RANK"), ValueError);
  }
}

TEST_CASE("SNUG_DIST_TIMEOUT sets the default timeout; bad values are errors") {
  {
    EnvVar t("SNUG_DIST_TIMEOUT", "2.5");
    CHECK(dist::default_timeout().count() == 2500);
  }
  {
    EnvVar t("SNUG_DIST_TIMEOUT", "soon");
    CHECK_THROWS_AS(dist::default_timeout(), ValueError);
  }
  EnvVar t("SNUG_DIST_TIMEOUT", nullptr);
  CHECK(dist::default_timeout().count() == 300000);
}

TEST_CASE("the local group: collectives are identities, all_gather stacks one tensor") {
  auto pg = dist::make_local_group();
  CHECK(pg->rank() == 0);
  CHECK(pg->size() == 1);
  CHECK(std::string(pg->backend()) == "local");
  CHECK(pg->device() == kCPU);
  Tensor t = from_vector(std::vector<float>{1, 2, 3});
  pg->all_reduce(t, dist::ReduceOp::avg);
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3});
  pg->broadcast(t, 0);
  Tensor g = pg->all_gather(t);
  CHECK(g.shape() == Shape{1, 3});
  CHECK(g.to_vector<float>() == std::vector<float>{1, 2, 3});
  pg->barrier();
  CHECK_THROWS_AS(pg->broadcast(t, 1), ValueError);
  CHECK_THROWS_AS(pg->all_reduce(zeros({4, 4}).t()), ValueError);  // not contiguous
  CHECK_THROWS_AS(pg->all_reduce(Tensor()), ValueError);
}

TEST_CASE("init_process_group: one process without a launcher gets the local group") {
  EnvVar e1("SNUG_RANK", nullptr), e2("SNUG_WORLD_SIZE", nullptr), e3("OMPI_COMM_WORLD_RANK", nullptr),
      e4("OMPI_COMM_WORLD_SIZE", nullptr), e5("PMI_RANK", nullptr), e6("PMI_SIZE", nullptr),
      e7("SLURM_PROCID", nullptr), e8("SLURM_NTASKS", nullptr);
  auto pg = dist::init_process_group();
  CHECK(std::string(pg->backend()) == "local");
  CHECK(dist::default_group() == pg);
  CHECK(dist::init_process_group() == pg);  // once per process
}

TEST_CASE("backends not built say so") {
  if (!dist::nccl_available())
    CHECK_THROWS_WITH_AS(dist::make_nccl_group({}), doctest::Contains("without NCCL"), DistributedError);
  if (!dist::mpi_available())
    CHECK_THROWS_WITH_AS(dist::make_mpi_group(std::chrono::seconds(1)), doctest::Contains("without MPI"),
                         DistributedError);
}

TEST_CASE("post-accumulate-grad hooks run once per backward after .grad holds the sum, and can be removed") {
  Tensor w = ones({3}).requires_grad_();
  std::vector<std::vector<float>> seen;
  uint64_t id = autograd::register_post_accumulate_grad_hook(
      w, [&](const Tensor& leaf) { seen.push_back(leaf.grad().to_vector<float>()); });
  // w is used twice: the engine sums both paths first, so the hook runs once.
  Tensor loss = (w * 2.0).sum() + (w * 3.0).sum();
  loss.backward();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<float>{5, 5, 5});
  (w * 1.0).sum().backward();  // accumulates: the hook sees the running sum
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<float>{6, 6, 6});
  autograd::grad({(w * 1.0).sum()}, {w});  // autograd::grad leaves .grad alone: no hook
  CHECK(seen.size() == 2);
  autograd::remove_post_accumulate_grad_hook(w, id);
  (w * 1.0).sum().backward();
  CHECK(seen.size() == 2);
  Tensor y = w * 2.0;  // not a leaf
  CHECK_THROWS_AS(autograd::register_post_accumulate_grad_hook(y, [](const Tensor&) {}), AutogradError);
  CHECK_THROWS_AS(autograd::register_post_accumulate_grad_hook(ones({2}), [](const Tensor&) {}), AutogradError);
}

TEST_CASE("DataParallel on one process: buckets by size, gradients unchanged, syncs once per backward") {
  manual_seed(5);
  Mlp ref, model;
  model.load_state_dict(ref.state_dict());
  // Parameters a.weight (32 floats), a.bias (8), b.weight (16), b.bias (2);
  // a bucket closes once it holds 32 bytes or more, filled from the last.
  dist::DataParallel dp(model, dist::make_local_group(), {.bucket_bytes = 32});
  CHECK(dp.parameters().size() == 4);
  REQUIRE(dp.buckets().size() == 3);  // [b.bias, b.weight] (8 + 64 bytes), [a.bias] (32), [a.weight] (128)
  CHECK(dp.buckets()[0] == std::vector<size_t>{3, 2});
  CHECK(dp.buckets()[1] == std::vector<size_t>{1});
  CHECK(dp.buckets()[2] == std::vector<size_t>{0});
  Tensor x = randn({5, 4});
  ref.forward(x).pow(2.0).mean().backward();
  model.forward(x).pow(2.0).mean().backward();
  CHECK(dp.stats().syncs == 1);
  CHECK(dp.stats().buckets_reduced == 3);
  auto rp = ref.parameters(), mp = model.parameters();
  for (size_t i = 0; i < rp.size(); ++i) CHECK(mp[i].grad().to_vector<float>() == rp[i].grad().to_vector<float>());
  {
    auto guard = dp.no_sync();
    CHECK_FALSE(dp.sync_enabled());
    model.forward(x).pow(2.0).mean().backward();
  }
  CHECK(dp.sync_enabled());
  CHECK(dp.stats().syncs == 1);  // no sync inside no_sync
  model.forward(x).pow(2.0).mean().backward();
  CHECK(dp.stats().syncs == 2);
  for (size_t i = 0; i < rp.size(); ++i) {
    auto g = mp[i].grad().to_vector<float>(), r = rp[i].grad().to_vector<float>();
    for (size_t k = 0; k < g.size(); ++k) CHECK(g[k] == doctest::Approx(3 * r[k]).epsilon(1e-6));
  }
}

TEST_CASE("DataParallel: an unused parameter needs finish_gradient_sync, which gives it a zero gradient") {
  manual_seed(6);
  Mlp model(/*with_unused=*/true);
  dist::DataParallel dp(model, dist::make_local_group(), {.bucket_bytes = 1 << 20});
  CHECK(dp.buckets().size() == 1);
  model.forward(randn({2, 4})).sum().backward();
  CHECK(dp.stats().syncs == 0);  // 'unused' never became ready
  CHECK_FALSE(model.unused->weight.grad().defined());
  dp.finish_gradient_sync();
  CHECK(dp.stats().syncs == 1);
  REQUIRE(model.unused->weight.grad().defined());
  CHECK(model.unused->weight.grad().abs().sum().item() == 0.0);
  dp.finish_gradient_sync();  // nothing pending: a no-op
  CHECK(dp.stats().syncs == 1);
  // Without it, the next backward meets a parameter that is still marked ready.
  model.forward(randn({2, 4})).sum().backward();
  CHECK_THROWS_WITH_AS(model.forward(randn({2, 4})).sum().backward(), doctest::Contains("second gradient"),
                       DistributedError);
}

TEST_CASE("DataParallel removes its hooks when it goes") {
  manual_seed(7);
  Mlp model;
  { dist::DataParallel dp(model, dist::make_local_group()); }
  model.forward(randn({2, 4})).sum().backward();  // would touch a dead DataParallel otherwise
  CHECK(model.a->weight.grad().defined());
  CHECK_THROWS_AS(dist::DataParallel(model, nullptr), ValueError);
  CHECK_THROWS_AS(dist::DataParallel(model, dist::make_local_group(), {.bucket_bytes = 0}), ValueError);
}

// SPDX-License-Identifier: MIT
// The NCCL process group on one GPU (a world of one): the smoke run of
// tools/gpu_check.sh. Every collective goes through NCCL on the device and
// DataParallel reduces a CUDA model's gradients through it. Without NCCL in
// the build, or without a GPU, the cases say so and skip.
#include <snug/cuda/cuda_api.h>
#include <snug/distributed/data_parallel.h>
#include <snug/distributed/nccl.h>
#include <snug/nn/layers.h>
#include "test_util.h"

using namespace snug;
namespace dist = snug::distributed;

namespace {
bool skip() {
  if (!dist::nccl_available()) {
    MESSAGE("skipped: no NCCL (this build of snug has no NCCL group)");
    return true;
  }
  if (cuda::device_count() > 0) return false;
  MESSAGE("skipped: no CUDA GPU (NCCL is compiled in, but the driver sees no device)");
  return true;
}
const Device kGpu(DeviceType::CUDA, 0);
}  // namespace

TEST_CASE("NCCL group of one: all_reduce, broadcast, all_gather, barrier on cuda:0") {
  if (skip()) return;
  auto pg = dist::make_nccl_group({.device = 0, .rank = 0, .size = 1});
  CHECK(std::string(pg->backend()) == "nccl");
  CHECK(pg->device() == kGpu);
  CHECK(pg->size() == 1);
  Tensor t = from_vector(std::vector<float>{1, 2, 3}).to(kGpu);
  pg->all_reduce(t, dist::ReduceOp::sum);
  pg->all_reduce(t, dist::ReduceOp::avg);
  CHECK(t.to(kCPU).to_vector<float>() == std::vector<float>{1, 2, 3});
  Tensor h = full({1000}, 0.5, TensorOptions(DType::f16, kGpu));
  pg->all_reduce(h, dist::ReduceOp::max);
  CHECK(h.to(kCPU).to(DType::f32).sum().item() == 500.0);
  pg->broadcast(t, 0);
  Tensor g = pg->all_gather(t);
  CHECK(g.shape() == Shape{1, 3});
  CHECK(g.to(kCPU).to_vector<float>() == std::vector<float>{1, 2, 3});
  pg->barrier();
  CHECK_THROWS_AS(pg->all_reduce(ones({2})), DeviceError);  // a CPU tensor
}

TEST_CASE("DataParallel over NCCL on one GPU: gradients as without it") {
  if (skip()) return;
  auto pg = dist::make_nccl_group({.device = 0, .rank = 0, .size = 1});
  manual_seed(3);
  nn::Linear ref(16, 8), model(16, 8);
  model.load_state_dict(ref.state_dict());
  ref.to(kGpu);
  model.to(kGpu);
  // Buckets fill from the last parameter: bias (8 floats, 32 bytes) reaches
  // 32 bytes and closes its bucket; weight (128 floats) gets the second.
  dist::DataParallel dp(model, pg, {.bucket_bytes = 32});
  CHECK(dp.buckets().size() == 2);
  Tensor x = randn({4, 16}).to(kGpu);
  ref.forward(x).pow(2.0).mean().backward();
  model.forward(x).pow(2.0).mean().backward();
  CHECK(dp.stats().syncs == 1);
  CHECK(model.weight.grad().to(kCPU).to_vector<float>() == ref.weight.grad().to(kCPU).to_vector<float>());
  CHECK(model.bias.grad().to(kCPU).to_vector<float>() == ref.bias.grad().to(kCPU).to_vector<float>());
}

TEST_CASE("make_nccl_group without NCCL or a world it cannot join says why") {
  if (!dist::nccl_available()) {
    CHECK_THROWS_WITH_AS(dist::make_nccl_group({}), doctest::Contains("without NCCL"), DistributedError);
    return;
  }
  if (skip()) return;
  // Two ranks but no way to share the id.
  CHECK_THROWS_WITH_AS(dist::make_nccl_group({.device = 0, .rank = 1, .size = 2}), doctest::Contains("rendezvous_file"),
                       ValueError);
}

// SPDX-License-Identifier: MIT
// Pay only for what is used (NOTE [ The CUDA plugin ] in cuda/plugin_loader.cpp,
// NOTE [ The MPI plugin ] in distributed/mpi_loader.cpp): a program linked
// with snug that does CPU work maps no CUDA and no MPI library; the backends
// are plugins loaded on the first request for them. Read from this process's
// own /proc/self/maps, so the test cases run in file order (doctest's default)
// and the CPU one comes first: once a plugin is loaded it stays.
//
// SNUG_TEST_CUDA_PLUGIN / SNUG_TEST_MPI_PLUGIN (tests/CMakeLists.txt) say
// whether this build has the plugins; the ctest variants with
// SNUG_CUDA_PLUGIN=none, a missing path, or a plugin that must be refused
// (tests/lazy/fake_plugin.cpp; SNUG_TEST_PLUGIN_ERROR is the reason
// expected) check the "not loaded" answers.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <snug/autograd/ops.h>
#include <snug/base/error.h>
#include <snug/core/backend.h>
#include <snug/cuda/cuda_api.h>
#include <snug/data/dataloader.h>
#include <snug/distributed/process_group.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/optimizer.h>

using namespace snug;

namespace {

// The paths of the files mapped into this process (the last column of
// /proc/self/maps), one per mapping.
std::vector<std::string> mapped_files() {
  std::ifstream in("/proc/self/maps");
  REQUIRE(in.good());
  std::vector<std::string> files;
  for (std::string line; std::getline(in, line);) {
    const auto slash = line.find('/');
    if (slash != std::string::npos) files.push_back(line.substr(slash));
  }
  REQUIRE(!files.empty());
  return files;
}

// The first mapped file whose base name starts with one of `prefixes`, or "".
std::string first_mapped(const std::vector<std::string>& prefixes) {
  for (const std::string& f : mapped_files()) {
    const std::string base = f.substr(f.rfind('/') + 1);
    for (const std::string& p : prefixes)
      if (base.rfind(p, 0) == 0) return f;
  }
  return "";
}

// libcuda.so is the driver; "libcuda." so that libcudart/libcudnn are not matched twice.
const std::vector<std::string> kCudaLibs = {"libcudart", "libcublas", "libcublasLt", "libcudnn",
                                            "libnccl",   "libcuda.",  "libsnug-cuda"};
const std::vector<std::string> kMpiLibs = {"libmpi", "libopen-pal", "libopen-rte", "libpmix", "libsnug-mpi"};

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == value;
}

}  // namespace

TEST_CASE("lazy backends: CPU work maps no CUDA and no MPI library") {
  // What a CPU training program does: tensors, autograd, a layer, an
  // optimizer step, fused attention, a data loader, the local process group.
  Tensor x = randn({8, 16}, TensorOptions().with_requires_grad(true));
  nn::Linear lin(16, 12);
  nn::optim::AdamW opt(lin.parameters());
  Tensor qkv = lin.forward(x).view({2, 4, 12});  // (B, T, 3C), C = 4
  Tensor loss = sum(gelu(nn::functional::causal_self_attention(qkv, 2)));
  loss.backward();
  opt.step();
  CHECK(x.grad().defined());
  CHECK(has_backend(DeviceType::CPU));
  data::DataLoader loader(std::make_shared<data::TensorDataset>(std::vector<Tensor>{x.detach()}),
                          {.batch_size = 4, .num_workers = 1});
  int64_t batches = 0;
  for (auto it = loader.begin(); it != loader.end(); ++it) ++batches;
  CHECK(batches == 2);
  auto pg = distributed::init_process_group({.backend = "local"});
  pg->all_reduce(x.detach());

  const std::string cuda = first_mapped(kCudaLibs), mpi = first_mapped(kMpiLibs);
  CHECK_MESSAGE(cuda.empty(), "a CUDA library is mapped by a CPU-only program: ", cuda);
  CHECK_MESSAGE(mpi.empty(), "an MPI library is mapped by a CPU-only program: ", mpi);
  CHECK(!first_mapped({"libc.so", "libc-"}).empty());  // the check sees libraries at all
}

TEST_CASE("lazy backends: asking for a CUDA device loads the CUDA plugin (when built)") {
  const int n = cuda::device_count();  // loads the plugin
  CHECK(n >= 0);
  const bool disabled = std::getenv("SNUG_CUDA_PLUGIN") != nullptr;  // none, or a path that does not exist
  if (SNUG_TEST_CUDA_PLUGIN && !disabled) {
    CHECK(cuda::compiled());
    CHECK_MESSAGE(!first_mapped({"libsnug-cuda"}).empty(), "device_count() did not load libsnug-cuda.so");
    CHECK(!first_mapped({"libcudart"}).empty());
  } else {
    CHECK_FALSE(cuda::compiled());
    CHECK(n == 0);
    CHECK(first_mapped(kCudaLibs).empty());
    // Calls that need a GPU say why there is none.
    try {
      (void)cuda::create_stream();
      FAIL("create_stream should throw without the CUDA plugin");
    } catch (const DeviceError& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find("libsnug-cuda") != std::string::npos, msg);
      if (env_is("SNUG_CUDA_PLUGIN", "none"))
        CHECK_MESSAGE(msg.find("SNUG_CUDA_PLUGIN=none") != std::string::npos, msg);
      if (disabled && !env_is("SNUG_CUDA_PLUGIN", "none"))
        CHECK_MESSAGE(msg.find(std::getenv("SNUG_CUDA_PLUGIN")) != std::string::npos, msg);
      if (const char* want = std::getenv("SNUG_TEST_PLUGIN_ERROR"))  // a refused plugin says why
        CHECK_MESSAGE(msg.find(want) != std::string::npos, msg);
    }
    CHECK_THROWS_AS(zeros({2}, TensorOptions(kFloat32, Device("cuda:0"))), DeviceError);
    // The TF32 switch is libsnug's own setting: no plugin needed.
    cuda::set_allow_tf32(true);
    CHECK(cuda::allow_tf32());
    cuda::set_allow_tf32(false);
  }
}

TEST_CASE("lazy backends: asking whether MPI is there loads the MPI plugin (when built)") {
  const bool have = distributed::mpi_available();  // loads the plugin; MPI itself is not initialized
  if (SNUG_TEST_MPI_PLUGIN && std::getenv("SNUG_MPI_PLUGIN") == nullptr) {
    CHECK(have);
    CHECK_MESSAGE(!first_mapped({"libsnug-mpi"}).empty(), "mpi_available() did not load libsnug-mpi.so");
    CHECK(!first_mapped({"libmpi"}).empty());
  } else {
    CHECK_FALSE(have);
    CHECK(first_mapped(kMpiLibs).empty());
  }
}

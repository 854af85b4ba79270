// SPDX-License-Identifier: MIT
// Allocation-failure injection (memory/fault_injection.h): the Nth allocation
// of a full training step (forward, backward, optimizer) fails, for N from 1
// to the step's allocation count. Each failed step must throw
// OutOfMemoryError and leave the model, the optimizer and the allocator
// usable: with the failure lifted, the next step gives exactly the result of a
// step that never failed, and no bytes stay allocated (ASan checks for real
// leaks). docs/reliability.md.
//
// The default run tries an evenly spread subset of N (about 20 per model; under ASan
// each point costs seconds);
// SNUG_ALLOC_FAILURE_ALL=1 tries every N.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/core/generator.h>
#include <snug/memory/allocator.h>
#include <snug/memory/fault_injection.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/cnn.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>

using namespace snug;

namespace {

struct Snapshot {
  std::vector<Tensor> params;
  nn::NamedTensors opt_state;
};

Snapshot take(nn::Module& m, nn::optim::Optimizer& opt) {
  Snapshot s;
  for (const Tensor& p : m.parameters()) s.params.push_back(p.detach().clone());
  for (const auto& [k, t] : opt.state_dict()) s.opt_state.emplace_back(k, t.detach().clone());
  return s;
}

void restore(nn::Module& m, nn::optim::Optimizer& opt, const Snapshot& s) {
  auto ps = m.parameters();
  NoGradGuard ng;
  for (size_t i = 0; i < ps.size(); ++i) ps[i].detach().copy_(s.params[i]);
  opt.load_state_dict(s.opt_state);
  m.zero_grad();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.contiguous(), y = b.contiguous();
  return x.shape() == y.shape() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Runs the sweep for one model. step() is one whole training step.
void sweep(const std::string& name, nn::Module& model, nn::optim::Optimizer& opt, const std::function<void()>& step) {
  set_num_threads(1);
  step();  // warm-up: optimizer state exists, caches are filled
  model.zero_grad();
  const Snapshot before = take(model, opt);

  // The reference: one step that never fails, and its allocation count.
  uint64_t count = 0;
  {
    memory::FailAllocation counter(0);
    step();
    count = counter.count();
  }
  const Snapshot want = take(model, opt);
  restore(model, opt, before);
  const std::size_t live = memory::allocated(kCPU);  // parameters, optimizer state, the snapshots
  REQUIRE(count > 10);
  MESSAGE(name, ": a training step makes ", count, " allocations");

  const bool all = std::getenv("SNUG_ALLOC_FAILURE_ALL") != nullptr;
  const uint64_t stride = all ? 1 : std::max<uint64_t>(1, count / 20);
  int tried = 0;
  for (uint64_t n = 1; n <= count; n += (n == 1 ? std::max<uint64_t>(stride - 1, 1) : stride)) {
    CAPTURE(n);
    restore(model, opt, before);
    REQUIRE(memory::allocated(kCPU) == live);
    bool threw = false;
    {
      memory::FailAllocation fail(n);
      try {
        step();
      } catch (const OutOfMemoryError&) {
        threw = true;
      }
      CHECK(fail.fired());
    }
    CHECK(threw);
    // Nothing the failed step allocated stays allocated once its gradients are dropped.
    model.zero_grad();
    CHECK(memory::allocated(kCPU) == live);
    if (memory::allocated(kCPU) != live) restore(model, opt, before);
    // The next step, without the failure and without restoring anything,
    // gives the never-failed result: a failed step changed nothing.
    step();
    const Snapshot got = take(model, opt);
    bool same = got.params.size() == want.params.size() && got.opt_state.size() == want.opt_state.size();
    for (size_t i = 0; same && i < got.params.size(); ++i) same = same_bits(got.params[i], want.params[i]);
    for (size_t i = 0; same && i < got.opt_state.size(); ++i)
      same = same_bits(got.opt_state[i].second, want.opt_state[i].second);
    CHECK_MESSAGE(same, name, ": the step after a failure at allocation ", n, " differs from a step that never failed");
    ++tried;
  }
  MESSAGE(name, ": failed allocation N tried at ", tried, " points of ", count);
  restore(model, opt, before);
}

}  // namespace

TEST_CASE("allocation failure at every point of a W-GPT training step") {
  manual_seed(1);
  nn::models::GPT gpt(nn::models::GPTConfig{});  // W-GPT: 4 layers, width 128, block 128
  nn::optim::AdamW opt(gpt.parameters(), {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  manual_seed(2);
  Tensor seq = randint(0, 65, Shape{4, 129});  // batch 4 keeps the sweep short; the code paths are the same
  Tensor x = seq.narrow(1, 0, 128).contiguous(), y = seq.narrow(1, 1, 128).contiguous();
  sweep("W-GPT", gpt, opt, [&] {
    opt.zero_grad();
    gpt.loss(x, y).backward();
    opt.step();
  });
}

TEST_CASE("allocation failure at every point of a W-CNN training step") {
  manual_seed(1);
  auto cnn = nn::models::make_wcnn();
  nn::optim::SGD opt(cnn->parameters(), {.lr = 0.01, .momentum = 0.9});
  manual_seed(2);
  Tensor x = randn({16, 1, 28, 28}), y = randint(0, 10, Shape{16});
  sweep("W-CNN", *cnn, opt, [&] {
    opt.zero_grad();
    nn::functional::cross_entropy(cnn->forward(x), y).backward();
    opt.step();
  });
}

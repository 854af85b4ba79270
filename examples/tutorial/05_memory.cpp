// SPDX-License-Identifier: MIT
// Tutorial chapter 5 (docs/tutorial/05-seeing-memory.md): where the bytes of
// a training step go. One step of a small MLP on the virtual device cpu:1
// (host memory with a pool and a capacity of its own), its statistics and
// summary, a snapshot for tools/memory_timeline.py, and the report of an
// allocation that does not fit. Exits 1 if a check fails.
#include <snug/snug.h>

#include <iostream>

using namespace snug;
using memory::format_bytes;

int main() {
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    std::cout << (ok ? "ok:   " : "FAIL: ") << what << "\n";
    failures += ok ? 0 : 1;
  };
  const Device dev("cpu:1");
  memory::set_capacity(dev, 8 << 20);  // cpu:1 may reserve 8 MiB, no more
  memory::record_history(true);        // keep every alloc/free event from now on

  // ---- one training step on cpu:1, each part under its tag ----
  // Tags come from the scope that allocates: the engine tags gradients and
  // the optimizer its state; parameters, data and the forward are ours to tag.
  const auto tag = [&](memory::Tag t) { return memory::stats(dev).tag_bytes[int(t)].current; };
  manual_seed(0);
  std::shared_ptr<nn::Sequential> model;
  {
    memory::TagScope scope(memory::Tag::parameter);
    model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(256, 512), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 10)});
    model->to(dev);  // the copies on cpu:1 are made in this scope
  }
  nn::optim::AdamW opt(model->parameters());
  Tensor x, y;
  {
    memory::TagScope scope(memory::Tag::data);
    x = randn({64, 256}).to(dev);
    y = randint(0, 10, {64}).to(dev);
  }
  Tensor loss;
  {
    memory::TagScope scope(memory::Tag::activation);
    loss = nn::functional::cross_entropy(model->forward(x), y);  // saves what backward needs
  }
  const int64_t saved = tag(memory::Tag::activation);
  loss.backward();  // frees saved tensors as it goes; gradients appear
  const int64_t after_backward = tag(memory::Tag::activation);
  opt.step();  // the first step creates AdamW's two moments
  loss = Tensor();

  // ---- the numbers: allocated (live), reserved (held from the system), peak ----
  memory::DeviceStats st = memory::stats(dev);
  std::cout << "activations saved by the forward " << format_bytes(saved) << ", after backward "
            << format_bytes(after_backward) << "\nallocated " << format_bytes(st.allocated_bytes.current)
            << ", reserved " << format_bytes(st.reserved_bytes.current) << ", peak "
            << format_bytes(st.allocated_bytes.peak) << "\nat the peak:";
  for (int t = 0; t < memory::kNumTags; ++t)
    if (st.tag_at_peak[t] > 0)
      std::cout << " " << memory::tag_name(memory::Tag(t)) << " " << format_bytes(st.tag_at_peak[t]);
  std::cout << "\n";
  const int64_t param_bytes = int64_t(prune::parameter_bytes(*model)), n_params = 4;
  expect(tag(memory::Tag::parameter) >= param_bytes && tag(memory::Tag::parameter) < param_bytes + 512 * n_params,
         "the parameter tag holds the parameters (each rounded up to 512-byte blocks)");
  expect(saved > 0 && after_backward < saved, "backward frees the activations it used");
  expect(tag(memory::Tag::gradient) == tag(memory::Tag::parameter) &&
             tag(memory::Tag::optimizer_state) == 2 * tag(memory::Tag::parameter),
         "after a step: one gradient per parameter, and AdamW's state is twice the parameters");
  expect(st.reserved_bytes.current >= st.allocated_bytes.current,
         "reserved >= allocated (the cache keeps freed blocks)");
  std::cout << memory::summary(dev);

  // ---- out of memory: a request that cpu:1's 8 MiB cannot hold ----
  try {
    Tensor big = empty({4 << 20}, TensorOptions(kFloat32, dev));  // 16 MiB
    expect(false, "a 16 MiB tensor on an 8 MiB device is refused");
  } catch (const OutOfMemoryError& e) {
    std::cout << "OutOfMemoryError:\n" << e.what() << "\n";
    expect(e.requested() >= (16u << 20) && e.capacity() == (8u << 20),
           "the error carries the request and the capacity");
  }
  expect(memory::stats(dev).num_ooms == 1, "the allocator counted one OOM");
  expect(memory::allocated(dev) == std::size_t(st.allocated_bytes.current), "a failed allocation leaks nothing");

  // ---- the history: a snapshot (the step, then the OOM) that tools/memory_timeline.py draws ----
  memory::dump_snapshot(dev, "tutorial_05_snapshot.json");
  memory::Snapshot snap = memory::load_snapshot("tutorial_05_snapshot.json");
  std::cout << "snapshot: " << snap.devices.at(0).events.size() << " events, " << snap.devices.at(0).segments.size()
            << " segments\n";
  const auto& events = snap.devices.at(0).events;
  expect(events.size() > 10, "the history recorded the step's allocations");
  expect(events.back().action == memory::Action::oom, "...and, last, the failed request");

  std::cout << (failures == 0 ? "PASS" : "FAILED") << "\n";
  return failures == 0 ? 0 : 1;
}

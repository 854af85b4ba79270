// SPDX-License-Identifier: MIT
// snug-bench trace-gpt --out PATH [--steps N]
// Records the allocator's event history of real W-GPT training steps
// (docs/workloads.md: batch 16 x 128 tokens, AdamW) from process start
// (model creation included) and writes it as a snapshot that
// `snug-bench replay` reads. bench/traces/wgpt_step.json was made this way.
#include <cstdio>

#include <snug/core/generator.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include "bench/bench.h"

using namespace snug;

SNUG_BENCH(trace_gpt, "record the allocator trace of W-GPT training steps (--out PATH --steps N)",
           bench::text_flag("out", "wgpt_trace.json", "the snapshot file to write", "PATH"),
           bench::int_flag("steps", 2, "training steps to record")) {
  const std::string out = args.get("out");
  const int64_t steps = args.get_int("steps");
  memory::record_history(true, 1000000);
  manual_seed(1337);
  std::unique_ptr<nn::models::GPT> model;
  {
    memory::TagScope tag(memory::Tag::parameter);
    model = std::make_unique<nn::models::GPT>(nn::models::GPTConfig{});
  }
  nn::optim::AdamW opt(model->parameters(), {3e-4, 0.9, 0.999, 1e-8, 0.01});
  Generator gen(1337);
  for (int64_t s = 0; s < steps; ++s) {
    Tensor x, y;
    {
      memory::TagScope tag(memory::Tag::data);
      x = randint(0, 65, {16, 128}, DType::i64, &gen);
      y = randint(0, 65, {16, 128}, DType::i64, &gen);
    }
    opt.zero_grad();
    Tensor loss;
    {
      memory::TagScope tag(memory::Tag::activation);
      loss = model->loss(x, y);
    }
    loss.backward();
    opt.step();
    std::fprintf(stderr, "step %lld loss %.4f\n", (long long)s, loss.item());
  }
  memory::dump_snapshot(kCPU, out);
  memory::record_history(false);
  auto st = memory::stats(kCPU);
  if (args.json())
    std::printf("{\"out\": \"%s\", \"steps\": %lld, \"peak_allocated_bytes\": %lld, \"peak_reserved_bytes\": %lld}\n",
                out.c_str(), (long long)steps, (long long)st.allocated_bytes.peak, (long long)st.reserved_bytes.peak);
  return 0;
}

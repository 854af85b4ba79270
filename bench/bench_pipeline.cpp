// SPDX-License-Identifier: MIT
// snug-bench pipeline: a GPT split over K virtual CPU devices, trained with M
// micro-batches; measured idle fraction against the schedule's ideal
// (K-1)/(M+K-1), and throughput against the same model on one device.
//
// Each stage runs on its own thread with --threads-per-stage compute threads;
// the one-device run uses --threads-per-stage x K threads, so both use the
// same number of threads (on a machine with fewer cores than that, stages
// share cores and the idle fraction grows: say so when reporting). One-device
// and pipelined steps alternate; medians over --steps of each. Times are
// forward + backward (no optimizer step). The idle fraction counts the time a
// stage waits for its input or gradient.
//
//   snug-bench pipeline [--stages 2] [--micro-batches 4] [--schedule gpipe|1f1b]
//                       [--layers 8] [--embd 128] [--block 128] [--batch 16]
//                       [--steps 5] [--warmup 1] [--threads-per-stage 1]
//                       [--timeline FILE] [--memory-trace FILE] [--json]
//
// --memory-trace records every device's allocator history (each stage's
// virtual device has its own pool, and each stage thread marks its steps)
// and writes it as one snapshot; `snug-bench replay --device cpu:2` replays a stage.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <snug/core/generator.h>
#include <snug/memory/allocator.h>
#include <snug/nn/accumulate.h>
#include <snug/nn/models/gpt.h>
#include <snug/parallel/layer_stack.h>
#include <snug/parallel/pipeline.h>
#include <snug/parallel/placement.h>
#include "bench/bench.h"

namespace snug::bench {

SNUG_BENCH(pipeline, "GPT over K virtual CPU devices, M micro-batches: idle fraction vs (K-1)/(M+K-1), speedup",
           int_flag("stages", 2, "pipeline stages (virtual devices cpu:1..K)"),
           int_flag("micro-batches", 4, "micro-batches per step (at most --batch)"),
           choice_flag("schedule", "gpipe", {"gpipe", "1f1b"}, "pipeline schedule"),
           int_flag("layers", 8, "GPT layers"), int_flag("embd", 128, "GPT channels (a multiple of its 4 heads)"),
           int_flag("block", 128, "sequence length"), int_flag("batch", 16, "batch size"),
           int_flag("steps", 5, "timed steps of each kind (medians are reported)"),
           int_flag("warmup", 1, "untimed steps first", 0),
           int_flag("threads-per-stage", 1, "compute threads of each stage (the one-device run gets K times as many)"),
           text_flag("timeline", "", "write the last step's timeline (tools/pipeline_timeline.py) to FILE", "FILE"),
           text_flag("memory-trace", "", "record every device's allocator history and write it to FILE", "FILE")) {
  const std::string trace = args.get("memory-trace");
  if (!trace.empty()) memory::record_history(true, 4000000);
  const int64_t K = args.get_int("stages"), M = args.get_int("micro-batches"), L = args.get_int("layers"),
                C = args.get_int("embd"), T = args.get_int("block"), B = args.get_int("batch"),
                steps = args.get_int("steps"), warmup = args.get_int("warmup"), tps = args.get_int("threads-per-stage");
  const parallel::Schedule sched = parallel::parse_schedule(args.get("schedule"));
  SNUG_FLAG_CHECK(B >= M, "--micro-batches ", M, " must be at most --batch ", B);
  nn::models::GPTConfig cfg;
  cfg.layers = L;
  cfg.embd = C;
  cfg.block = T;
  check_gpt_flags(cfg);
  manual_seed(1337);
  Tensor seq = randint(0, cfg.vocab, Shape{B, T + 1});
  const Tensor x = seq.narrow(1, 0, T).contiguous(), y = seq.narrow(1, 1, T).contiguous();

  // The one-device model and the pipelined one (same weights); their steps
  // alternate, so both see the same machine load.
  manual_seed(7);
  nn::models::GPT single(cfg);
  manual_seed(7);
  nn::models::GPT gpt(cfg);
  parallel::LayerStack stack = parallel::gpt_stack(gpt);
  std::vector<Device> devs;
  for (int64_t k = 0; k < K; ++k) devs.push_back(Device(DeviceType::CPU, static_cast<int>(k + 1)));
  set_num_threads(static_cast<int>(tps));
  const parallel::StepShape shape{.micro_batches = M, .schedule = sched};
  const parallel::StackProfile prof =
      parallel::profile_stack(stack, nn::split_batch(x, M)[0].contiguous(), nn::split_batch(y, M)[0].contiguous(), 2);
  parallel::Placement p = parallel::plan_placement(prof, devs, parallel::Policy::balance_time, shape);
  parallel::place(stack, p);
  parallel::Pipeline pipe(
      stack, p,
      {.micro_batches = M, .schedule = sched, .threads_per_stage = static_cast<int>(tps), .record_timeline = true});
  std::vector<double> ms, idle, one_ms;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    set_num_threads(static_cast<int>(K * tps));  // one device: the whole batch, as many threads as all stages
    single.zero_grad();
    const double t0 = now_seconds();
    single.loss(x, y).backward();
    const double t1 = now_seconds();
    gpt.zero_grad();
    for (const Device& d : devs) memory::mark_step(d);  // each stage's pool sees the step begin
    pipe.step(x, y);
    if (s >= warmup) {
      one_ms.push_back((t1 - t0) * 1e3);
      ms.push_back(pipe.last_step_ms());
      idle.push_back(pipe.idle_fraction());
    }
  }
  if (!trace.empty()) {
    memory::dump_snapshot(trace);
    memory::record_history(false);
  }
  const std::string tl = args.get("timeline");
  if (!tl.empty()) pipe.write_timeline(tl);
  const double ideal = static_cast<double>(K - 1) / static_cast<double>(M + K - 1);
  const double med = median(ms), one = median(one_ms), tok = static_cast<double>(B * T);
  if (args.json()) {
    std::printf(
        "{\"bench\": \"pipeline\", \"stages\": %lld, \"micro_batches\": %lld, \"schedule\": \"%s\", "
        "\"layers\": %lld, \"placement\": \"%s\", \"ms_per_step\": %.3f, \"one_device_ms_per_step\": %.3f, "
        "\"tokens_per_s\": %.1f, \"one_device_tokens_per_s\": %.1f, \"speedup\": %.3f, "
        "\"idle_fraction\": %.4f, \"ideal_idle_fraction\": %.4f, \"threads_per_stage\": %lld}\n",
        (long long)K, (long long)M, parallel::schedule_name(sched), (long long)L, p.str().c_str(), med, one,
        tok / (med / 1e3), tok / (one / 1e3), one / med, median(idle), ideal, (long long)tps);
  } else {
    std::printf(
        "pipeline %lld stages x %lld micro-batches (%s), %s: %.1f ms/step (one device %.1f ms, speedup %.2fx), "
        "idle %.3f (ideal %.3f)\n",
        (long long)K, (long long)M, parallel::schedule_name(sched), p.str().c_str(), med, one, one / med, median(idle),
        ideal);
  }
  return 0;
}

}  // namespace snug::bench

// SPDX-License-Identifier: MIT
// examples/memory_tour: one model, the W-GPT char-level transformer on tiny
// shakespeare, and snug's memory strategies applied one at a time, each
// against the same baseline (docs/memory_tour.md):
//
//   baseline    f32, AdamW, every activation kept for backward
//   no_grad     the trained model evaluated under NoGradGuard
//   accum       the batch as --accum micro-batches (nn::GradAccumulator)
//   amp         bf16 autocast (AutocastGuard)
//   checkpoint  recomputation of segments of blocks (GPT::checkpointing)
//   adamw8bit   8-bit optimizer state (nn::optim::AdamW8bit)
//   pruned      half the heads and MLP channels pruned and compacted away
//   int8        the trained model's Linears quantized (quant::quantize_dynamic)
//
//   memory_tour [--steps 8] [--json] [--chart FILE.png] [--snapshot FILE.json]
//
// For each: the peak allocated and reserved bytes, the peak of each tag, the
// median step time and the validation loss. --chart draws the peaks as a PNG
// bar chart; --snapshot writes the allocator's history of the whole run, which
// tools/memory_timeline.py draws as an HTML timeline.
#include <cstdio>

#include <snug/core/cpu_isa.h>
#include <snug/memory/history.h>
#include <snug/memory/stats.h>

#include "common/cli.h"
#include "memory_tour/tour.h"

using namespace snug;
using namespace memory_tour;

namespace {

double mib(int64_t b) { return double(b) / 1048576.0; }
int64_t tag(const Result& r, memory::Tag t) { return r.tag_peak[size_t(t)]; }

void print_table(const std::vector<Result>& rs) {
  using memory::Tag;
  std::printf("%-10s %5s %10s %10s %8s %8s %8s %8s %8s %8s %9s %9s\n", "strategy", "steps", "peak MiB", "reserved",
              "param", "grad", "optim", "act", "temp", "work", "ms/step", "val loss");
  for (const Result& r : rs)
    std::printf("%-10s %5lld %10.2f %10.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %9.4f\n", r.name.c_str(),
                (long long)r.steps, mib(r.peak_allocated), mib(r.peak_reserved), mib(tag(r, Tag::parameter)),
                mib(tag(r, Tag::gradient)), mib(tag(r, Tag::optimizer_state)), mib(tag(r, Tag::activation)),
                mib(tag(r, Tag::temporary)), mib(tag(r, Tag::workspace)), r.step_ms, r.loss);
}

std::string result_json(const Result& r) {
  std::string tags;
  for (int t = 0; t < memory::kNumTags; ++t)
    tags += str(t ? "," : "", "\"", memory::tag_name(memory::Tag(t)), "\":", r.tag_peak[size_t(t)]);
  return str("{\"name\":\"", r.name, "\",\"steps\":", r.steps, ",\"peak_allocated_bytes\":", r.peak_allocated,
             ",\"peak_reserved_bytes\":", r.peak_reserved, ",\"tag_peak_bytes\":{", tags, "},\"step_ms\":", r.step_ms,
             ",\"loss\":", r.loss, ",\"train_loss\":", r.train_loss, ",\"params\":", r.params,
             ",\"model_bytes\":", r.model_bytes, "}");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"examples/memory_tour: one GPT and snug's memory strategies one at a time (docs/memory_tour.md)",
               "memory_tour"};
  cli::init(app);
  Flags f;
  f.data = SNUG_EXAMPLES_DIR "/charlm/data/tinyshakespeare.txt";
  app.add_option("--data", f.data, "text corpus (characters are the tokens)")->capture_default_str();
  app.add_option("--steps", f.steps, "training steps of each training strategy")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--batch", f.batch, "windows per step")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--block", f.block, "characters per window")->transform(cli::integer(2))->capture_default_str();
  app.add_option("--layers", f.layers, "transformer blocks")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--heads", f.heads, "attention heads (even, so that pruned can halve them)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--embd", f.embd, "embedding width (a multiple of --heads)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--accum", f.accum, "micro-batches per step in accum (divides --batch)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--eval-batches", f.eval_batches, "validation batches (the passes of no_grad and int8)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--prune", f.prune, "fraction of heads and MLP channels pruned in pruned")
      ->transform(cli::number({.lo = 0, .hi = 1, .lo_open = true, .hi_open = true}))
      ->capture_default_str();
  app.add_option("--lr", f.lr, "AdamW learning rate")->transform(cli::number({.lo = 0, .lo_open = true}))->capture_default_str();
  app.add_option("--threads", f.threads, "compute threads")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the initial weights and of the batches")
      ->transform(cli::integer(0))
      ->capture_default_str();
  app.add_option("--chart", f.chart, "write the peaks as a PNG bar chart to FILE")->type_name("FILE.png");
  app.add_option("--snapshot", f.snapshot,
                 "record the allocator's history and write it to FILE (python3 tools/memory_timeline.py FILE -o T.html)")
      ->type_name("FILE.json");
  app.add_option("--snapshot-steps", f.snapshot_steps,
                 "record only the first N steps (or passes) of each strategy, and its set-up and tear-down (0: all)")
      ->transform(cli::integer(0))
      ->capture_default_str();
  app.add_option("--device", f.device,
                 "run the strategies on this device: cpu, cuda, cuda:N (or a virtual cpu:N); int8 runs on the CPU")
      ->transform(cli::device())
      ->capture_default_str();
  app.add_flag("--json", f.json, "print one JSON line with every figure on stdout");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    SNUG_FLAG_CHECK(f.batch % f.accum == 0, "--accum ", f.accum, " must divide --batch ", f.batch);
    SNUG_FLAG_CHECK(f.embd % f.heads == 0, "--embd ", f.embd, " must be a multiple of --heads ", f.heads);
    set_num_threads(int(f.threads));
    if (!f.snapshot.empty()) memory::record_history(true, kHistoryEntries);
    Tour tour = make_tour(f);
    if (!f.json)
      std::fprintf(stderr, "GPT: %lld layers, embd %lld, %lld heads, block %lld, vocabulary %lld; batch %lld, %lld steps\n",
                   (long long)f.layers, (long long)f.embd, (long long)f.heads, (long long)f.block,
                   (long long)tour.cfg.vocab, (long long)f.batch, (long long)f.steps);
    const std::vector<Result> rs = run_all(tour);
    if (!f.snapshot.empty()) {
      memory::dump_snapshot(Device(f.device), f.snapshot);
      memory::record_history(false);
    }
    if (!f.chart.empty()) picture::write_png(bar_chart(rs), f.chart);
    if (f.json) {
      std::string st;
      for (const Result& r : rs) st += (st.empty() ? "" : ",") + result_json(r);
      std::printf("{\"program\":\"memory_tour\",\"device\":\"%s\",\"cpu_isa\":\"%s\",\"threads\":%lld,\"steps\":%lld,\"batch\":%lld,"
                  "\"block\":%lld,\"layers\":%lld,\"embd\":%lld,\"heads\":%lld,\"accum\":%lld,\"vocab\":%lld,"
                  "\"strategies\":[%s]}\n",
                  Device(f.device).str().c_str(), cpu_isa().c_str(), (long long)f.threads, (long long)f.steps, (long long)f.batch, (long long)f.block,
                  (long long)f.layers, (long long)f.embd, (long long)f.heads, (long long)f.accum,
                  (long long)tour.cfg.vocab, st.c_str());
    } else {
      print_table(rs);
      const double base = double(rs.at(0).peak_allocated);
      std::printf("peak allocated against baseline:");
      for (size_t i = 1; i < rs.size(); ++i) std::printf(" %s %.3fx", rs[i].name.c_str(), double(rs[i].peak_allocated) / base);
      std::printf("\nmodel bytes: baseline %.2f MiB, pruned %.2f MiB, int8 %.2f MiB\n", mib(rs.at(0).model_bytes),
                  mib(rs.at(6).model_bytes), mib(rs.at(7).model_bytes));
    }
    return 0;
  } catch (const std::exception& e) {
    return cli::exit_status("memory_tour", e);
  }
}

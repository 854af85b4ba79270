// SPDX-License-Identifier: MIT
// examples/vit: a vision transformer (nn/models/vit.h) trained on MNIST read
// from chunked files on disk (data/chunked.h) by DataLoader workers, with the
// memory told one stage at a time (docs/vit.md):
//
//   vit --make-chunks DIR --data MNIST_IDX_DIR     writes DIR/train.chunks, DIR/t10k.chunks
//   vit --chunks DIR [--checkpoint] [--amp bf16] [--accum 2] [--json]
//
// The stages of a run:
//   data        one epoch of the training chunks through the DataLoader with
//               no model: the growth of the process's resident set (VmRSS,
//               VmHWM) is the data path's resident memory, checked against
//               --rss-bound (--data-only stops here)
//   plain, checkpoint
//               --probe-steps steps each from the same initial weights, every
//               activation kept against each block but the last recomputed
//               in backward: their activation peaks give the checkpoint ratio
//   train       --epochs epochs with the flags' settings, then the test accuracy
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/core/cpu_isa.h>
#include <snug/data/dataloader.h>
#include <snug/data/device_prefetch.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/accumulate.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/vit.h>
#include <snug/nn/optim/optimizer.h>

#include "common/cli.h"
#include "vit/chunks.h"
#include "vit/rss.h"

using namespace snug;
using namespace vit_example;
using nn::models::ViTConfig;
using nn::models::VisionTransformer;

namespace {

struct Flags {
  std::string data = SNUG_EXAMPLES_DIR "/../../shared/data/mnist", chunks = "vit_chunks", make_chunks, amp = "none";
  std::string device = "cpu";  // where the model, its optimizer and the batches live
  int64_t epochs = 3, batch = 64, accum = 1, patch = 7, embd = 64, layers = 4, heads = 4, mlp_ratio = 2;
  int64_t threads = 2, workers = 2, seed = 1, warmup = 100, probe_steps = 3, limit = 0;
  int64_t chunk_bytes = 1 << 20, resident_chunks = 2, rss_bound = 8 << 20;
  double lr = 2e-3, weight_decay = 0.05;
  bool checkpoint = false, data_only = false, json = false;
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What one stage measured.
struct Stage {
  std::string name;
  int64_t steps = 0;
  double step_ms = 0, loss = NAN, test_accuracy = NAN;
  int64_t peak_allocated = 0;
  std::array<int64_t, memory::kNumTags> tag_peak{};  // each tag's own peak over the stage
};

int64_t tag_peak(const Stage& s, memory::Tag t) { return s.tag_peak[size_t(t)]; }

// The data stage: the loader alone, and the resident memory it adds.
struct DataPass {
  int64_t batches = 0, records = 0, chunk_reads = 0, label_sum = 0;
  int64_t rss_before = 0, rss_growth = 0, rss_peak_sampled = 0;
  bool hwm_reset = false;
  double ms = 0;
};

struct Run {
  const Flags& f;
  std::shared_ptr<data::ChunkedDataset> train_set, test_set;
  ViTConfig cfg;
};

std::unique_ptr<data::DataLoader> train_loader(const Run& r) {
  data::DataLoaderOptions o;
  o.batch_size = r.f.batch;
  o.drop_last = true;  // every step has --batch images, so --accum splits it evenly
  o.num_workers = int(r.f.workers);
  o.sampler = r.train_set->sampler(uint64_t(r.f.seed));  // chunk by chunk (NOTE [ Chunk residency ])
  o.pin_memory = Device(r.f.device).is_cuda();            // staged for the copy to the GPU
  return std::make_unique<data::DataLoader>(r.train_set, o);
}

DataPass data_pass(const Run& r) {
  DataPass p;
  auto dl = train_loader(r);
  p.rss_before = rss_bytes();
  p.hwm_reset = reset_rss_peak();
  const int64_t reads0 = r.train_set->chunk_reads();
  const double t0 = now_ms();
  for (data::Batch& b : *dl) {
    // Read what the batch holds, as training would.
    p.label_sum += b[1].sum().item<int64_t>();
    p.records += b[0].size(0);
    ++p.batches;
    p.rss_peak_sampled = std::max(p.rss_peak_sampled, rss_bytes());
  }
  p.ms = now_ms() - t0;
  p.chunk_reads = r.train_set->chunk_reads() - reads0;
  const int64_t peak = std::max(p.rss_peak_sampled, p.hwm_reset ? rss_peak_bytes() : 0);
  p.rss_growth = std::max<int64_t>(0, peak - p.rss_before);
  return p;
}

std::shared_ptr<VisionTransformer> fresh_model(const Run& r, bool checkpoint) {
  memory::TagScope tag(memory::Tag::parameter);
  manual_seed(uint64_t(r.f.seed));  // the same initial weights in every stage
  auto m = nn::models::make_vit(r.cfg);  // on the host, the same weights for every device
  if (const Device d(r.f.device); d != kCPU) m->to(d);
  // Each block its own segment, recomputed in backward; the last is kept (its
  // recomputation would come first in backward and lower no peak).
  if (checkpoint) m->checkpointing = nn::balanced_plan(r.cfg.depth, r.cfg.depth);
  return m;
}

DType amp_dtype(const Flags& f) { return f.amp == "f16" ? DType::f16 : DType::bf16; }

// Fraction of the test chunks classified correctly: eval mode, no grad, the run's autocast.
double test_accuracy(VisionTransformer& m, const Run& r) {
  autograd::NoGradGuard ng;
  m.eval();
  AutocastGuard ac(amp_dtype(r.f), r.f.amp != "none");
  data::DataLoaderOptions o;
  o.batch_size = 500;
  o.num_workers = int(r.f.workers);
  o.sampler = r.test_set->sampler(0, /*shuffle=*/false);
  o.pin_memory = Device(r.f.device).is_cuda();
  data::DataLoader dl(r.test_set, o);
  const Device dev(r.f.device);
  int64_t correct = 0, n = 0;
  for (data::Batch& b : dl) {
    const Tensor pred = m.forward(b[0].to(dev)).argmax(1);
    correct += sum(eq(pred, b[1].to(dev)).to(DType::i64)).item<int64_t>();
    n += b[0].size(0);
  }
  m.train();
  return double(correct) / double(std::max<int64_t>(n, 1));
}

// Trains `steps` steps (0: --epochs epochs) of --batch images in --accum micro-batches.
Stage train(const std::string& name, VisionTransformer& m, const Run& r, int64_t steps) {
  const Flags& f = r.f;
  Stage s;
  s.name = name;
  auto dl = train_loader(r);
  const int64_t per_epoch = dl->size();
  int64_t total = steps > 0 ? steps : f.epochs * per_epoch;
  if (f.limit > 0) total = std::min(total, f.limit);
  nn::optim::AdamW opt(m.parameters(), {.lr = f.lr, .weight_decay = f.weight_decay});
  nn::amp::GradScaler scaler({.enabled = f.amp == "f16"});
  m.train();
  std::vector<double> ms;
  double epoch_loss = 0;
  int64_t epoch_steps = 0;
  const Device dev(f.device);
  memory::reset_peak(dev);
  int64_t step = 0;
  for (int64_t epoch = 0; step < total; ++epoch) {
    epoch_loss = 0, epoch_steps = 0;
    // The batches reach the device one step ahead (data/device_prefetch.h):
    // on a GPU the next one's copy overlaps this step.
    data::DevicePrefetcher prefetch(dev);
    auto it = dl->begin();
    if (it != dl->end()) prefetch.push(*it);
    while (!prefetch.empty()) {
      const data::Batch b = prefetch.pop();  // on dev
      if (++it != dl->end()) prefetch.push(*it);
      // Linear warm-up, then cosine decay to 0 over the run.
      const double lr = step < f.warmup ? f.lr * double(step + 1) / double(f.warmup)
                                        : f.lr * 0.5 *
                                              (1 + std::cos(M_PI * double(step - f.warmup) /
                                                            double(std::max<int64_t>(1, total - f.warmup))));
      opt.set_lr(lr);
      const double t0 = now_ms();
      const std::vector<Tensor> xs = nn::split_batch(b[0], f.accum), ys = nn::split_batch(b[1], f.accum);
      nn::GradAccumulator acc(double(b[0].size(0)));
      {
        // One autocast scope per step: the 16-bit weight casts are made once for all micro-batches.
        AutocastGuard ac(amp_dtype(f), f.amp != "none");
        for (size_t k = 0; k < xs.size(); ++k) {
          Tensor l;
          {
            memory::TagScope tag(memory::Tag::activation);  // what the forward keeps for backward
            l = nn::functional::cross_entropy(m.forward(xs[k]), ys[k]);
          }
          acc.backward(scaler.scale(l), double(xs[k].size(0)));
        }
      }
      // acc.loss() is the scaled loss under f16: divide the scale back out.
      const double loss = acc.loss() / scaler.get_scale();
      scaler.step(opt);
      scaler.update();
      opt.zero_grad();
      ms.push_back(now_ms() - t0);
      SNUG_CHECK(std::isfinite(loss) || f.amp == "f16", ValueError, "vit: the loss diverged at step ", step, " (", loss,
                 "); try a lower --lr");
      epoch_loss += loss, ++epoch_steps;
      ++step;
      if (!f.json && steps == 0 && step % 200 == 0)
        std::fprintf(stderr, "  %s step %lld/%lld: loss %.4f, %.1f ms/step\n", name.c_str(), (long long)step,
                     (long long)total, loss, ms.back());
      if (step >= total) break;
    }
    if (!f.json && steps == 0)
      std::fprintf(stderr, "  %s epoch %lld: mean loss %.4f\n", name.c_str(), (long long)epoch + 1,
                   epoch_loss / double(std::max<int64_t>(1, epoch_steps)));
  }
  const memory::DeviceStats st = memory::stats(dev);
  s.steps = step;
  s.peak_allocated = st.allocated_bytes.peak;
  for (int t = 0; t < memory::kNumTags; ++t) s.tag_peak[size_t(t)] = st.tag_bytes[size_t(t)].peak;
  std::vector<double> timed(ms.begin() + std::min<size_t>(2, ms.size() / 2), ms.end());  // past the warm-up
  std::sort(timed.begin(), timed.end());
  s.step_ms = timed.empty() ? 0 : timed[timed.size() / 2];
  s.loss = epoch_loss / double(std::max<int64_t>(1, epoch_steps));  // the last epoch's mean
  return s;
}

double mib(int64_t b) { return double(b) / 1048576.0; }

void print_table(const std::vector<Stage>& stages) {
  std::printf("%-10s %6s %9s %8s %8s %8s %8s %8s %8s %8s %8s %9s\n", "stage", "steps", "peak MiB", "act", "param",
              "grad", "optim", "work", "data", "ms/step", "loss", "test acc");
  using memory::Tag;
  for (const Stage& s : stages) {
    std::printf("%-10s %6lld %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.4f", s.name.c_str(),
                (long long)s.steps, mib(s.peak_allocated), mib(tag_peak(s, Tag::activation)),
                mib(tag_peak(s, Tag::parameter)), mib(tag_peak(s, Tag::gradient)),
                mib(tag_peak(s, Tag::optimizer_state)), mib(tag_peak(s, Tag::workspace)), mib(tag_peak(s, Tag::data)),
                s.step_ms, s.loss);
    if (std::isnan(s.test_accuracy))
      std::printf(" %9s\n", "-");
    else
      std::printf(" %8.2f%%\n", 100 * s.test_accuracy);
  }
}

std::string num(double v) { return std::isfinite(v) ? str(v) : std::string("null"); }

std::string stage_json(const Stage& s) {
  std::string tags;
  for (int t = 0; t < memory::kNumTags; ++t)
    tags += str(t ? "," : "", "\"", memory::tag_name(memory::Tag(t)), "\":", s.tag_peak[size_t(t)]);
  return str("{\"name\":\"", s.name, "\",\"steps\":", s.steps, ",\"step_ms\":", num(s.step_ms), ",\"loss\":",
             num(s.loss), ",\"test_accuracy\":", num(s.test_accuracy), ",\"peak_allocated_bytes\":", s.peak_allocated,
             ",\"activation_peak_bytes\":", tag_peak(s, memory::Tag::activation), ",\"tag_peak_bytes\":{", tags, "}}");
}

int make_chunks_command(const Flags& f) {
  const double t0 = now_ms();
  const ChunkFiles c = make_chunks(f.data, f.make_chunks);
  const double s = (now_ms() - t0) / 1000;
  if (f.json)
    std::printf("{\"program\":\"vit\",\"made_chunks\":\"%s\",\"record_bytes\":%lld,\"train_bytes\":%lld,"
                "\"test_bytes\":%lld,\"seconds\":%.2f}\n",
                f.make_chunks.c_str(), (long long)kRecordBytes, (long long)c.train_bytes, (long long)c.test_bytes, s);
  else
    std::printf("wrote %s (%lld records, %.2f MiB) and %s (%lld records, %.2f MiB) from %s in %.1f s\n",
                c.train.c_str(), (long long)(c.train_bytes / kRecordBytes), mib(c.train_bytes), c.test.c_str(),
                (long long)(c.test_bytes / kRecordBytes), mib(c.test_bytes), f.data.c_str(), s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"examples/vit: a ViT on MNIST read from chunked files by DataLoader workers, its memory by stage "
               "(docs/vit.md)",
               "vit"};
  cli::init(app);
  Flags f;
  app.add_option("--data", f.data, "MNIST IDX directory that --make-chunks reads")->capture_default_str();
  app.add_option("--make-chunks", f.make_chunks,
                 "write DIR/train.chunks and DIR/t10k.chunks from the IDX files in --data, then exit");
  app.add_option("--chunks", f.chunks, "directory of the chunk files to train on")->capture_default_str();
  app.add_option("--epochs", f.epochs, "training epochs")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--limit", f.limit, "stop training after this many steps (0: --epochs epochs)")
      ->transform(cli::integer(0))
      ->capture_default_str();
  app.add_option("--batch", f.batch, "images per step")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--accum", f.accum, "micro-batches per step (divides --batch)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--lr", f.lr, "AdamW peak learning rate (linear warm-up, cosine decay)")
      ->transform(cli::number({.lo = 0, .lo_open = true}))
      ->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "AdamW weight decay")
      ->transform(cli::number({.lo = 0}))
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "warm-up steps")->transform(cli::integer(0))->capture_default_str();
  app.add_option("--patch", f.patch, "patch side in pixels (divides 28)")
      ->transform(cli::integer(1, 28))
      ->capture_default_str();
  app.add_option("--embd", f.embd, "embedding width (a multiple of --heads)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--layers", f.layers, "transformer blocks")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--heads", f.heads, "attention heads")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--mlp-ratio", f.mlp_ratio, "MLP width / --embd")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--device", f.device,
                 "train on this device: cpu, cuda, cuda:N (or a virtual cpu:N); the loader stages batches in pinned "
                 "memory for a GPU")
      ->transform(cli::device())
      ->capture_default_str();
  app.add_flag("--checkpoint", f.checkpoint, "recompute each transformer block (but the last) in backward");
  app.add_option("--amp", f.amp, "autocast to bf16 or f16 (f16 with dynamic loss scaling)")
      ->check(CLI::IsMember({"none", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--threads", f.threads, "compute threads")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--workers", f.workers, "DataLoader worker threads")->transform(cli::integer(0))->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the weights and the order")->transform(cli::integer(0))->capture_default_str();
  app.add_option("--chunk-bytes", f.chunk_bytes, "bytes a chunk read brings in (whole records)")
      ->transform(cli::bytes())
      ->capture_default_str();
  app.add_option("--resident-chunks", f.resident_chunks, "chunks resident at once")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--rss-bound", f.rss_bound,
                 "the data path's resident memory must stay under this (exit 1 otherwise; 0: not checked)")
      ->transform(cli::bytes())
      ->capture_default_str();
  app.add_option("--probe-steps", f.probe_steps, "steps of each of the plain and checkpoint stages (0: skip them)")
      ->transform(cli::integer(0))
      ->capture_default_str();
  app.add_flag("--data-only", f.data_only, "run the data stage (the loader without the model) and stop");
  app.add_flag("--json", f.json, "print one JSON line with every figure on stdout");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    SNUG_FLAG_CHECK(f.batch % f.accum == 0, "--accum ", f.accum, " must divide --batch ", f.batch);
    SNUG_FLAG_CHECK(f.embd % f.heads == 0, "--embd ", f.embd, " must be a multiple of --heads ", f.heads);
    SNUG_FLAG_CHECK(kSide % f.patch == 0, "--patch ", f.patch, " must divide the image side 28");
    SNUG_FLAG_CHECK(f.chunk_bytes >= kRecordBytes, "--chunk-bytes ", f.chunk_bytes, " is less than one ",
                    kRecordBytes, "-byte record");
    set_num_threads(int(f.threads));
    if (!f.make_chunks.empty()) return make_chunks_command(f);

    const ChunkFiles files = chunk_files(f.chunks);
    Run r{f, open_chunks(files.train, f.chunk_bytes, f.resident_chunks),
          open_chunks(files.test, f.chunk_bytes, f.resident_chunks), {}};
    SNUG_FLAG_CHECK(r.train_set->size() >= f.batch, "--batch ", f.batch, " is more than the ", r.train_set->size(),
                    " training records in ", files.train);
    r.cfg = {.patch = f.patch, .dim = f.embd, .depth = f.layers, .heads = f.heads, .mlp_ratio = f.mlp_ratio};
    const int64_t file_bytes = (r.train_set->size() + r.test_set->size()) * kRecordBytes;
    if (!f.json)
      std::fprintf(stderr, "chunks %s: %lld training and %lld test records (%.2f MiB), %lld-record chunks, %lld resident\n",
                   f.chunks.c_str(), (long long)r.train_set->size(), (long long)r.test_set->size(), mib(file_bytes),
                   (long long)r.train_set->chunk_records(), (long long)f.resident_chunks);

    // data: the loader alone, before any model exists.
    const DataPass dp = data_pass(r);
    const bool rss_ok = f.rss_bound == 0 || dp.rss_growth <= f.rss_bound;

    std::vector<Stage> stages;
    double ratio = NAN;
    if (!f.data_only) {
      if (f.probe_steps > 0) {
        for (bool ck : {false, true}) {
          auto m = fresh_model(r, ck);
          stages.push_back(train(ck ? "checkpoint" : "plain", *m, r, f.probe_steps));
        }
        ratio = double(tag_peak(stages[1], memory::Tag::activation)) /
                double(std::max<int64_t>(1, tag_peak(stages[0], memory::Tag::activation)));
      }
      auto m = fresh_model(r, f.checkpoint);
      if (!f.json) std::fprintf(stderr, "%s, %lld parameters\n", m->repr().c_str(), (long long)m->num_parameters());
      Stage s = train("train", *m, r, 0);
      s.test_accuracy = test_accuracy(*m, r);
      stages.push_back(s);
    }
    const Stage* trained = stages.empty() ? nullptr : &stages.back();
    const int64_t process_peak = rss_peak_bytes();  // since the data stage's reset: the whole run's peak

    if (f.json) {
      std::string st;
      for (const Stage& s : stages) st += (st.empty() ? "" : ",") + stage_json(s);
      std::printf(
          "{\"program\":\"vit\",\"device\":\"%s\",\"cpu_isa\":\"%s\",\"threads\":%lld,\"workers\":%lld,\"epochs\":%lld,\"batch\":%lld,"
          "\"accum\":%lld,\"amp\":\"%s\",\"checkpoint\":%s,\"patch\":%lld,\"embd\":%lld,\"layers\":%lld,\"heads\":%lld,"
          "\"test_accuracy\":%s,\"activation_peak_bytes\":%lld,\"activation_peak_bytes_plain\":%lld,"
          "\"activation_peak_bytes_checkpoint\":%lld,\"checkpoint_activation_ratio\":%s,"
          "\"chunk_file_bytes\":%lld,\"chunk_records\":%lld,\"resident_chunks\":%lld,\"chunk_reads\":%lld,"
          "\"data_batches\":%lld,\"data_ms\":%.1f,\"rss_data_bytes\":%lld,\"rss_bound_bytes\":%lld,"
          "\"chunk_files_over_bound\":%s,\"rss_within_bound\":%s,\"rss_hwm_reset\":%s,\"rss_process_peak_bytes\":%lld,"
          "\"stages\":[%s]}\n",
          Device(f.device).str().c_str(), cpu_isa().c_str(), (long long)f.threads, (long long)f.workers, (long long)f.epochs, (long long)f.batch,
          (long long)f.accum, f.amp.c_str(), f.checkpoint ? "true" : "false", (long long)f.patch, (long long)f.embd,
          (long long)f.layers, (long long)f.heads, trained ? num(trained->test_accuracy).c_str() : "null",
          (long long)(trained ? tag_peak(*trained, memory::Tag::activation) : 0),
          (long long)(stages.size() > 1 ? tag_peak(stages[0], memory::Tag::activation) : 0),
          (long long)(stages.size() > 1 ? tag_peak(stages[1], memory::Tag::activation) : 0), num(ratio).c_str(),
          (long long)file_bytes, (long long)r.train_set->chunk_records(), (long long)f.resident_chunks,
          (long long)dp.chunk_reads, (long long)dp.batches, dp.ms, (long long)dp.rss_growth, (long long)f.rss_bound,
          f.rss_bound > 0 ? num(double(file_bytes) / double(f.rss_bound)).c_str() : "null", rss_ok ? "true" : "false",
          dp.hwm_reset ? "true" : "false", (long long)process_peak, st.c_str());
    } else {
      std::printf("ViT: patch %lld, embd %lld, %lld layers, %lld heads; batch %lld in %lld micro-batches, amp %s%s\n",
                  (long long)f.patch, (long long)f.embd, (long long)f.layers, (long long)f.heads, (long long)f.batch,
                  (long long)f.accum, f.amp.c_str(), f.checkpoint ? ", checkpointed blocks" : "");
      std::printf("data: %lld batches of %lld in %.0f ms with %lld workers, %lld chunk reads of %lld chunks; "
                  "resident memory +%.2f MiB (bound %.2f MiB: %s), chunk files %.2f MiB (%.1fx the bound)\n",
                  (long long)dp.batches, (long long)f.batch, dp.ms, (long long)f.workers, (long long)dp.chunk_reads,
                  (long long)r.train_set->num_chunks(), mib(dp.rss_growth), mib(f.rss_bound),
                  f.rss_bound == 0 ? "not checked" : rss_ok ? "within" : "EXCEEDED", mib(file_bytes),
                  f.rss_bound > 0 ? double(file_bytes) / double(f.rss_bound) : 0.0);
      if (!stages.empty()) {
        print_table(stages);
        if (!std::isnan(ratio))
          std::printf("activation peak: checkpoint / plain %.3f (%.1fx lower)\n", ratio, 1 / ratio);
        std::printf("process resident peak %.2f MiB\n", mib(process_peak));
      }
    }
    if (!rss_ok) {
      std::fprintf(stderr, "vit: error: the data path's resident memory grew by %s, over --rss-bound %s\n",
                   memory::format_bytes(size_t(dp.rss_growth)).c_str(),
                   memory::format_bytes(size_t(f.rss_bound)).c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    return cli::exit_status("vit", e);
  }
}

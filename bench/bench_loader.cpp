// SPDX-License-Identifier: MIT
// snug-bench loader: the data pipeline.
//
// 1. DataLoader workers: a synthetic dataset whose samples each cost 2 ms to
//    produce. The cost is a sleep (std::this_thread::sleep_for), standing in
//    for I/O or decoding; a sleep is honest on a 2-core machine where busy
//    work would measure the core count instead. batches_per_s for 0 and 2
//    workers and their ratio (target >= 1.8).
// 2. TokenFile: random windows (B x (T+1) tokens at random offsets, copied
//    out as i64) from a page-cached uint16 token file; tokenfile_gb_per_s
//    counts the token-file bytes read (2 per token; target >= 1 GB/s).
// 3. ChunkedDataset: one pass through a DataLoader (2 workers, the
//    chunk-aware sampler) over a file four times its memory cap (the
//    resident chunks). chunked_peak_rss_bytes is the growth of the process's
//    peak RSS during the pass: /proc/self/clear_refs ("5") resets VmHWM to
//    the current RSS before the dataset is built, and the figure is VmHWM
//    after the pass minus VmRSS before it. Where clear_refs cannot be written
//    a thread samples VmRSS every millisecond instead (rss_method says which).
//    The dataset's buffers (two resident chunks) are given 3/4 of the cap;
//    the figure also includes the batch tensors, the allocator's cache and
//    anything else the process touched, so it over- rather than understates.
// Every figure is the median over --repeats runs.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <snug/data/chunked.h>
#include <snug/data/dataloader.h>
#include <snug/data/token_file.h>
#include "bench/bench.h"

namespace {

using namespace snug;
using namespace snug::data;

class SlowDataset : public Dataset {
 public:
  SlowDataset(int64_t n, int cost_us) : n_(n), cost_us_(cost_us) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t i) const override {
    std::this_thread::sleep_for(std::chrono::microseconds(cost_us_));
    return {full({64}, double(i), DType::f32), scalar_tensor(double(i % 10), DType::i64)};
  }

 private:
  int64_t n_;
  int cost_us_;
};

double batches_per_s(const std::shared_ptr<const Dataset>& ds, int workers, int64_t batch) {
  DataLoader loader(ds, {.batch_size = batch, .shuffle = true, .seed = 1, .num_workers = workers});
  const double t0 = bench::now_seconds();
  int64_t n = 0;
  for (Batch& b : loader) n += b.size() > 0;
  return double(n) / (bench::now_seconds() - t0);
}

// A /proc/self/status field in bytes (e.g. "VmRSS"), or -1.
int64_t status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t klen = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, klen, key) == 0 && line.size() > klen && line[klen] == ':')
      return std::stoll(line.substr(klen + 1)) * 1024;  // "  1234 kB"
  return -1;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return bool(f);
}

struct ChunkedRun {
  int64_t peak_growth;
  bool used_hwm;
};

ChunkedRun chunked_pass(const std::string& path, const ChunkedOptions& opt) {
  const bool hwm = reset_peak_rss();
  const int64_t before = status_bytes("VmRSS");
  std::atomic<bool> done{false};
  std::atomic<int64_t> sampled{before};
  std::thread sampler;
  if (!hwm) {
    sampler = std::thread([&] {
      while (!done.load()) {
        const int64_t r = status_bytes("VmRSS");
        if (r > sampled.load()) sampled.store(r);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  int64_t records = 0;
  {
    auto ds = std::make_shared<ChunkedDataset>(path, opt);
    DataLoader loader(ds, {.batch_size = 256, .num_workers = 2, .sampler = ds->sampler(3)});
    for (Batch& b : loader) records += b.size();
    if (records != ds->size())
      std::fprintf(stderr, "loader: chunked pass saw %lld of %lld records\n", (long long)records,
                   (long long)ds->size());
  }
  done.store(true);
  if (sampler.joinable()) sampler.join();
  const int64_t peak = hwm ? status_bytes("VmHWM") : sampled.load();
  return {peak - before, hwm};
}

}  // namespace

SNUG_BENCH(loader, "data: DataLoader 0 vs 2 workers (2 ms/sample), TokenFile random windows, ChunkedDataset RSS",
           bench::int_flag("repeats", 5, "repeats of each measurement (the median is reported)"),
           bench::int_flag("samples", 128, "samples of the synthetic dataset"),
           bench::int_flag("batch", 8, "DataLoader batch size"),
           bench::int_flag("sample-us", 2000, "microseconds each synthetic sample costs (a sleep)", 0),
           bench::text_flag("dir", "",
                            "where the token and chunked files are written [default: the temporary directory]", "DIR"),
           bench::int_flag("tokens", 32 << 20, "uint16 tokens in the token file", 2048),
           bench::int_flag("chunked-cap", 32 << 20, "ChunkedDataset memory cap in bytes (the file is 4x it)",
                           1 << 20)) {
  const int repeats = static_cast<int>(args.get_int("repeats"));
  const int64_t samples = args.get_int("samples"), batch = args.get_int("batch");
  const int cost_us = static_cast<int>(args.get_int("sample-us"));
  const std::string dir = args.has("dir") ? args.get("dir") : std::filesystem::temp_directory_path().string();

  // 1. workers
  auto slow = std::make_shared<SlowDataset>(samples, cost_us);
  std::vector<double> w0, w2;
  for (int r = 0; r < repeats; ++r) {
    w0.push_back(batches_per_s(slow, 0, batch));
    w2.push_back(batches_per_s(slow, 2, batch));
  }
  const double b0 = bench::median(w0), b2 = bench::median(w2);

  // 2. token file: 32M uint16 tokens (64 MiB), read once so it is page-cached.
  const int64_t ntok = args.get_int("tokens");
  const std::string tpath = dir + "/snug_bench_tokens_" + std::to_string(::getpid()) + ".bin";
  {
    std::vector<int64_t> toks(static_cast<size_t>(ntok));
    for (int64_t i = 0; i < ntok; ++i) toks[size_t(i)] = (i * 2654435761LL) & 0xffff;
    write_token_file(tpath, toks, 2);
  }
  std::vector<double> gbs;
  {
    TokenFile tf(tpath, 2);
    tf.read(0, tf.size());  // page it in
    const int64_t B = 32, T = 1024;
    Generator gen(5);
    for (int r = 0; r < repeats; ++r) {
      int64_t bytes = 0;
      const double t0 = bench::now_seconds();
      while (bench::now_seconds() - t0 < 0.3) {
        auto xy = tf.random_batch(B, T, gen);
        bytes += B * (T + 1) * 2;
      }
      gbs.push_back(double(bytes) / (bench::now_seconds() - t0) / 1e9);
    }
  }
  std::filesystem::remove(tpath);

  // 3. chunked: a cap of 32 MiB and a 128 MiB file. The dataset's own
  // buffers take 3/4 of the cap (two resident 12 MiB chunks); the rest is
  // headroom for the batches, their tensors and the allocator cache.
  const int64_t cap = args.get_int("chunked-cap");
  const int64_t record = 1024;
  const ChunkedOptions copt{.record_bytes = record, .chunk_bytes = cap * 3 / 8, .max_resident_chunks = 2};
  const std::string cpath = dir + "/snug_bench_chunked_" + std::to_string(::getpid()) + ".bin";
  {
    std::ofstream f(cpath, std::ios::binary);
    std::vector<char> piece(1 << 20);
    for (int64_t k = 0; k < 4 * cap / int64_t(piece.size()); ++k) {
      std::memset(piece.data(), int(k & 0xff), piece.size());
      f.write(piece.data(), std::streamsize(piece.size()));
    }
  }
  std::vector<double> rss;
  bool used_hwm = true;
  for (int r = 0; r < std::max(3, repeats / 2); ++r) {
    ChunkedRun c = chunked_pass(cpath, copt);
    rss.push_back(double(c.peak_growth));
    used_hwm = used_hwm && c.used_hwm;
  }
  const int64_t file_bytes = int64_t(std::filesystem::file_size(cpath));
  std::filesystem::remove(cpath);
  const double peak = bench::median(rss), peak_max = *std::max_element(rss.begin(), rss.end());
  const int64_t buffers = copt.max_resident_chunks * (copt.chunk_bytes / record * record);  // memory_bytes()

  if (args.json()) {
    std::printf(
        "{\"bench\":\"loader\",\"sample_cost\":\"sleep\",\"sample_us\":%d,\"samples\":%lld,\"batch\":%lld,"
        "\"batches_per_s_0_workers\":%.2f,\"batches_per_s_2_workers\":%.2f,\"speedup_2_workers\":%.2f,"
        "\"tokenfile_gb_per_s\":%.2f,\"tokenfile_window\":\"32x1025 u16\","
        "\"chunked_peak_rss_bytes\":%.0f,\"chunked_peak_rss_bytes_max\":%.0f,\"chunked_cap_bytes\":%lld,"
        "\"chunked_buffer_bytes\":%lld,\"chunked_file_bytes\":%lld,"
        "\"rss_method\":\"%s\",\"repeats\":%d}\n",
        cost_us, (long long)samples, (long long)batch, b0, b2, b2 / b0, bench::median(gbs), peak, peak_max,
        (long long)cap, (long long)buffers, (long long)file_bytes,
        used_hwm ? "VmHWM delta after clear_refs" : "sampled VmRSS", repeats);
  } else {
    std::printf("DataLoader, %lld samples of %d us (sleep), batch %lld:\n", (long long)samples, cost_us,
                (long long)batch);
    std::printf("  0 workers  %8.2f batches/s\n  2 workers  %8.2f batches/s   (%.2fx)\n", b0, b2, b2 / b0);
    std::printf("TokenFile random windows (32 x 1025 uint16, page-cached): %.2f GB/s of token bytes\n",
                bench::median(gbs));
    std::printf("ChunkedDataset pass over %lld bytes with a %lld-byte cap: peak RSS growth %.0f bytes (%s)\n",
                (long long)file_bytes, (long long)cap, peak, used_hwm ? "VmHWM after clear_refs" : "sampled VmRSS");
  }
  return 0;
}

// SPDX-License-Identifier: MIT
#include <snug/data/dataloader.h>

#include <cstring>

#include <snug/core/raw_ops.h>

#include <omp.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <snug/autograd/grad_mode.h>
#include <snug/core/backend.h>
#include <snug/memory/allocator.h>
#include <snug/memory/pinned.h>

namespace snug::data {

namespace {
// A copy of t (on the host) in pinned memory, freed back to the pinned pool.
Tensor pin(const Tensor& t) {
  const Tensor c = raw::contiguous(raw::to_device(t, kCPU));
  void* p = memory::pinned_allocate(c.nbytes());
  if (c.nbytes()) std::memcpy(p, c.data_ptr(), c.nbytes());
  return from_blob(p, c.shape(), c.dtype(), [](void* q) { memory::pinned_free(q); });
}
}  // namespace

namespace {

// One epoch's work, fixed before any worker sees it (NOTE [ DataLoader order
// and determinism ]). Shared (read-only) by the workers and the caller.
struct Job {
  int64_t generation = 0;
  int64_t epoch = 0;
  std::vector<std::vector<int64_t>> batches;
};

// A made batch, or why it could not be made.
struct Result {
  Batch batch;
  std::exception_ptr error;
  std::string message;
  int64_t sample = -1;
};

}  // namespace

struct DataLoader::State {
  std::mutex mu;
  std::condition_variable work_cv;   // workers wait here for a batch to start
  std::condition_variable ready_cv;  // the caller waits here for the next batch
  std::vector<std::thread> threads;
  bool shutdown = false;
  // Bumped whenever an epoch starts or ends; a worker whose batch belongs to
  // an older generation drops it. Atomic so workers can poll it between samples.
  std::atomic<int64_t> generation{0};
  std::shared_ptr<const Job> job;  // null between epochs
  int64_t next_to_start = 0;
  int64_t next_to_consume = 0;
  int64_t window = 1;  // prefetch_factor * num_workers
  std::map<int64_t, Result> ready;
};

namespace {

// Makes batch b of job on this thread. Stops early (returning an empty
// Result) when `gen` stops being the current generation.
Result make_batch(const Dataset& ds, const CollateFn& collate, uint64_t seed, const Job& job, int64_t b,
                  const std::atomic<int64_t>* gen_now, int64_t gen, int worker) {
  const std::vector<int64_t>& idx = job.batches[size_t(b)];
  const std::string who = worker < 0 ? std::string("DataLoader") : str("DataLoader worker ", worker);
  Result r;
  std::vector<Sample> samples;
  samples.reserve(idx.size());
  for (int64_t i : idx) {
    if (gen_now && gen_now->load(std::memory_order_relaxed) != gen) return r;
    try {
      seed_sample_rng(seed, job.epoch, i);
      samples.push_back(ds.get(i));
    } catch (const std::exception& e) {
      r.error = std::current_exception();
      r.sample = i;
      r.message = str(who, ": dataset.get(", i, ") failed (sample ", i, ", batch ", b, " of epoch ", job.epoch,
                      "): ", e.what());
      return r;
    } catch (...) {
      r.error = std::current_exception();
      r.sample = i;
      r.message = str(who, ": dataset.get(", i, ") failed (sample ", i, ", batch ", b, " of epoch ", job.epoch,
                      ") with a non-standard exception");
      return r;
    }
  }
  try {
    r.batch = collate(std::move(samples));
    r.batch.indices = idx;
  } catch (const std::exception& e) {
    r.error = std::current_exception();
    r.message = str(who, ": collate failed on batch ", b, " of epoch ", job.epoch, " (", idx.size(),
                    " samples starting with sample ", idx.empty() ? -1 : idx[0], "): ", e.what());
  } catch (...) {
    r.error = std::current_exception();
    r.message = str(who, ": collate failed on batch ", b, " of epoch ", job.epoch, " with a non-standard exception");
  }
  return r;
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions opt)
    : dataset_(std::move(dataset)), opt_(std::move(opt)), state_(std::make_unique<State>()) {
  SNUG_CHECK(dataset_ != nullptr, ValueError, "DataLoader: dataset is null");
  SNUG_CHECK(opt_.num_workers >= 0, ValueError, "DataLoader: num_workers must be >= 0, got ", opt_.num_workers);
  SNUG_CHECK(opt_.prefetch_factor >= 1, ValueError, "DataLoader: prefetch_factor must be >= 1, got ",
             opt_.prefetch_factor);
  if (!opt_.collate) opt_.collate = stack_collate;
  // Pinned memory stages copies to a GPU: only when one is present. Asking
  // loads the CUDA plugin, which provides the pinned pool (memory/pinned.h).
  if (opt_.pin_memory && has_backend(DeviceType::CUDA) && memory::pinned_available()) {
    // Each batch's tensors are copied into the pinned pool once collated, on
    // the worker, so the copy to the GPU can start from page-locked memory.
    pinned_ = true;
    opt_.collate = [inner = opt_.collate](std::vector<Sample> samples) {
      Batch b = inner(std::move(samples));
      b.each_tensor([](Tensor& t) { t = pin(t); });
      return b;
    };
  }
  if (opt_.batch_sampler) {
    batches_ = opt_.batch_sampler;
  } else {
    SNUG_CHECK(opt_.batch_size >= 1, ValueError, "DataLoader: batch_size must be >= 1, got ", opt_.batch_size);
    std::shared_ptr<const Sampler> s = opt_.sampler;
    if (!s && opt_.shuffle) s = std::make_shared<RandomSampler>(dataset_->size(), opt_.seed);
    if (!s) s = std::make_shared<SequentialSampler>(dataset_->size());
    batches_ = std::make_shared<BatchSampler>(s, opt_.batch_size, opt_.drop_last);
  }
  state_->window = int64_t(opt_.prefetch_factor) * std::max(1, opt_.num_workers);
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    state_->generation.fetch_add(1);  // workers stop between samples
    state_->job.reset();
    state_->ready.clear();
  }
  stop_workers();
}

int64_t DataLoader::size() const { return batches_->size(); }

void DataLoader::set_epoch(int64_t epoch) {
  SNUG_CHECK(epoch >= 0, ValueError, "DataLoader::set_epoch: epoch must be >= 0, got ", epoch);
  next_epoch_ = epoch;
}

int DataLoader::live_workers() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return int(state_->threads.size());
}

DataLoader::Iterator DataLoader::begin() {
  State& st = *state_;
  auto job = std::make_shared<Job>();
  job->epoch = next_epoch_++;
  job->batches = batches_->batches(job->epoch);
  {
    std::lock_guard<std::mutex> lk(st.mu);
    // An epoch still running is superseded: its workers drop what they make.
    job->generation = st.generation.fetch_add(1) + 1;
    st.job = job;
    st.ready.clear();
    st.next_to_start = 0;
    st.next_to_consume = 0;
    if (opt_.num_workers > 0 && st.threads.empty())
      for (int w = 0; w < opt_.num_workers; ++w) st.threads.emplace_back([this, w] { worker_loop(w); });
  }
  st.work_cv.notify_all();
  Iterator it(this, job->generation);
  it.fetch();
  return it;
}

void DataLoader::worker_loop(int w) {
  State& s = *state_;
  // A batch is small work: one OpenMP thread per worker (this sets only the
  // calling thread's count), so N workers do not each start a team of
  // threads and oversubscribe the cores.
  omp_set_num_threads(1);
  NoGradGuard no_grad;  // samples never record history
  memory::TagScope tag(memory::Tag::data);
  std::unique_lock<std::mutex> lk(s.mu);
  for (;;) {
    // NOTE [ DataLoader bounded prefetch ]: the window condition.
    s.work_cv.wait(lk, [&] {
      return s.shutdown || (s.job && s.next_to_start < int64_t(s.job->batches.size()) &&
                            s.next_to_start < s.next_to_consume + s.window);
    });
    if (s.shutdown) return;
    std::shared_ptr<const Job> job = s.job;
    const int64_t b = s.next_to_start++;
    lk.unlock();
    Result r = make_batch(*dataset_, opt_.collate, opt_.seed, *job, b, &s.generation, job->generation, w);
    lk.lock();
    if (s.generation.load() == job->generation) {
      s.ready.emplace(b, std::move(r));
      s.ready_cv.notify_all();
    }
    // else: the epoch ended while this batch was made; drop it (here, under
    // the lock, so its tensors die before the next wait).
  }
}

bool DataLoader::next_batch(int64_t gen, Batch& out) {
  State& st = *state_;
  std::unique_lock<std::mutex> lk(st.mu);
  SNUG_CHECK(st.generation.load() == gen, ValueError,
             "DataLoader: this iterator's epoch has ended (a later begin() started another epoch, or a batch failed)");
  std::shared_ptr<const Job> job = st.job;
  const int64_t b = st.next_to_consume;
  if (b >= int64_t(job->batches.size())) {
    lk.unlock();
    end_epoch(gen);
    return false;
  }
  Result r;
  if (opt_.num_workers == 0) {
    st.next_to_consume++;
    lk.unlock();
    NoGradGuard no_grad;
    memory::TagScope tag(memory::Tag::data);
    r = make_batch(*dataset_, opt_.collate, opt_.seed, *job, b, nullptr, gen, -1);
  } else {
    st.ready_cv.wait(lk, [&] { return st.ready.count(b) != 0; });
    auto node = st.ready.extract(b);
    r = std::move(node.mapped());
    st.next_to_consume++;
    lk.unlock();
    st.work_cv.notify_all();  // the window moved
  }
  if (r.error) {
    end_epoch(gen);
    throw DataLoaderError(r.message, r.sample, b, r.error);
  }
  out = std::move(r.batch);
  return true;
}

void DataLoader::end_epoch(int64_t gen) noexcept {
  State& st = *state_;
  std::map<int64_t, Result> dropped;  // destroyed outside the lock
  {
    std::lock_guard<std::mutex> lk(st.mu);
    if (st.generation.load() != gen) return;
    st.generation.fetch_add(1);
    st.job.reset();
    dropped.swap(st.ready);
  }
  if (!opt_.persistent_workers) stop_workers();
}

void DataLoader::stop_workers() noexcept {
  State& st = *state_;
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lk(st.mu);
    st.shutdown = true;
    threads.swap(st.threads);
  }
  st.work_cv.notify_all();
  for (std::thread& t : threads) t.join();
  std::lock_guard<std::mutex> lk(st.mu);
  st.shutdown = false;
}

// ---- Iterator ------------------------------------------------------------------

DataLoader::Iterator::Iterator(Iterator&& o) noexcept
    : loader_(o.loader_), generation_(o.generation_), current_(std::move(o.current_)), done_(o.done_) {
  o.loader_ = nullptr;
  o.done_ = true;
}

DataLoader::Iterator::~Iterator() {
  if (loader_ && !done_) loader_->end_epoch(generation_);  // abandoned halfway
}

void DataLoader::Iterator::fetch() {
  try {
    if (!loader_->next_batch(generation_, current_)) {
      done_ = true;
      current_ = Batch{};
    }
  } catch (...) {
    done_ = true;
    current_ = Batch{};
    throw;
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  SNUG_CHECK(loader_ && !done_, ValueError, "DataLoader: ++ on an iterator at the end of its epoch");
  fetch();
  return *this;
}

}  // namespace snug::data

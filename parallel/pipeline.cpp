// SPDX-License-Identifier: MIT
#include <snug/parallel/pipeline.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include <omp.h>

#include <snug/autograd/checkpoint.h>
#include <snug/autograd/engine.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>
#include <snug/core/backend.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stream.h>
#include <snug/nn/accumulate.h>

namespace snug::parallel {

// GPipe: every forward, then every backward. 1F1B: stage k first runs
// min(K - k - 1, M) forwards (warm-up), then alternates one forward and one
// backward, then drains the remaining backwards; it holds at most K - k
// micro-batches' activations instead of M. Backwards run in micro-batch order
// in both, so each parameter's gradient sums its micro-batches in the same
// order as a plain accumulation loop on one device.
std::vector<ScheduleOp> stage_schedule(Schedule s, int64_t k, int64_t K, int64_t M) {
  SNUG_CHECK(K >= 1 && k >= 0 && k < K && M >= 1, ValueError, "stage_schedule: bad stage ", k, " of ", K, ", ", M,
             " micro-batches");
  std::vector<ScheduleOp> ops;
  if (s == Schedule::gpipe) {
    for (int64_t m = 0; m < M; ++m) ops.push_back({false, m});
    for (int64_t m = 0; m < M; ++m) ops.push_back({true, m});
    return ops;
  }
  const int64_t warm = std::min(K - k - 1, M);
  int64_t f = 0, b = 0;
  for (; f < warm; ++f) ops.push_back({false, f});
  while (f < M) {
    ops.push_back({false, f++});
    ops.push_back({true, b++});
  }
  while (b < M) ops.push_back({true, b++});
  return ops;
}

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A blocking FIFO of (micro-batch, tensor) between two stages. close() wakes
// every waiter, which then throws: that is how one stage's failure stops the
// others instead of leaving them waiting forever.
class Channel {
 public:
  void send(int64_t m, Tensor t) {
    std::lock_guard<std::mutex> lk(mu_);
    q_.emplace_back(m, std::move(t));
    cv_.notify_all();
  }
  Tensor recv(int64_t m) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return closed_ || !q_.empty(); });
    SNUG_CHECK(!closed_, Error, "pipeline: stopped because another stage failed");
    auto [got, t] = std::move(q_.front());
    q_.pop_front();
    SNUG_CHECK(got == m, Error, "pipeline: expected micro-batch ", m, ", received ", got, " (schedule mismatch)");
    return t;
  }
  void close() {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, Tensor>> q_;
  bool closed_ = false;
};

}  // namespace

Pipeline::Pipeline(LayerStack& stack, Placement placement, PipelineOptions options)
    : stack_(stack), placement_(std::move(placement)), opts_(options) {
  SNUG_CHECK(opts_.micro_batches >= 1, ValueError, "Pipeline: micro_batches must be >= 1, got ", opts_.micro_batches);
  SNUG_CHECK(opts_.threads_per_stage >= 1, ValueError, "Pipeline: threads_per_stage must be >= 1");
  SNUG_CHECK(placement_.bounds.size() == placement_.devices.size() + 1 &&
                 placement_.bounds.back() == static_cast<int64_t>(stack_.size()),
             ValueError, "Pipeline: the placement does not cover the stack's ", stack_.size(), " layers");
  for (size_t k = 0; k < placement_.devices.size(); ++k)
    for (int64_t i = placement_.bounds[k]; i < placement_.bounds[k + 1]; ++i) {
      const auto& l = *stack_.layers[static_cast<size_t>(i)];
      if (l.parameters().empty() && l.named_buffers().empty()) continue;
      SNUG_CHECK(layer_device(l) == placement_.devices[k], DeviceError, "Pipeline: layer '",
                 stack_.names[static_cast<size_t>(i)], "' is on ", layer_device(l).str(), " but its stage runs on ",
                 placement_.devices[k].str(), "; call place(stack, placement) first");
    }
  // NOTE [ CUDA stages ]
  // A stage on a GPU queues its kernels on a stream of its own (a StreamGuard
  // in its thread), so two stages sharing a GPU overlap as two CPU stages do
  // on two threads, and no stage waits on another's default-stream work.
  // Hand-offs stay safe across streams and threads: a stage synchronizes its
  // devices before it sends a tensor (the copy to the next device is done by
  // then), and the receiving stage records the tensor's block as used by its
  // own stream (memory::record_stream), so the allocator does not reuse the
  // block for the sender's stream while the receiver's kernels may still read it.
  // (memory::create_stream gives 0, no stream of its own, for a CPU device.)
  streams_.assign(placement_.devices.size(), 0);
  for (size_t k = 0; k < placement_.devices.size(); ++k) streams_[k] = memory::create_stream(placement_.devices[k]);
}

Pipeline::~Pipeline() {
  for (size_t k = 0; k < streams_.size(); ++k) {
    if (!streams_[k]) continue;
    try {
      memory::destroy_stream(placement_.devices[k], streams_[k]);  // waits for its work first
    } catch (...) {  // a destructor must not throw; the stream dies with the context
    }
  }
}

double Pipeline::step(const Tensor& x, const Tensor& y) {
  const int64_t K = placement_.num_stages(), M = opts_.micro_batches;
  SNUG_CHECK(x.dim() >= 1 && y.dim() >= 1 && x.size(0) == y.size(0), ShapeError,
             "Pipeline::step: inputs and targets need the same batch size, got ", shape_str(x.shape()), " and ",
             shape_str(y.shape()));
  SNUG_CHECK(x.size(0) >= M, ValueError, "Pipeline::step: cannot split a batch of ", x.size(0), " into ", M,
             " micro-batches");
  const std::vector<Tensor> xs = nn::split_batch(x, M), ys = nn::split_batch(y, M);
  const double rows = static_cast<double>(x.size(0));

  // Gradient accumulators are created lazily on first use; make them here, on
  // one thread, so stages sharing a weight never race to create its accumulator.
  for (const Tensor& p : stack_.parameters())
    if (p.requires_grad()) autograd::edge_of(p);

  std::vector<Channel> fwd(static_cast<size_t>(std::max<int64_t>(K - 1, 0))),
      bwd(static_cast<size_t>(std::max<int64_t>(K - 1, 0)));
  std::mutex err_mu, tl_mu;
  std::exception_ptr first_error;
  std::atomic<bool> failed{false};
  std::vector<double> losses(static_cast<size_t>(M), 0.0);
  timeline_.clear();
  const int prev_threads = get_num_threads();
  const double t0 = now_ms();

  auto fail = [&](std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lk(err_mu);
      if (!first_error) first_error = e;
    }
    failed = true;
    for (auto& c : fwd) c.close();
    for (auto& c : bwd) c.close();
  };

  auto run_stage = [&](int64_t k) {
    try {
      // OpenMP's thread count is per thread: the global one (GEMM, Eigen) was
      // set before the stage threads started.
      omp_set_num_threads(opts_.threads_per_stage);
      autograd::GradModeGuard grad_on(true);
      const Device dev = placement_.devices[static_cast<size_t>(k)];
      // NOTE [ CUDA stages ]: this stage's stream, and the hand-off rules.
      const std::uintptr_t stream = streams_[static_cast<size_t>(k)];
      std::optional<memory::StreamGuard> on_stream;
      if (stream) {
        memory::set_current_device(dev);
        on_stream.emplace(dev, stream);
      }
      auto received = [&](const Tensor& t) {  // a tensor another stage made: our stream uses it too
        if (stream && t.defined() && t.device() == dev && t.storage())
          memory::record_stream(dev, t.storage()->data(), stream);
        return t;
      };
      auto handing_off = [&](const Tensor& t) {  // t (on the next stage's device) is complete before we send it
        if (t.defined()) backend_for(t.device()).synchronize(t.device());  // a no-op on CPU devices
        if (stream) backend_for(dev).synchronize(dev);
        return t;
      };
      const int64_t a = placement_.bounds[static_cast<size_t>(k)], b = placement_.bounds[static_cast<size_t>(k) + 1];
      const bool first = k == 0, last = k == K - 1;
      std::vector<Tensor> inputs(static_cast<size_t>(M)), outputs(static_cast<size_t>(M));
      auto run_layers = [&](const Tensor& in) {
        Tensor h = in;
        for (int64_t i = a; i < b; ++i) h = stack_.layers[static_cast<size_t>(i)]->forward(h);
        return h;
      };
      for (const ScheduleOp& op : stage_schedule(opts_.schedule, k, K, M)) {
        if (failed) break;
        const auto m = static_cast<size_t>(op.micro_batch);
        // An event's time starts once its input is here: waiting is idle time.
        double s0 = 0;
        if (!op.backward) {
          Tensor in;
          if (first) {
            s0 = now_ms();
            in = xs[m].device() == dev ? xs[m] : xs[m].to(dev);
          } else {
            in = received(fwd[static_cast<size_t>(k) - 1].recv(op.micro_batch));
            s0 = now_ms();
            if (in.is_floating_point()) in.requires_grad_(true);
          }
          Tensor out;
          {
            memory::TagScope tag(memory::Tag::activation);
            // checkpoint keeps only `in` (and the RNG state) until this
            // micro-batch's backward, which recomputes the stage's layers.
            if (opts_.checkpoint_stages) {
              autograd::CheckpointOptions co;
              co.name = str("pipeline stage ", k);
              out = autograd::checkpoint(
                  [&](const std::vector<Tensor>& h) { return std::vector<Tensor>{run_layers(h[0])}; }, {in}, co)[0];
            } else
              out = run_layers(in);
            if (last) {
              Tensor tgt = ys[m].device() == dev ? ys[m] : ys[m].to(dev);
              const double w = static_cast<double>(ys[m].size(0)) / rows;
              out = stack_.loss(out, tgt) * w;
            }
          }
          if (last)
            losses[m] = out.item();
          else
            fwd[static_cast<size_t>(k)].send(op.micro_batch, handing_off(out.detach().to(placement_.devices[k + 1])));
          inputs[m] = in;
          outputs[m] = out;
        } else {
          if (last) {
            s0 = now_ms();
            autograd::backward({outputs[m]});
          } else {
            Tensor g = received(bwd[static_cast<size_t>(k)].recv(op.micro_batch));
            s0 = now_ms();
            autograd::backward({outputs[m]}, {g});
          }
          if (!first) {
            Tensor gin = inputs[m].grad();
            SNUG_CHECK(gin.defined(), AutogradError, "pipeline: stage ", k, " produced no gradient for its input");
            bwd[static_cast<size_t>(k) - 1].send(op.micro_batch, handing_off(gin.to(placement_.devices[k - 1])));
          }
          inputs[m] = Tensor();
          outputs[m] = Tensor();
        }
        if (opts_.record_timeline) {
          std::lock_guard<std::mutex> lk(tl_mu);
          timeline_.push_back(
              {static_cast<int>(k), static_cast<int>(op.micro_batch), op.backward, s0 - t0, now_ms() - t0});
        }
      }
    } catch (...) {
      fail(std::current_exception());
    }
  };

  set_num_threads(opts_.threads_per_stage);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) threads.emplace_back(run_stage, k);
  for (auto& t : threads) t.join();
  last_step_ms_ = now_ms() - t0;
  set_num_threads(prev_threads);
  if (first_error) std::rethrow_exception(first_error);
  double total = 0;
  for (double l : losses) total += l;
  return total;
}

double Pipeline::idle_fraction() const {
  if (timeline_.empty() || last_step_ms_ <= 0) return 0;
  double busy = 0;
  for (const auto& e : timeline_) busy += e.end_ms - e.start_ms;
  return 1.0 - busy / (static_cast<double>(placement_.num_stages()) * last_step_ms_);
}

void Pipeline::write_timeline(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    SNUG_CHECK(f.good(), IOError, "Pipeline::write_timeline: cannot open ", tmp);
    f << "{\"traceEvents\": [\n";
    for (size_t i = 0; i < timeline_.size(); ++i) {
      const auto& e = timeline_[i];
      char line[256];
      std::snprintf(line, sizeof line,
                    "%s{\"name\": \"%c%d\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.1f, "
                    "\"dur\": %.1f}",
                    i ? ",\n" : "", e.backward ? 'B' : 'F', e.micro_batch, e.backward ? "backward" : "forward", e.stage,
                    e.start_ms * 1e3, (e.end_ms - e.start_ms) * 1e3);
      f << line;
    }
    f << "\n]}\n";
    SNUG_CHECK(f.good(), IOError, "Pipeline::write_timeline: writing ", tmp, " failed");
  }
  SNUG_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, IOError, "Pipeline::write_timeline: cannot rename ", tmp,
             " to ", path);
}

}  // namespace snug::parallel

// SPDX-License-Identifier: MIT
#include <snug/nn/train_loop.h>

#include <algorithm>
#include <chrono>

#include <snug/base/error.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/accumulate.h>

namespace snug::nn {

double TrainSummary::median_ms() const {
  if (step_ms.empty()) return 0;
  std::vector<double> v = step_ms;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TrainLoop::TrainLoop(TrainLoopOptions opt) : opt_(opt) {
  SNUG_CHECK(opt.steps >= 0 && opt.start >= 0, ValueError, "TrainLoop: steps and start must be >= 0, got steps ",
             opt.steps, " start ", opt.start);
}

TrainLoop& TrainLoop::before_step(std::function<void(int64_t)> fn) {
  before_ = std::move(fn);
  return *this;
}

TrainLoop& TrainLoop::step(StepFn fn) {
  step_ = std::move(fn);
  return *this;
}

TrainLoop& TrainLoop::after_step(std::function<void(StepInfo&)> fn) {
  after_.push_back(std::move(fn));
  return *this;
}

TrainLoop& TrainLoop::every(int64_t n, Hook hook, bool and_last) {
  SNUG_CHECK(n >= 0, ValueError, "TrainLoop::every: n must be >= 0, got ", n);
  periodic_.push_back({n, and_last, std::move(hook)});
  return *this;
}

TrainLoop& TrainLoop::evaluate(int64_t n, std::function<double(const StepInfo&)> eval) {
  // An every() hook that stores its value where the later hooks and run() see it.
  return every(n, [this, eval = std::move(eval)](const StepInfo& info) { eval_ = eval(info); });
}

bool TrainLoop::due(int64_t n, bool and_last, const StepInfo& info) {
  return (n > 0 && info.step % n == 0) || (and_last && info.last);
}

TrainSummary TrainLoop::run() {
  SNUG_CHECK(static_cast<bool>(step_), ValueError, "TrainLoop::run: no step function (call step(fn) first)");
  TrainSummary sum;
  eval_ = NAN;
  const int64_t end = opt_.stop > 0 ? std::min(opt_.stop, opt_.steps) : opt_.steps;
  for (int64_t s = opt_.start; s < end; ++s) {
    if (before_) before_(s);
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = step_(s);
    const auto t1 = std::chrono::steady_clock::now();
    StepInfo info{.step = s + 1,
                  .total = opt_.steps,
                  .loss = loss,
                  .ms = std::chrono::duration<double, std::milli>(t1 - t0).count(),
                  .eval = eval_,
                  .last = s + 1 == end};
    sum.step_ms.push_back(info.ms);
    for (auto& fn : after_) fn(info);
    for (auto& p : periodic_)
      if (due(p.n, p.and_last, info)) {
        p.hook(info);
        info.eval = eval_;  // an evaluate() hook may have just run
      }
    sum.loss = info.loss;
    ++sum.steps_run;
  }
  sum.eval = eval_;
  return sum;
}

double accumulate_gradients(const Tensor& x, const Tensor& y, int64_t k,
                            const std::function<Tensor(const MicroBatch&)>& loss_of,
                            const std::function<Tensor(const Tensor&)>& scale, int64_t ignore_index) {
  // Token-weighted: each micro-batch's mean loss counts by its share of the
  // batch's targets (nn/accumulate.h says why not 1/k).
  GradAccumulator acc(static_cast<double>(count_tokens(y, ignore_index)));
  std::vector<Tensor> xs = split_batch(x, k), ys = split_batch(y, k);
  for (int64_t i = 0; i < k; ++i) {
    MicroBatch mb{.index = i, .count = k, .last = i + 1 == k, .x = xs[i], .y = ys[i]};
    const Tensor loss = loss_of(mb);  // alive until its backward is done
    acc.backward(scale ? scale(loss) : loss, static_cast<double>(count_tokens(mb.y, ignore_index)));
  }
  return acc.loss();
}

std::string progress_line(int64_t step, int64_t total, double loss, double per_s, const char* unit,
                          const std::vector<Device>& devices) {
  const int width = 30;
  const int filled = static_cast<int>(width * std::clamp<int64_t>(step, 0, total) / std::max<int64_t>(total, 1));
  std::string mem;
  for (const Device& d : devices)
    mem += str(mem.empty() ? "" : ", ", devices.size() > 1 ? d.str() + " " : "",
               memory::format_bytes(memory::allocated(d)), " (peak ", memory::format_bytes(memory::peak_allocated(d)),
               ")");
  char line[512];
  std::snprintf(line, sizeof line, "[%.*s%.*s] step %lld/%lld  loss %.4f  %.0f %s  mem %s", filled,
                "##############################", width - filled, "..............................",
                static_cast<long long>(step), static_cast<long long>(total), loss, per_s, unit, mem.c_str());
  return line;
}

void print_progress(std::FILE* f, const std::string& line, bool tty) {
  // \r redraws the line on a terminal; the clear-to-end erases a longer old one.
  if (tty)
    std::fprintf(f, "\r%s\033[K", line.c_str());
  else
    std::fprintf(f, "%s\n", line.c_str());
}

}  // namespace snug::nn

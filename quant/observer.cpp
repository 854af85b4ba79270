// SPDX-License-Identifier: MIT
#include <snug/quant/observer.h>

#include <algorithm>
#include <cmath>

#include <snug/core/raw_ops.h>

namespace snug::quant {

QParams Observer::qparams() const {
  SNUG_CHECK(observed(), ValueError, "Observer.qparams: nothing was observed yet (run a calibration pass first)");
  std::vector<float> mins, maxs;
  range(mins, maxs);
  return choose_qparams(mins, maxs, opt.dtype, opt.symmetric, opt.axis);
}

// ---- min-max -----------------------------------------------------------------------------

template <class Combine>
void MinMaxObserver::merge(const Tensor& x, const char* who, Combine combine) {
  std::vector<float> mins, maxs;
  min_max(x, opt.axis, mins, maxs);
  if (count_ == 0) {
    min_ = mins;
    max_ = maxs;
  } else {
    SNUG_CHECK(mins.size() == min_.size(), ShapeError, who, ": ", mins.size(), " channels now, ", min_.size(),
               " before");
    for (size_t c = 0; c < mins.size(); ++c) combine(min_[c], max_[c], mins[c], maxs[c]);
  }
  ++count_;
}

void MinMaxObserver::observe(const Tensor& x) {
  merge(x, "MinMaxObserver", [](float& mn, float& mx, float new_mn, float new_mx) {
    mn = std::min(mn, new_mn);
    mx = std::max(mx, new_mx);
  });
}

void MinMaxObserver::range(std::vector<float>& mins, std::vector<float>& maxs) const {
  mins = min_;
  maxs = max_;
}

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(ObserverOptions o, double c)
    : MinMaxObserver(o), averaging_constant(c) {
  SNUG_CHECK(c > 0 && c <= 1, ValueError, "MovingAverageMinMaxObserver: averaging_constant must be in (0, 1], got ", c);
}

void MovingAverageMinMaxObserver::observe(const Tensor& x) {
  const float c = float(averaging_constant);
  merge(x, "MovingAverageMinMaxObserver", [c](float& mn, float& mx, float new_mn, float new_mx) {
    mn += c * (new_mn - mn);
    mx += c * (new_mx - mx);
  });
}

// ---- percentile --------------------------------------------------------------------------

PercentileObserver::PercentileObserver(ObserverOptions o, double p, int64_t bins)
    : Observer(o), percentile(p), hist_(size_t(std::max<int64_t>(bins, 1)), 0.0) {
  SNUG_CHECK(o.axis < 0, ValueError, "PercentileObserver: per-tensor only (axis must be -1, got ", o.axis, ")");
  SNUG_CHECK(p > 50 && p <= 100, ValueError, "PercentileObserver: percentile must be in (50, 100], got ", p);
  SNUG_CHECK(bins >= 16, ValueError, "PercentileObserver: need at least 16 bins, got ", bins);
}

void PercentileObserver::observe(const Tensor& x) {
  std::vector<float> mins, maxs;
  min_max(x, -1, mins, maxs);
  const int64_t B = int64_t(hist_.size());
  float lo = count_ ? std::min(lo_, mins[0]) : mins[0], hi = count_ ? std::max(hi_, maxs[0]) : maxs[0];
  if (hi <= lo) hi = lo + 1e-8f;
  if (count_ && (lo < lo_ || hi > hi_)) {
    // The range grew: move the old counts to the new bins by their centres.
    std::vector<double> moved(hist_.size(), 0.0);
    const double w_old = double(hi_ - lo_) / double(B), w_new = double(hi - lo) / double(B);
    for (int64_t b = 0; b < B; ++b) {
      if (hist_[size_t(b)] == 0) continue;
      const double centre = lo_ + (double(b) + 0.5) * w_old;
      moved[size_t(std::clamp<int64_t>(int64_t((centre - lo) / w_new), 0, B - 1))] += hist_[size_t(b)];
    }
    hist_ = std::move(moved);
  }
  lo_ = lo;
  hi_ = hi;
  Tensor xc = raw::contiguous(raw::to_dtype(x, DType::f32));
  const float* p = xc.data<float>();
  const double w = double(hi_ - lo_) / double(B);
  for (int64_t i = 0; i < x.numel(); ++i)
    hist_[size_t(std::clamp<int64_t>(int64_t((double(p[i]) - lo_) / w), 0, B - 1))] += 1;
  ++count_;
}

void PercentileObserver::range(std::vector<float>& mins, std::vector<float>& maxs) const {
  double total = 0;
  for (double h : hist_) total += h;
  const double tail = total * (100.0 - percentile) / 100.0;
  const int64_t B = int64_t(hist_.size());
  const double w = double(hi_ - lo_) / double(B);
  int64_t a = 0, b = B - 1;
  for (double acc = 0; a < B - 1 && acc + hist_[size_t(a)] <= tail; ++a) acc += hist_[size_t(a)];
  for (double acc = 0; b > 0 && acc + hist_[size_t(b)] <= tail; --b) acc += hist_[size_t(b)];
  mins = {a == 0 ? lo_ : float(lo_ + double(a) * w)};
  maxs = {b == B - 1 ? hi_ : float(lo_ + double(b + 1) * w)};
  if (maxs[0] < mins[0]) maxs[0] = mins[0];
}

std::unique_ptr<Observer> make_observer(const std::string& kind, ObserverOptions o) {
  if (kind == "minmax") return std::make_unique<MinMaxObserver>(o);
  if (kind == "moving_average") return std::make_unique<MovingAverageMinMaxObserver>(o);
  if (kind == "percentile") return std::make_unique<PercentileObserver>(o);
  throw ValueError(
      str("make_observer: unknown observer \"", kind, "\" (expected minmax, moving_average or percentile)"));
}

}  // namespace snug::quant

// SPDX-License-Identifier: MIT
// Observers watch tensors (activations during calibration or QAT, weights at
// conversion) and turn what they saw into QParams.
//
//   MinMaxObserver               the running min and max (per tensor or per channel)
//   MovingAverageMinMaxObserver  min/max averaged over batches: m = m + c (batch_min - m)
//   PercentileObserver           a histogram; the range between the p-th percentiles
//                                at both ends, so rare outliers do not stretch the scale
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <snug/quant/qparams.h>

namespace snug::quant {

struct ObserverOptions {
  DType dtype = DType::u8;  // u8 for activations, i8 for weights
  bool symmetric = false;
  int64_t axis = -1;  // per channel along axis (MinMax and MovingAverage only)
};

class Observer {
 public:
  explicit Observer(ObserverOptions o) : opt(o) {}
  virtual ~Observer() = default;
  virtual void observe(const Tensor& x) = 0;
  virtual QParams qparams() const;  // from range(); throws if nothing was observed
  // The range quantization should cover (per channel when axis >= 0).
  virtual void range(std::vector<float>& mins, std::vector<float>& maxs) const = 0;
  bool observed() const { return count_ > 0; }
  ObserverOptions opt;

 protected:
  int64_t count_ = 0;  // batches seen
};

class MinMaxObserver : public Observer {
 public:
  explicit MinMaxObserver(ObserverOptions o = {}) : Observer(o) {}
  void observe(const Tensor& x) override;
  void range(std::vector<float>& mins, std::vector<float>& maxs) const override;

 protected:
  // Takes x's per-channel range; the first call keeps it, later calls fold
  // it in with combine(kept_min, kept_max, new_min, new_max). `who` names
  // the observer in the channel-count error. Defined in observer.cpp.
  template <class Combine>
  void merge(const Tensor& x, const char* who, Combine combine);
  std::vector<float> min_, max_;
};

class MovingAverageMinMaxObserver : public MinMaxObserver {
 public:
  explicit MovingAverageMinMaxObserver(ObserverOptions o = {}, double averaging_constant = 0.01);
  void observe(const Tensor& x) override;
  double averaging_constant;
};

class PercentileObserver : public Observer {
 public:
  // percentile in (50, 100]; 100 is min-max. bins: histogram resolution.
  explicit PercentileObserver(ObserverOptions o = {}, double percentile = 99.99, int64_t bins = 2048);
  void observe(const Tensor& x) override;
  void range(std::vector<float>& mins, std::vector<float>& maxs) const override;
  double percentile;

 private:
  std::vector<double> hist_;
  float lo_ = 0, hi_ = 0;  // the histogram's range (grows; counts are re-binned)
};

// "minmax", "moving_average" or "percentile".
std::unique_ptr<Observer> make_observer(const std::string& kind, ObserverOptions o);

}  // namespace snug::quant

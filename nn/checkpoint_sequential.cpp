// SPDX-License-Identifier: MIT
#include <snug/nn/checkpoint_sequential.h>

#include <cmath>
#include <sstream>

namespace snug::nn {

int64_t ChainPlan::num_checkpointed() const {
  int64_t n = 0;
  for (const auto& s : segments) n += s.checkpoint ? 1 : 0;
  return n;
}

std::string ChainPlan::str() const {
  if (segments.empty()) return "(no checkpointing)";
  std::ostringstream os;
  for (size_t i = 0; i < segments.size(); ++i)
    os << (i ? " " : "") << "[" << segments[i].begin << "," << segments[i].end << ")"
       << (segments[i].checkpoint ? " ckpt" : " keep");
  return os.str();
}

void ChainPlan::validate(int64_t n) const {
  int64_t at = 0;
  for (const auto& s : segments) {
    SNUG_CHECK(s.begin == at && s.end > s.begin, ValueError, "ChainPlan: segment [", s.begin, ",", s.end,
               ") does not continue the chain at ", at, " (plan ", str(), ")");
    at = s.end;
  }
  SNUG_CHECK(segments.empty() || at == n, ValueError, "ChainPlan: the segments cover [0,", at, ") but the chain has ",
             n, " modules (plan ", str(), ")");
}

ChainPlan balanced_plan(int64_t n, int64_t k) {
  SNUG_CHECK(n > 0 && k > 0 && k <= n, ValueError, "balanced_plan: need 1 <= segments <= modules, got ", k,
             " segments for ", n, " modules");
  ChainPlan p;
  int64_t at = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t len = n / k + (i < n % k ? 1 : 0);
    p.segments.push_back({at, at + len, i + 1 < k});
    at += len;
  }
  return p;
}

ChainPlan sqrt_plan(int64_t n) {
  const auto k = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(n))));
  return balanced_plan(n, std::max<int64_t>(1, k));
}

Tensor run_chain(const std::vector<std::shared_ptr<Module>>& modules, const ChainPlan& plan, const Tensor& x) {
  const auto n = static_cast<int64_t>(modules.size());
  Tensor h = x;
  if (plan.empty()) {
    for (auto& m : modules) h = m->forward(h);
    return h;
  }
  plan.validate(n);
  for (const auto& s : plan.segments) {
    // The segment's modules by value: the function lives in the checkpoint
    // frame until backward, after this call has returned.
    std::vector<std::shared_ptr<Module>> mods(modules.begin() + s.begin, modules.begin() + s.end);
    auto run = [mods](const Tensor& in) {
      Tensor t = in;
      for (auto& m : mods) t = m->forward(t);
      return t;
    };
    if (!s.checkpoint) {
      h = run(h);
      continue;
    }
    autograd::CheckpointOptions opts = plan.options;
    opts.name = str(plan.options.name, " [", s.begin, ",", s.end, ")");
    h = autograd::checkpoint([run](const std::vector<Tensor>& in) { return std::vector<Tensor>{run(in[0])}; }, {h},
                             opts)[0];
  }
  return h;
}

Tensor checkpoint_sequential(const std::vector<std::shared_ptr<Module>>& modules, int64_t segments, const Tensor& x,
                             const autograd::CheckpointOptions& opts) {
  ChainPlan p = balanced_plan(static_cast<int64_t>(modules.size()), segments);
  p.options = opts;
  return run_chain(modules, p, x);
}

Tensor checkpoint_sequential(const Sequential& seq, int64_t segments, const Tensor& x,
                             const autograd::CheckpointOptions& opts) {
  std::vector<std::shared_ptr<Module>> mods;
  for (size_t i = 0; i < seq.size(); ++i) mods.push_back(seq[i]);
  return checkpoint_sequential(mods, segments, x, opts);
}

}  // namespace snug::nn

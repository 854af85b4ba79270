// SPDX-License-Identifier: MIT
// Checkpointing a chain of single-tensor modules (a Sequential, a GPT's blocks).
//
// A ChainPlan splits the chain into consecutive segments; a checkpointed
// segment keeps only its input and is recomputed in backward
// (autograd/checkpoint.h), the others keep their activations as usual.
// balanced_plan(n, k) is the classic sqrt scheme with k ~ sqrt(n); the
// planner (nn/planner.h) picks segments for a memory budget.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <snug/autograd/checkpoint.h>
#include <snug/nn/module.h>

namespace snug::nn {

struct ChainSegment {
  int64_t begin = 0, end = 0;  // modules [begin, end)
  bool checkpoint = false;
};

struct ChainPlan {
  std::vector<ChainSegment> segments;   // empty: run the chain plainly
  autograd::CheckpointOptions options;  // for the checkpointed segments (policy, verify)

  bool empty() const { return segments.empty(); }
  int64_t num_checkpointed() const;
  // "[0,4) ckpt [4,8) ckpt [8,16) keep", for logs.
  std::string str() const;
  // Throws ValueError unless the segments cover [0, n) in order without gaps.
  void validate(int64_t n) const;
};

// k segments whose sizes differ by at most one (the larger ones first), all
// checkpointed but the last: its activations would be recomputed right at the
// start of backward, which costs time and saves no memory at the peak.
ChainPlan balanced_plan(int64_t n, int64_t k);
// balanced_plan with k = round(sqrt(n)) (Chen et al. 2016).
ChainPlan sqrt_plan(int64_t n);

// Runs x through modules following plan (validated against modules.size()).
//   x (...) -> modules.back()'s output
Tensor run_chain(const std::vector<std::shared_ptr<Module>>& modules, const ChainPlan& plan, const Tensor& x);

// torch.utils.checkpoint.checkpoint_sequential: `segments` balanced segments.
Tensor checkpoint_sequential(const std::vector<std::shared_ptr<Module>>& modules, int64_t segments, const Tensor& x,
                             const autograd::CheckpointOptions& opts = {});
Tensor checkpoint_sequential(const Sequential& seq, int64_t segments, const Tensor& x,
                             const autograd::CheckpointOptions& opts = {});

}  // namespace snug::nn

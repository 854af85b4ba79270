// SPDX-License-Identifier: MIT
// Recomputation (activation checkpointing).
//
// checkpoint(fn, inputs) runs fn and records its graph as usual, but the
// tensors that graph saves for backward are not kept: the segment keeps only
// its inputs and the RNG state it started with. When backward first needs one
// of its saved tensors, the segment is run again from the kept inputs with the
// RNG state restored, and backward goes on with the recomputed tensors. The
// graph backward walks is the one recorded in the forward, so its nodes, their
// order and their gradient sums are exactly those of a run without
// checkpointing: on the CPU the gradients are bit for bit the same, dropout
// included (its mask is a pure function of the Philox state).
//
//   Tensor y = autograd::checkpoint([&](const Tensor& x) { return block->forward(x); }, x);
//
// - Under NoGradGuard it is a plain call.
// - Checkpoints nest: an inner segment's inputs are themselves saved tensors of
//   the outer segment, so they are recomputed with it.
// - Hooks registered inside fn fire once, on the forward's graph.
// - fn must compute the same thing when called again: depend only on its
//   inputs, on parameters and on the RNG (generators other than the default
//   one go in CheckpointOptions::generators). verify=true checks that.
// - fn is kept until backward: capture what it uses by value or shared_ptr.
// - Do not modify a segment's inputs in place after the forward (recomputation
//   would see the new values); that is an AutogradError, like for any saved tensor.
//
// Selective recomputation: a policy says, per op, whether the segment keeps
// that op's output (save) or recomputes it. Only the ops that can skip their
// own work ask the policy, by one of the names of kSelectiveOps:
//   matmul            snug::matmul
//   linear            nn::functional::linear, linear_relu, linear_gelu,
//                     relu_mlp, gelu_mlp (one name: a policy that keeps
//                     Linear outputs keeps the fused layers' too)
//   layer_norm        nn::functional::layer_norm, add_layer_norm (its sum and norm)
//   causal_softmax    nn::functional::causal_softmax
//   causal_attention  nn::functional::causal_self_attention's fused op
//   attention         nn::functional::self_attention's fused op, not causal
// Everything else, elementwise ops in particular, is always recomputed. The
// typical policy keeps matmul-like outputs and recomputes the cheap ops
// around them: save_ops({"linear", "matmul"}).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <snug/core/tensor.h>

namespace snug {
class Generator;
}

namespace snug::autograd {

enum class RecomputeChoice : uint8_t { recompute, save };
using RecomputePolicy = std::function<RecomputeChoice(const char* op)>;

// The ops that consult a policy (the others are always recomputed).
inline constexpr const char* kSelectiveOps[] = {"matmul",         "linear",           "layer_norm",
                                                 "causal_softmax", "causal_attention", "attention"};

// A policy that saves the outputs of the listed ops and recomputes the rest.
// Throws ValueError for a name that is not in kSelectiveOps (it would never be asked).
RecomputePolicy save_ops(const std::vector<std::string>& ops);

struct CheckpointOptions {
  RecomputePolicy policy;  // empty: recompute everything
  // Recomputation compares every recomputed saved tensor with the original
  // (shape, dtype and a checksum of the values, taken in the forward) and
  // throws an AutogradError naming the first that differs. Costs a pass over
  // every saved tensor in the forward; for debugging.
  bool verify = false;
  std::vector<Generator*> generators;  // besides default_generator(), also restored for recomputation
  std::string name = "checkpoint";     // shown in error messages
};

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// The general form: any number of tensor inputs and outputs.
std::vector<Tensor> checkpoint(SegmentFn fn, const std::vector<Tensor>& inputs, const CheckpointOptions& opts = {});

// checkpoint(fn, a, b, ...) with fn(const Tensor&, ...) -> Tensor.
template <class F, class... Ts>
requires(sizeof...(Ts) >= 1 && (std::is_same_v<std::decay_t<Ts>, Tensor> && ...) &&
         std::is_invocable_r_v<Tensor, F, const Ts&...>) Tensor checkpoint(F fn, const Ts&... xs) {
  SegmentFn seg = [fn](const std::vector<Tensor>& in) {
    return [&]<size_t... I>(std::index_sequence<I...>) { return std::vector<Tensor>{fn(in[I]...)}; }
    (std::index_sequence_for<Ts...>{});
  };
  return checkpoint(std::move(seg), std::vector<Tensor>{xs...})[0];
}

// Time spent recomputing segments (in backward) since the last reset, all
// threads. Nested recomputations count once.
struct RecomputeStats {
  int64_t segments = 0;
  double ms = 0;
};
RecomputeStats recompute_stats();
void reset_recompute_stats();

namespace detail {
// 0: compute as usual; 1: `hit` holds the outputs kept by the forward, use
// them; 2: compute, then hand the outputs to selective_store.
int selective_begin(const char* op, std::vector<Tensor>& hit);
void selective_store(const char* op, const std::vector<Tensor>& outs);
}  // namespace detail

// How an op in kSelectiveOps computes its outputs: compute() normally; inside
// a checkpointed segment whose policy saves `op`, the forward keeps the
// outputs and the recomputation returns them instead of computing them again.
// compute() returns every tensor the op goes on to use (layer_norm: y, mean, rstd).
template <class F>
std::vector<Tensor> keep_or_compute(const char* op, F&& compute) {
  std::vector<Tensor> hit;
  const int action = detail::selective_begin(op, hit);
  if (action == 1) return hit;
  std::vector<Tensor> outs = compute();
  if (action == 2) detail::selective_store(op, outs);
  return outs;
}

}  // namespace snug::autograd

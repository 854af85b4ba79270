// SPDX-License-Identifier: MIT
// The tape: nodes, edges, saved tensors and the per-tensor autograd state.
//
// A Node is the backward of one recorded op. Its `next` edges point at the
// nodes that produced its inputs (AccumulateGrad for leaves), so the graph
// can be walked from a loss back to the parameters. Nodes carry a sequence
// number from a global counter: a node is always created after the nodes of
// its inputs, so running nodes by decreasing sequence number ("reverse tape
// order") runs every consumer before its producers.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <snug/core/tensor.h>

namespace snug {

struct Node;

struct Edge {
  std::shared_ptr<Node> fn;  // null: that input does not need a gradient
  int output_nr = 0;         // which output of fn this edge feeds
};

// Hook on a gradient; returns a replacement or an undefined tensor (keep).
using GradHook = std::function<Tensor(const Tensor&)>;

// NOTE [ Saved tensors are detached ]
// A node keeps its saved tensors as detached aliases (same storage, no
// grad_fn), which breaks the cycle output -> grad_fn -> saved output, and
// records the storage version at save time. unpack() compares versions, so
// an in-place change to a saved tensor is an error naming the op.
//
// Inside a checkpointed segment (autograd/checkpoint.h) a SavedTensor keeps
// no data: it holds its segment's frame and a slot number, and unpack() asks
// the frame, which recomputes the segment the first time (NOTE [ Checkpoint
// frames ] in autograd/checkpoint.cpp).
namespace autograd::detail {
struct CheckpointFrame;
// Implemented in autograd/checkpoint.cpp. pack_saved returns false outside
// checkpointed segments (the SavedTensor keeps t itself); inside one it
// returns true and sets frame/slot, or leaves frame null when the tensor is
// not needed at all (saved while recomputing: that graph is thrown away).
bool pack_saved(const Tensor& t, const char* op, std::shared_ptr<CheckpointFrame>& frame, size_t& slot);
Tensor unpack_saved(CheckpointFrame& frame, size_t slot, const char* op);
void release_saved(CheckpointFrame& frame, size_t slot);
}  // namespace autograd::detail

class SavedTensor {
 public:
  SavedTensor() = default;
  // op: the op that saves t (for checkpoint policies and messages).
  explicit SavedTensor(const Tensor& t, const char* op = "?");
  SavedTensor(SavedTensor&&) noexcept = default;
  SavedTensor& operator=(SavedTensor&&) noexcept = default;
  SavedTensor(const SavedTensor&) = delete;
  SavedTensor& operator=(const SavedTensor&) = delete;
  ~SavedTensor();
  Tensor unpack(const char* op_name) const;  // throws AutogradError if modified or released
  void release();
  bool defined() const { return data_.defined() || frame_ != nullptr; }

 private:
  Tensor data_;
  uint32_t version_ = 0;
  bool released_ = false;
  std::shared_ptr<autograd::detail::CheckpointFrame> frame_;  // set: data lives in the frame's slot_
  size_t slot_ = 0;
  bool discarded_ = false;  // recorded during a recomputation: keeps nothing
};

struct Node : std::enable_shared_from_this<Node> {
  Node();
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  // grads: one per output of the forward op (undefined = zero); returns one
  // gradient per input edge (undefined = no gradient for that input).
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grads) = 0;
  // Frees what backward needed; called right after the node runs unless the
  // graph is retained (NOTE [ Saved tensors die early ] in engine.cpp).
  virtual void release_saved() {}

  uint64_t seq;            // tape position
  std::vector<Edge> next;  // one per forward input
  int num_outputs = 1;
  std::vector<Shape> output_shapes;  // to materialize zero grads for unused outputs
  std::vector<DType> output_dtypes;
  std::vector<Device> output_devices;
  // pre_hooks[output_nr] run on the gradient of that output before apply().
  std::vector<std::vector<GradHook>> pre_hooks;
};

// A node whose backward is a closure; how every op in autograd/ records.
struct FunctionNode : Node {
  using BackwardFn = std::function<std::vector<Tensor>(FunctionNode& self, const std::vector<Tensor>& grads)>;
  const char* op_name = "?";
  std::vector<SavedTensor> saved;
  BackwardFn backward;
  bool released = false;

  const char* name() const override { return op_name; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override;
  void release_saved() override;
  Tensor saved_at(size_t i) const;  // unpacked saved tensor i (version-checked)
  bool needs_grad(size_t input) const { return input < next.size() && next[input].fn != nullptr; }
};

// Runs after a backward has added into a leaf's .grad; gets the leaf (its
// .grad holds the sum so far). DataParallel starts its all-reduce here.
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;

// Accumulates into a leaf's .grad; the end of every path.
struct AccumulateGrad : Node {
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  const char* name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override;
  std::weak_ptr<TensorImpl> leaf;
  // Run in registration order once per backward that reaches the leaf (the
  // engine sums every path into one gradient first), outside the leaf's lock.
  std::vector<std::pair<uint64_t, PostAccumulateHook>> post_hooks;
};

// Per-tensor autograd state (TensorImpl::autograd).
struct AutogradMeta {
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  int output_nr = 0;
  std::shared_ptr<Node> grad_accumulator;  // leaves: their AccumulateGrad (it holds the leaf weakly: no cycle)
  bool retains_grad = false;
  std::string name;
};

namespace autograd {

AutogradMeta& meta(const Tensor& t);  // creates it if missing
// The edge a gradient for t should flow into: its grad_fn, or its
// AccumulateGrad if it is a leaf requiring grad, or none.
Edge edge_of(const Tensor& t);

// True when nothing but `handles` Tensor handles can see the gradient g (the
// engine's input vector, plus the caller's own copies): a storage of its own,
// dense and exactly its size, outside any graph. Such a gradient may be kept
// or overwritten instead of copied (AccumulateGrad, the backward of
// linear_relu / linear_gelu). A hook that kept it, another edge's pending
// buffer, a retained graph's saved copy or the caller's seed each add a
// reference.
bool gradient_unshared(const Tensor& g, long handles);

// True when grad mode is on and any of ts requires grad.
// A hook run right after backward accumulates into leaf's .grad (PyTorch's
// register_post_accumulate_grad_hook). leaf must be a leaf that requires grad.
// Returns a handle for remove_post_accumulate_grad_hook. Not run by
// autograd::grad, which leaves .grad alone.
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook);
// Removes it; an unknown handle is ignored (the hook may be gone with its leaf).
void remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t handle);

bool any_requires_grad(std::initializer_list<Tensor> ts);
bool any_requires_grad(const std::vector<Tensor>& ts);

// Records op `name` with inputs, outputs, tensors to save and the backward
// closure. Marks the outputs as requiring grad with the new node as grad_fn.
// Call only when any_requires_grad(inputs) holds. Returns the node.
std::shared_ptr<FunctionNode> record(const char* name, const std::vector<Tensor>& inputs,
                                     const std::vector<Tensor>& outputs, std::vector<Tensor> to_save,
                                     FunctionNode::BackwardFn backward);

}  // namespace autograd
}  // namespace snug

// SPDX-License-Identifier: MIT
// Recording: nodes, saved tensors, per-tensor autograd state.
#include <snug/autograd/node.h>

#include <cstdint>
#include <mutex>

#include <cmath>

#include <snug/autograd/fault_injection.h>
#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug {

namespace {
std::atomic<uint64_t> g_next_seq{0};

Tensor detached_alias(const Tensor& t) { return raw::as_strided(t, t.shape(), t.strides(), t.offset()); }
}  // namespace

Node::Node() : seq(g_next_seq.fetch_add(1, std::memory_order_relaxed)) {}

SavedTensor::SavedTensor(const Tensor& t, const char* op) {
  if (!t.defined()) return;
  if (autograd::detail::pack_saved(t, op, frame_, slot_)) {
    discarded_ = frame_ == nullptr;
    return;
  }
  data_ = detached_alias(t);
  version_ = t.version();
}

SavedTensor::~SavedTensor() { release(); }

void SavedTensor::release() {
  if (frame_ && !released_) autograd::detail::release_saved(*frame_, slot_);
  frame_.reset();
  data_ = Tensor();
  released_ = true;
}

Tensor SavedTensor::unpack(const char* op) const {
  SNUG_CHECK(!released_, AutogradError, "backward of '", op,
             "': its saved tensors were already freed by an earlier backward; "
             "pass retain_graph=true to the first backward to run it again");
  SNUG_CHECK(!discarded_, AutogradError, "backward of '", op,
             "': this node was recorded while a checkpointed segment was recomputed, and such nodes keep "
             "nothing (only the original forward's graph can run backward)");
  // The version check does not apply here: the frame recomputes the tensor
  // from the segment's inputs, whose versions it checks itself.
  if (frame_) return autograd::detail::unpack_saved(*frame_, slot_, op);
  if (!data_.defined()) return data_;
  SNUG_CHECK(data_.version() == version_, AutogradError, "backward of '", op, "': a tensor it saved (shape ",
             shape_str(data_.shape()),
             ") was modified by an in-place operation "
             "after the forward (version ",
             version_, ", now ", data_.version(), "); clone it before modifying, or modify it out of place");
  return data_;
}

std::vector<Tensor> FunctionNode::apply(const std::vector<Tensor>& grads) {
  SNUG_CHECK(!released, AutogradError, "backward of '", op_name,
             "': its saved tensors were already freed by an earlier backward; "
             "pass retain_graph=true to the first backward to run it again");
  return backward(*this, grads);
}

void FunctionNode::release_saved() {
  // A node that saved nothing can run again (as in PyTorch): the autocast
  // cache hands the same cast of a weight, and so the same to_dtype node, to
  // every micro-batch of a step, each with its own backward.
  if (saved.empty()) return;
  for (auto& s : saved) s.release();
  saved.clear();
  released = true;
}

Tensor FunctionNode::saved_at(size_t i) const {
  SNUG_CHECK(!released, AutogradError, "backward of '", op_name,
             "': its saved tensors were already freed by an earlier backward; "
             "pass retain_graph=true to the first backward to run it again");
  return saved.at(i).unpack(op_name);
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& l) : leaf(l) {}

namespace {
// Leaf accumulation may run on several threads at once when one weight is used
// by pipeline stages on different threads (parallel/pipeline.h); a small set
// of locks, picked by the leaf's address, keeps each .grad update whole.
std::mutex& leaf_lock(const void* p) {
  static std::mutex locks[16];
  return locks[(reinterpret_cast<std::uintptr_t>(p) >> 6) % 16];
}
}  // namespace

std::vector<Tensor> AccumulateGrad::apply(const std::vector<Tensor>& grads) {
  auto impl = leaf.lock();
  if (!impl || !grads[0].defined()) return {};
  Tensor t(impl);
  {
    std::lock_guard<std::mutex> guard(leaf_lock(impl.get()));
    AutogradMeta& m = autograd::meta(t);
    memory::TagScope tag(memory::Tag::gradient);
    Tensor g = grads[0];
    if (g.shape() != t.shape()) g = raw::sum_to(g, t.shape());
    if (g.dtype() != t.dtype()) g = raw::to_dtype(g, t.dtype());
    if (!m.grad.defined()) {
      // Keep the incoming buffer when nothing else can see it (as PyTorch
      // does), else copy it: the gradient may alias another tensor. Held by the
      // engine's input vector and `g` here. Skipping the copy saves a pass
      // over every parameter's gradient each step.
      m.grad = autograd::gradient_unshared(g, 2) ? g : raw::clone(g);
    } else {
      raw::copy_(m.grad, raw::binary(BinaryOp::add, m.grad, g));
      m.grad.bump_version();
    }
  }
  // A copy: a hook may remove itself (or others) while running.
  auto hooks = post_hooks;
  for (auto& [id, hook] : hooks) hook(t);
  return {};
}

namespace autograd {

bool gradient_unshared(const Tensor& g, long handles) {
  return g.impl_ptr().use_count() <= handles && g.storage().use_count() == 1 && g.is_contiguous() &&
         g.impl()->offset == 0 && g.storage()->nbytes() == g.nbytes() && !g.requires_grad();
}

AutogradMeta& meta(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
  return *impl->autograd;
}

Edge edge_of(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& m = meta(t);
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  auto acc = m.grad_accumulator;
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->output_shapes = {t.shape()};
    acc->output_dtypes = {t.dtype()};
    acc->output_devices = {t.device()};
    acc->pre_hooks.resize(1);
    m.grad_accumulator = acc;
  }
  return {acc, 0};
}

uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook) {
  SNUG_CHECK(leaf.defined() && leaf.requires_grad() && leaf.is_leaf(), AutogradError,
             "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad");
  static std::atomic<uint64_t> next_id{1};
  auto* acc = static_cast<AccumulateGrad*>(edge_of(leaf).fn.get());
  const uint64_t id = next_id++;
  acc->post_hooks.emplace_back(id, std::move(hook));
  return id;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t handle) {
  if (!leaf.defined() || !leaf.impl()->autograd) return;
  auto* acc = dynamic_cast<AccumulateGrad*>(leaf.impl()->autograd->grad_accumulator.get());
  if (!acc) return;
  std::erase_if(acc->post_hooks, [&](const auto& h) { return h.first == handle; });
}

bool any_requires_grad(std::initializer_list<Tensor> ts) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}
bool any_requires_grad(const std::vector<Tensor>& ts) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {
bool has_nonfinite(const Tensor& t) {
  if (!t.defined() || !t.is_floating_point()) return false;
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return true;
  return false;
}
}  // namespace

std::shared_ptr<FunctionNode> record(const char* name, const std::vector<Tensor>& inputs,
                                     const std::vector<Tensor>& outputs, std::vector<Tensor> to_save,
                                     FunctionNode::BackwardFn backward) {
  // Edges first: a leaf's AccumulateGrad may be created here, and it must get
  // a smaller sequence number than this node (NOTE [ Saved tensors die early ]).
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& in : inputs) edges.push_back(edge_of(in));
  auto node = std::make_shared<FunctionNode>();
  node->op_name = name;
  node->backward = std::move(backward);
  node->next = std::move(edges);
  node->saved.reserve(to_save.size());
  for (const Tensor& s : to_save) node->saved.emplace_back(s, name);
  node->num_outputs = static_cast<int>(outputs.size());
  node->pre_hooks.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    node->output_shapes.push_back(out.shape());
    node->output_dtypes.push_back(out.dtype());
    node->output_devices.push_back(out.device());
    if (!out.is_floating_point()) continue;  // integer outputs (indices) carry no gradient
    out.impl()->requires_grad = true;
    AutogradMeta& m = meta(out);
    m.grad_fn = node;
    m.output_nr = static_cast<int>(i);
  }
  if (!injected_nan_op().empty() && injected_nan_op() == name)
    for (const Tensor& out : outputs)
      if (out.is_floating_point()) raw::fill_(out.detach(), std::nan(""));
  if (is_anomaly_enabled()) {
    bool inputs_finite = true;
    for (const Tensor& in : inputs) inputs_finite = inputs_finite && !has_nonfinite(in);
    for (size_t i = 0; i < outputs.size(); ++i)
      SNUG_CHECK(!(inputs_finite && has_nonfinite(outputs[i])), AutogradError, "anomaly: forward op '", name,
                 "' produced NaN or inf in output ", i, " (shape ", shape_str(outputs[i].shape()),
                 ") from finite inputs");
  }
  return node;
}

}  // namespace autograd
}  // namespace snug

// SPDX-License-Identifier: MIT
// The backward engine.
//
// NOTE [ Saved tensors die early ]
// Nodes run in reverse tape order (decreasing sequence number: a node is
// always created after the nodes of its inputs, so every consumer runs before
// its producer). Right after a node runs, the engine frees its saved tensors
// (unless retain_graph) and drops its gradient buffer, so activation memory
// falls steadily during backward instead of all at once at the end.
#include <snug/autograd/engine.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/node.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug::autograd {

namespace {

struct CapturePoint {
  Node* fn;
  int output_nr;
  bool operator<(const CapturePoint& o) const { return fn != o.fn ? fn < o.fn : output_nr < o.output_nr; }
};

void accumulate(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  slot = slot.defined() ? raw::binary(BinaryOp::add, slot, g) : g;
}

bool has_nonfinite(const Tensor& t) {
  if (!t.defined() || !t.is_floating_point()) return false;
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return true;
  return false;
}

thread_local bool t_release_after_node = false;  // saved_tensors_die_after_node()

// Sets t_release_after_node for one node's backward and puts the outer value
// back after, also on a throw: a closure may run a nested backward
// (checkpointing).
struct ReleaseAfterNode {
  bool outer = t_release_after_node;
  explicit ReleaseAfterNode(bool on) { t_release_after_node = on; }
  ~ReleaseAfterNode() { t_release_after_node = outer; }
};

// Runs the graph below `roots`. With captures, the gradient reaching each
// capture point is stored in captured[...] and leaves are not accumulated.
void run_engine(const std::vector<Edge>& roots, const std::vector<Tensor>& seeds, bool retain_graph,
                const std::map<CapturePoint, std::vector<size_t>>* captures, std::vector<Tensor>* captured) {
  // 1. Everything reachable from the roots.
  std::vector<Node*> nodes;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const Edge& e : roots)
    if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    nodes.push_back(n);
    for (const Edge& e : n->next)
      if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  // 2. Reverse tape order.
  std::sort(nodes.begin(), nodes.end(), [](Node* a, Node* b) { return a->seq > b->seq; });

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].fn) continue;
    auto& buf = buffers[roots[i].fn.get()];
    buf.resize(roots[i].fn->num_outputs);
    accumulate(buf[roots[i].output_nr], seeds[i]);
  }

  memory::TagScope tag(memory::Tag::gradient);
  GradModeGuard no_record(false);  // backward closures use raw ops; nothing to record
  for (Node* node : nodes) {
    auto it = buffers.find(node);
    if (it == buffers.end()) continue;  // no gradient reached it
    std::vector<Tensor> grads = std::move(it->second);
    buffers.erase(it);
    grads.resize(node->num_outputs);
    bool any = false;
    for (int k = 0; k < node->num_outputs; ++k) {
      if (grads[k].defined()) {
        for (auto& hook : node->pre_hooks[k]) {
          Tensor r = hook(grads[k]);
          if (r.defined()) grads[k] = r;
        }
      }
      if (captures) {
        auto c = captures->find({node, k});
        if (c != captures->end())
          for (size_t idx : c->second) (*captured)[idx] = grads[k];
      }
      any = any || grads[k].defined();
    }
    if (!any) continue;
    bool is_leaf_acc = dynamic_cast<AccumulateGrad*>(node) != nullptr;
    if (is_leaf_acc && captures) continue;  // autograd::grad leaves .grad alone
    // Outputs that got no gradient are zero for the node's math.
    // A gradient that arrives in another floating dtype than its output (a
    // mixed-precision graph: an f32 and a half use of the same tensor) is
    // converted to the output's dtype, as PyTorch's engine does.
    for (int k = 0; k < node->num_outputs; ++k) {
      if (k >= static_cast<int>(node->output_shapes.size()) || !is_floating(node->output_dtypes[k])) continue;
      if (!grads[k].defined())
        grads[k] = zeros(node->output_shapes[k], TensorOptions(node->output_dtypes[k], node->output_devices[k]));
      else if (grads[k].is_floating_point() && grads[k].dtype() != node->output_dtypes[k])
        grads[k] = raw::to_dtype(grads[k], node->output_dtypes[k]);
    }
    std::vector<Tensor> outs;
    {
      memory::OpScope op(node->name());
      profiler::RecordRange range("backward:", node->name());
      ReleaseAfterNode release(!retain_graph);
      outs = node->apply(grads);
    }
    if (!retain_graph) node->release_saved();
    if (is_anomaly_enabled()) {
      for (size_t i = 0; i < outs.size(); ++i)
        SNUG_CHECK(!has_nonfinite(outs[i]), AutogradError, "anomaly: backward of forward op '", node->name(),
                   "' produced NaN or inf in the gradient of its input ", i, " (shape ", shape_str(outs[i].shape()),
                   ")");
    }
    for (size_t i = 0; i < node->next.size() && i < outs.size(); ++i) {
      const Edge& e = node->next[i];
      if (!e.fn || !outs[i].defined()) continue;
      auto& buf = buffers[e.fn.get()];
      buf.resize(e.fn->num_outputs);
      accumulate(buf[e.output_nr], outs[i]);
    }
  }
}

std::vector<Tensor> make_seeds(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots) {
  SNUG_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), ValueError, "backward: got ", grad_roots.size(),
             " gradients for ", roots.size(), " outputs");
  std::vector<Tensor> seeds(roots.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    SNUG_CHECK(r.requires_grad(), AutogradError, "backward: output ", i,
               " does not require grad and has no grad_fn (did you run the forward under NoGradGuard, "
               "or forget requires_grad_() on the inputs?)");
    if (i < grad_roots.size() && grad_roots[i].defined()) {
      SNUG_CHECK(grad_roots[i].shape() == r.shape(), ShapeError, "backward: gradient of shape ",
                 shape_str(grad_roots[i].shape()), " does not match output shape ", shape_str(r.shape()));
      seeds[i] = grad_roots[i];
    } else {
      SNUG_CHECK(r.numel() == 1, AutogradError,
                 "backward: an implicit gradient can only be created for a "
                 "one-element output, got shape ",
                 shape_str(r.shape()), "; pass a gradient tensor");
      seeds[i] = ones(r.shape(), r.options());
    }
  }
  return seeds;
}

}  // namespace

bool saved_tensors_die_after_node() { return t_release_after_node; }

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph) {
  std::vector<Tensor> seeds = make_seeds(roots, grad_roots);
  std::vector<Edge> edges;
  for (const Tensor& r : roots) edges.push_back(edge_of(r));
  run_engine(edges, seeds, retain_graph, nullptr, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool allow_unused) {
  std::vector<Tensor> seeds = make_seeds(outputs, grad_outputs);
  std::map<CapturePoint, std::vector<size_t>> captures;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SNUG_CHECK(inputs[i].requires_grad(), AutogradError, "grad: input ", i, " does not require grad");
    Edge e = edge_of(inputs[i]);
    captures[{e.fn.get(), e.output_nr}].push_back(i);
  }
  std::vector<Edge> edges;
  for (const Tensor& r : outputs) edges.push_back(edge_of(r));
  std::vector<Tensor> result(inputs.size());
  run_engine(edges, seeds, retain_graph, &captures, &result);
  for (size_t i = 0; i < result.size(); ++i)
    SNUG_CHECK(allow_unused || result[i].defined(), AutogradError, "grad: input ", i,
               " is not reachable from the outputs (pass allow_unused=true to get an undefined gradient)");
  return result;
}

}  // namespace snug::autograd

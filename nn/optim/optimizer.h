// SPDX-License-Identifier: MIT
// Optimizers: SGD (momentum, Nesterov, weight decay), Adam, AdamW, with
// parameter groups and state_dict; LR schedulers; clip_grad_norm_.
//
// Updates run under NoGradGuard and write parameters in place, so the
// Tensor handles held by modules stay valid. Optimizer state tensors are
// allocated under memory::Tag::optimizer_state.
//
// Parameters stored in f16 or bf16 get f32 master weights (state "master",
// memory::Tag::master_weights) and f32 state: the update runs on the master
// and the parameter receives it rounded (NOTE [ Master weights ]).
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <snug/core/tensor.h>
#include <snug/nn/module.h>

namespace snug::nn::optim {

// NOTE [ Parameter group options ]
// A group sets only the options it wants to differ from the optimizer's; an
// unset lr / weight_decay and a missing options key take the value the
// optimizer was constructed with (its `defaults`), as PyTorch's param_groups
// do. The optimizer resolves a group when it is added (constructor or
// add_param_group): from then on param_groups() holds every option of every
// group, so `param_groups()[i].lr` reads the lr that group trains at and
// schedulers scale that value. An options key the optimizer does not know is
// a ValueError (a typo would otherwise be ignored silently).
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr = std::nullopt;            // unset: the optimizer's lr
  std::optional<double> weight_decay = std::nullopt;  // unset: the optimizer's weight_decay
  // Other hyper-parameters by name ("momentum", "beta1", ...; nesterov as 0/1).
  std::map<std::string, double> options = {};
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  virtual std::string name() const = 0;
  void zero_grad(bool set_to_none = true);
  void add_param_group(ParamGroup g);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  void set_lr(double lr);  // every group
  double lr() const { return groups_.empty() ? 0 : hyper(groups_[0], "lr"); }
  int64_t step_count() const { return step_count_; }

  // State: "state.<group>.<param>.<name>" tensors plus every group's
  // hyper-parameters as one-element f64 tensors ("group.<g>.lr",
  // "group.<g>.weight_decay", "group.<g>.opt.<name>") and "step".
  NamedTensors state_dict() const;
  // Strict: the layout must match (same groups and parameter shapes). The
  // groups take the saved hyper-parameters; an option the state lacks (files
  // written before every option was saved) keeps its current value.
  void load_state_dict(const NamedTensors& state);

  // Bytes held by the optimizer's per-parameter state (what the
  // optimizer_state tag counts for this optimizer).
  std::size_t state_bytes() const;
  // What state_bytes() will be once every parameter that requires grad has
  // taken a step (16-bit parameters' f32 masters included), known before the
  // first one: the memory planner budgets with it (nn/planner.h).
  std::size_t expected_state_bytes() const;

  // Step hooks: run after every step() (PyTorch's register_step_post_hook).
  // Pruning uses the global one (register_optimizer_step_post_hook) to re-mask
  // weights after every step of every optimizer.
  using StepHook = std::function<void(Optimizer&)>;
  void register_step_post_hook(StepHook hook) { post_hooks_.push_back(std::move(hook)); }

  // Compaction (prune/compact.h): `param` has just been shrunk to
  // index_select(old, dim, index); shrink its state the same way. The base
  // version selects every state tensor shaped like the old parameter.
  virtual void select_param_state(const Tensor& param, int64_t dim, const Tensor& index, const Shape& old_shape);

 protected:
  // The shape a state tensor `name` of parameter p must have on load.
  virtual Shape state_shape(const Tensor& p, const std::string& name) const { return p.shape(); }
  // The bytes of the state a step creates for parameter p of `group`, its
  // master weights left out (expected_state_bytes adds them). An optimizer
  // that keeps per-parameter state overrides it; the default says none.
  virtual std::size_t expected_param_state_bytes(size_t group, const Tensor& p) const { return 0; }
  // Every step() ends with this: instance hooks, then the global ones.
  void run_step_post_hooks();
  // NOTE [ Parameter group options ]: a subclass's constructor sets
  // group_defaults_ (lr, weight_decay and one options entry per other
  // hyper-parameter) and checks it with check_group before adding groups.
  ParamGroup group_defaults_;
  // Throws ValueError (naming `where`) for a hyper-parameter out of range.
  virtual void check_group(const ParamGroup& g, const std::string& where) const;
  // A resolved group's hyper-parameter: "lr", "weight_decay" or an options key.
  double hyper(const ParamGroup& g, const std::string& key) const;
  // Per-parameter state, created on first use, indexed [group][param].
  Tensor& state(size_t group, size_t param, const std::string& name, const Tensor& like);
  // NOTE [ Master weights ] (optimizer.cpp): the tensor an update is applied
  // to (the f32 master of an f16/bf16 parameter, else the parameter itself),
  // the parameter's gradient in that tensor's dtype, and the write-back of
  // the updated master into the parameter (a no-op for f32 parameters).
  Tensor master(size_t group, size_t param, const Tensor& p);
  Tensor grad_as(const Tensor& param, const Tensor& target) const;
  void write_back(const Tensor& param, const Tensor& target);
  // Creates, for every parameter with a gradient, the state tensors in
  // `names` (zeros, f32 like its update target) and its f32 master if it is
  // half, all or none (NOTE [ Failure-atomic optimizer steps ]).
  void stage_state(const std::vector<std::string>& names);
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<std::map<std::string, Tensor>>> state_;
  int64_t step_count_ = 0;

 private:
  std::vector<StepHook> post_hooks_;
};

// A hook run after every step() of every optimizer; returns an id for removal.
int64_t register_optimizer_step_post_hook(Optimizer::StepHook hook);
void remove_optimizer_step_post_hook(int64_t id);

// Defaults are PyTorch's (torch.optim.SGD, lr = 1e-3 since PyTorch 2.2); docs/nn.md has the table.
struct SGDOptions {
  double lr = 1e-3, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};
// v = momentum v + (1 - dampening) g;  step = nesterov ? g + momentum v : v;  p -= lr step
// (weight decay adds wd * p to g first; the first step sets v = g, as PyTorch does).
// Group options: "momentum", "dampening", "nesterov" (0 or 1).
class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, SGDOptions o = {});
  explicit SGD(std::vector<ParamGroup> groups, SGDOptions o = {});
  void step() override;
  std::string name() const override { return "SGD"; }
  SGDOptions defaults;

 protected:
  void check_group(const ParamGroup& g, const std::string& where) const override;
  std::size_t expected_param_state_bytes(size_t group, const Tensor& p) const override;
};

// Defaults are PyTorch's (torch.optim.Adam / torch.optim.AdamW): the two
// differ only in weight_decay, 0 for Adam and 0.01 for AdamW, hence two
// structs with the same fields in the same order.
struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};
struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};
// Adam: L2 weight decay added to the gradient. AdamW: decoupled decay
// p -= lr * wd * p before the Adam update. Bias-corrected moments.
// Group options: "beta1", "beta2", "eps".
class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions o = {});
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions o = {});
  void step() override;
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  AdamOptions defaults;  // for AdamW: its AdamWOptions, field by field

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled);
  void check_group(const ParamGroup& g, const std::string& where) const override;
  std::size_t expected_param_state_bytes(size_t group, const Tensor& p) const override;

 private:
  bool decoupled_;
};
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions o = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions o = {});
};

// ---- schedulers ---------------------------------------------------------------------
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& opt);
  virtual ~LRScheduler() = default;
  // Advances one step and sets the optimizer's lr for the next step.
  void step();
  int64_t last_step() const { return step_; }
  void set_last_step(int64_t s);                 // for resuming
  virtual double lr_at(int64_t step) const = 0;  // factor times each group's base lr

 protected:
  Optimizer& opt_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

// Linear warmup: step s < warmup uses base * (s + 1) / warmup (nanoGPT's
// convention, so step 0 already moves); then cosine from base lr down to
// base * min_factor at `total` steps, and flat after.
class WarmupCosine : public LRScheduler {
 public:
  WarmupCosine(Optimizer& opt, int64_t warmup, int64_t total, double min_factor = 0.1);
  double lr_at(int64_t step) const override;
  int64_t warmup, total;
  double min_factor;
};

// lr = base * gamma^(step / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step) const override;
  int64_t step_size;
  double gamma;
};

// Scales all gradients so their global L2 norm is at most max_norm.
// Returns the norm before clipping.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace snug::nn::optim

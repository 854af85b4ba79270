// SPDX-License-Identifier: MIT
// nn::Module: the LibTorch-style base of every layer and model.
//
// A module owns named parameters, buffers and child modules, in
// registration order. Parameters are ordinary Tensors that require grad;
// to(device)/to(dtype) convert them in place (the Tensor handles stay the
// same objects), so an optimizer built before a move still updates them.
//
// NOTE [ Replacing a child ]
// A module usually calls its children through typed members
// (`std::shared_ptr<Linear> fc;` ... `fc->forward(x)`), not through the
// registry, so swapping the registry entry alone would leave forward calling
// the old child. register_module(name, member, m) binds the member to the
// entry; replace_module(name, r) then assigns r to both, and Sequential and
// ModuleList bind their element lists the same way. A replacement must fit
// the member's type, so a layer meant to stand in for a Linear derives from
// Linear (quant/modules.h). A member filled by the two-argument
// register_module is not bound; holds() lets a caller detect such extra
// references (use_count above what the tree holds) instead of guessing.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <snug/core/tensor.h>

namespace snug::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string name = "Module") : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The single-tensor forward that Sequential chains. Layers with other
  // signatures (attention with a mask, losses) add their own overloads;
  // calling this on such a module throws a ValueError naming the module.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  const std::string& name() const { return name_; }

  // ---- registration ---------------------------------------------------------
  // Makes t a leaf that requires grad (unless requires_grad is false).
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m, {});
    return m;
  }
  // Registers m and binds `member` (a field of this module, which forward
  // calls) to it: member = m now, and replace_module(name, ...) later
  // assigns the replacement to member as well (NOTE [ Replacing a child ]).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M>& member,
                                     std::type_identity_t<std::shared_ptr<M>> m) {
    member = m;
    Slot slot;
    slot.set = [&member](const std::shared_ptr<Module>& r) {
      auto t = std::dynamic_pointer_cast<M>(r);
      if (!t) return false;
      member = std::move(t);
      return true;
    };
    slot.get = [&member]() -> const Module* { return member.get(); };
    add_child(name, std::move(m), std::move(slot));
    return member;
  }
  // Puts m in place of the child registered as `name` (same position, so
  // state_dict keeps its order), and in the member or container slot bound
  // to it. ValueError when there is no such child or when m does not fit the
  // bound member's type (nothing is changed then).
  void replace_module(const std::string& name, std::shared_ptr<Module> m);
  // How many references to `child` this module holds: one per registry entry,
  // plus one per bound member or container slot that points at it. A caller
  // compares the sum over a tree with the child's use_count to learn whether
  // anything outside the tree still calls it (quant/convert.cpp does).
  int holds(const Module& child) const;
  // Replaces a registered parameter's tensor (e.g. to tie weights).
  void replace_parameter(const std::string& name, const Tensor& t);

  // ---- traversal --------------------------------------------------------------
  // Parameters are deduplicated (a tied weight appears once, under its first name).
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(const std::string& prefix = "");
  int64_t num_parameters() const;  // elements, tied weights once

  // ---- state ----------------------------------------------------------------------
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad(bool set_to_none = true);
  void apply(const std::function<void(Module&)>& fn);  // this and every descendant, pre-order
  // Converts parameters and buffers in place (floating ones only for dtype).
  void to(Device device);
  void to(DType dtype);

  // state_dict: parameters then buffers, "child.sub.name" keys, detached
  // tensors sharing the module's storage.
  NamedTensors state_dict() const;
  // Copies values in. strict: missing, unexpected or mis-shaped keys are an
  // error listing all of them (nothing is modified then). Non-strict: loads
  // the matching keys and returns the problems as text (empty when none).
  std::string load_state_dict(const NamedTensors& state, bool strict = true);

  virtual std::string repr() const { return name_; }  // one line, e.g. "Linear(in=128, out=384, bias=true)"
  std::string pretty(int indent = 0) const;           // the tree of modules

 protected:
  // A typed member or container element bound to a child: set assigns a
  // replacement (false when it does not fit the member's type), get says
  // what the member holds now.
  struct Slot {
    std::function<bool(const std::shared_ptr<Module>&)> set;
    std::function<const Module*()> get;
  };
  void add_child(const std::string& name, std::shared_ptr<Module> m, Slot slot = {});
  static Slot element_slot(std::vector<std::shared_ptr<Module>>& list, size_t i);

 private:
  void collect(NamedTensors& out, const std::string& prefix, bool params, bool recurse) const;

  std::string name_;
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<Slot> slots_;  // slots_[i] is bound to children_[i] (empty when unbound)
};

// Chains single-tensor modules.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<Module>> mods);
  Sequential& push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return mods_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const;

 private:
  std::vector<std::shared_ptr<Module>> mods_;
};

// A list of modules registered as "0", "1", ...; no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  ModuleList& push_back(std::shared_ptr<Module> m);
  size_t size() const { return mods_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const;
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    return std::dynamic_pointer_cast<M>((*this)[i]);
  }
  auto begin() const { return mods_.begin(); }
  auto end() const { return mods_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> mods_;
};

}  // namespace snug::nn

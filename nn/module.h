// nn::Module: the LibTorch-style base of every layer and model.
//
// A module owns named parameters, buffers and child modules, in
// registration order. Parameters are ordinary Tensors that require grad;
// to(device)/to(dtype) convert them in place (the Tensor handles stay the
// same objects), so an optimizer built before a move still updates them.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

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
    add_child(name, m);
    return m;
  }
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
  std::string pretty(int indent = 0) const;            // the tree of modules

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void collect(NamedTensors& out, const std::string& prefix, bool params, bool recurse) const;

  std::string name_;
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
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

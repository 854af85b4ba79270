// SPDX-License-Identifier: MIT
#include <snug/nn/module.h>

#include <set>
#include <sstream>
#include <unordered_set>

#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug::nn {

Tensor Module::forward(const Tensor&) {
  throw ValueError(str(name_, ": this module has no single-tensor forward(x); call its own forward overload"));
}

namespace {
// Parameters, buffers and submodules share one namespace: state_dict keys
// ("name", "child.name") would otherwise collide. (Fix: each kind used to be
// checked only against its own list, so a buffer could shadow a parameter.)
template <class Params, class Children>
void check_unused(const std::string& owner, const std::string& name, const Params& params, const Params& buffers,
                  const Children& children) {
  for (auto* list : {&params, &buffers})
    for (auto& [n, t] : *list)
      SNUG_CHECK(n != name, ValueError, owner, ": \"", name, "\" already exists (as a ",
                 list == &params ? "parameter" : "buffer", ")");
  for (auto& [n, c] : children)
    SNUG_CHECK(n != name, ValueError, owner, ": \"", name, "\" already exists (as a submodule)");
}
}  // namespace

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  SNUG_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, name_, ": parameter name \"", name,
             "\" must be non-empty and contain no '.'");
  check_unused(name_, name, params_, buffers_, children_);
  if (t.defined() && requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  SNUG_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, name_, ": buffer name \"", name,
             "\" must be non-empty and contain no '.'");
  check_unused(name_, name, params_, buffers_, children_);
  buffers_.emplace_back(name, t);
  return buffers_.back().second;
}

void Module::replace_parameter(const std::string& name, const Tensor& t) {
  for (auto& [n, p] : params_)
    if (n == name) {
      p = t;
      return;
    }
  throw ValueError(str(name_, ": no parameter named \"", name, "\""));
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m, Slot slot) {
  SNUG_CHECK(m != nullptr, ValueError, name_, ": register_module(\"", name, "\") got a null module");
  SNUG_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, name_, ": module name \"", name,
             "\" must be non-empty and contain no '.'");
  check_unused(name_, name, params_, buffers_, children_);
  children_.emplace_back(name, std::move(m));
  slots_.push_back(std::move(slot));
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> m) {
  SNUG_CHECK(m != nullptr, ValueError, name_, ".replace_module(\"", name, "\"): the replacement is null");
  for (size_t i = 0; i < children_.size(); ++i) {
    if (children_[i].first != name) continue;
    // NOTE [ Replacing a child ]: the bound member first, so a type that does
    // not fit leaves the registry as it was.
    if (slots_[i].set)
      SNUG_CHECK(slots_[i].set(m), ValueError, name_, ".replace_module(\"", name, "\"): ", m->repr(),
                 " does not fit the member bound to \"", name, "\" (it holds ", children_[i].second->repr(), ")");
    children_[i].second = std::move(m);
    return;
  }
  throw ValueError(str(name_, ".replace_module: no submodule named \"", name, "\""));
}

int Module::holds(const Module& child) const {
  int n = 0;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (children_[i].second.get() == &child) ++n;
    if (slots_[i].get && slots_[i].get() == &child) ++n;
  }
  return n;
}

void Module::collect(NamedTensors& out, const std::string& prefix, bool params, bool recurse) const {
  for (auto& [n, t] : params ? params_ : buffers_)
    if (t.defined()) out.emplace_back(prefix + n, t);
  if (recurse)
    for (auto& [n, c] : children_) c->collect(out, prefix + n + ".", params, true);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors all, out;
  collect(all, "", true, recurse);
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [n, t] : all)
    if (seen.insert(t.impl()).second) out.emplace_back(n, t);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect(out, "", false, recurse);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  // Fix: shared_from_this() threw bad_weak_ptr for a module not owned by a
  // shared_ptr (e.g. a model on the stack); hand out a non-owning alias then.
  std::shared_ptr<Module> self = weak_from_this().lock();
  if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), this);
  out.emplace_back(prefix, std::move(self));
  for (auto& [n, c] : children_) {
    auto sub = c->named_modules(prefix.empty() ? n : prefix + "." + n);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (auto& p : parameters()) {
    if (set_to_none || !p.grad().defined()) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard ng;
      p.grad().zero_();
    }
  }
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& [n, c] : children_) c->apply(fn);
}

namespace {
// Swaps t's storage for a converted copy, keeping the same TensorImpl so
// every holder of the handle (optimizers, tied modules) sees the change.
void convert_in_place(const Tensor& t, const std::function<Tensor(const Tensor&)>& conv) {
  Tensor c = raw::contiguous(conv(t));
  if (c.is_same(t)) return;
  TensorImpl* impl = t.impl();
  impl->storage = c.storage();
  impl->strides = c.strides();
  impl->offset = c.offset();
  impl->dtype = c.dtype();
  Tensor g = t.grad();
  if (g.defined()) t.set_grad(raw::contiguous(conv(g)));
}
std::vector<Tensor> unique_tensors(const NamedTensors& a, const NamedTensors& b) {
  std::vector<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  for (auto* list : {&a, &b})
    for (auto& [n, t] : *list)
      if (seen.insert(t.impl()).second) out.push_back(t);
  return out;
}
}  // namespace

void Module::to(Device device) {
  NoGradGuard ng;
  for (auto& t : unique_tensors(named_parameters(), named_buffers()))
    convert_in_place(t, [&](const Tensor& x) { return raw::to_device(x, device); });
}

void Module::to(DType dtype) {
  NoGradGuard ng;
  SNUG_CHECK(is_floating(dtype), DTypeError, name_, ".to(dtype): expected a floating dtype, got ", dtype_name(dtype));
  for (auto& t : unique_tensors(named_parameters(), named_buffers()))
    if (t.is_floating_point()) convert_in_place(t, [&](const Tensor& x) { return raw::to_dtype(x, dtype); });
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect(out, "", true, true);
  collect(out, "", false, true);
  for (auto& [n, t] : out) t = t.detach();
  return out;
}

std::string Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors mine = state_dict();
  std::map<std::string, Tensor> given;
  for (auto& [n, t] : state) given[n] = t;
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> known;
  for (auto& [n, t] : mine) {
    known.insert(n);
    auto it = given.find(n);
    if (it == given.end()) {
      missing.push_back(n);
    } else if (it->second.shape() != t.shape()) {
      mismatched.push_back(str(n, " (expected ", shape_str(t.shape()), ", got ", shape_str(it->second.shape()), ")"));
    }
  }
  for (auto& [n, t] : state)
    if (!known.count(n)) unexpected.push_back(n);
  std::string problems;
  auto list = [&](const char* what, const std::vector<std::string>& v) {
    if (v.empty()) return;
    problems += str(problems.empty() ? "" : "; ", what, ": ");
    for (size_t i = 0; i < v.size(); ++i) problems += (i ? ", " : "") + v[i];
  };
  list("missing keys", missing);
  list("unexpected keys", unexpected);
  list("shape mismatches", mismatched);
  SNUG_CHECK(!strict || problems.empty(), ValueError, name_, ".load_state_dict (strict): ", problems);
  NoGradGuard ng;
  for (auto& [n, t] : mine) {
    auto it = given.find(n);
    if (it != given.end() && it->second.shape() == t.shape()) raw::copy_(t, it->second);
  }
  return problems;
}

std::string Module::pretty(int indent) const {
  std::ostringstream os;
  os << repr();
  if (!children_.empty()) {
    os << " (\n";
    for (auto& [n, c] : children_)
      os << std::string(indent + 2, ' ') << "(" << n << "): " << c->pretty(indent + 2) << "\n";
    os << std::string(indent, ' ') << ")";
  }
  return os.str();
}

// ---- containers ---------------------------------------------------------------------

// Binds element i of a container's list (NOTE [ Replacing a child ]): by
// index, since the vector moves as it grows. The list is a member of the
// container, which cannot be copied or moved, so the reference stays valid.
Module::Slot Module::element_slot(std::vector<std::shared_ptr<Module>>& list, size_t i) {
  Slot s;
  s.set = [&list, i](const std::shared_ptr<Module>& r) {
    list[i] = r;
    return true;
  };
  s.get = [&list, i]() -> const Module* { return i < list.size() ? list[i].get() : nullptr; };
  return s;
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> mods) : Module("Sequential") {
  for (auto& m : mods) push_back(m);
}
Sequential& Sequential::push_back(std::shared_ptr<Module> m) {
  add_child(std::to_string(mods_.size()), m, element_slot(mods_, mods_.size()));
  mods_.push_back(std::move(m));
  return *this;
}
// Runs the layers in order and nothing else: fusing layers is nn::fuse's
// explicit rewrite of the tree (nn/fuse.h), not a pattern match here.
Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& m : mods_) h = m->forward(h);
  return h;
}
std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  SNUG_CHECK(i < mods_.size(), IndexError, "Sequential: index ", i, " out of range (size ", mods_.size(), ")");
  return mods_[i];
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> m) {
  add_child(std::to_string(mods_.size()), m, element_slot(mods_, mods_.size()));
  mods_.push_back(std::move(m));
  return *this;
}
std::shared_ptr<Module> ModuleList::operator[](size_t i) const {
  SNUG_CHECK(i < mods_.size(), IndexError, "ModuleList: index ", i, " out of range (size ", mods_.size(), ")");
  return mods_[i];
}

}  // namespace snug::nn

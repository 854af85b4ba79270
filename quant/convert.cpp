// SPDX-License-Identifier: MIT
#include <snug/quant/convert.h>

#include <cstdio>
#include <functional>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>

#include <snug/core/safetensors.h>
#include <snug/nn/batch_norm.h>
#include <snug/quant/modules.h>

namespace snug::quant {

namespace {

// Where a module sits: the parents' registry entries that hold it (one, or
// more for a module shared by several parents).
struct Site {
  nn::Module* parent;
  std::string child;
};
struct Node {
  nn::Module* m;
  std::string path;  // the first qualified name it was found under
  std::vector<Site> sites;
};

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Pre-order over the tree, each module once. Only raw pointers are kept, so
// that use_count() below counts the tree's references and the caller's, not ours.
void walk(nn::Module& m, const std::string& path, std::vector<Node>& nodes,
          std::unordered_map<const nn::Module*, size_t>& index) {
  std::vector<std::pair<std::string, nn::Module*>> kids;
  for (auto& [n, c] : m.named_children()) kids.emplace_back(n, c.get());
  for (auto& [n, c] : kids) {
    auto it = index.find(c);
    if (it != index.end()) {
      nodes[it->second].sites.push_back({&m, n});
      continue;
    }
    index[c] = nodes.size();
    nodes.push_back({c, join(path, n), {{&m, n}}});
    walk(*c, join(path, n), nodes, index);
  }
}

// What a step does with one module.
struct Decision {
  enum Kind { keep, replace, left } kind = keep;
  std::string reason;                                 // left
  std::function<std::shared_ptr<nn::Module>()> make;  // replace
};
using Rule = std::function<Decision(nn::Module&)>;

bool exact_linear(const nn::Module& m) { return typeid(m) == typeid(nn::Linear); }
bool exact_conv(const nn::Module& m) { return typeid(m) == typeid(nn::Conv2d); }
bool quantized(const nn::Module& m) { return dynamic_cast<const QuantizedWeights*>(&m) != nullptr; }

Decision left(std::string why) { return {Decision::left, std::move(why), {}}; }
Decision grouped(const nn::Conv2d& c) {
  return left(str("grouped convolution (groups=", c.groups, "): no int8 kernel"));
}

// Why a module with parameters of its own stays float when no rule took it.
std::string float_reason(const nn::Module& m) {
  if (dynamic_cast<const nn::Embedding*>(&m)) return "embedding: not quantizable (no int8 lookup)";
  if (dynamic_cast<const nn::LayerNorm*>(&m) || dynamic_cast<const nn::BatchNorm2d*>(&m))
    return "normalization: kept in float (activations travel in f32)";
  if (dynamic_cast<const InputObserving*>(&m)) return "prepared for convert (run quant::convert)";
  if (dynamic_cast<const nn::Linear*>(&m) || dynamic_cast<const nn::Conv2d*>(&m))
    return str("a subclass of ", dynamic_cast<const nn::Linear*>(&m) ? "Linear" : "Conv2d",
               " with its own forward: not replaced");
  std::string names;
  for (auto& [n, t] : m.named_parameters(false)) names += (names.empty() ? "" : ", ") + n;
  return "parameters (" + names + ") used by its own forward: no quantized op for them";
}

using Owners = std::unordered_map<const TensorImpl*, std::vector<std::string>>;  // parameter -> qualified names

// Why a layer the rule would replace has to stay, or "" when nothing stops it.
std::string blocker(const Node& n, const Owners& owners, bool cpu_only) {
  if (n.sites.empty()) return "the model itself is the layer: it cannot be replaced in place (put it in a Sequential)";
  const std::vector<Tensor> own = n.m->parameters(false);
  // A tied weight: converting one of its users would untie them.
  for (auto& [name, t] : n.m->named_parameters(false))
    for (const std::string& other : owners.at(t.impl()))
      if (other != join(n.path, name))
        return str("weight tied to another parameter (", name, " is also ", other,
                   "; replacing the layer would untie them)");
  if (cpu_only && !own.empty() && !own[0].device().is_cpu())
    return str("on ", own[0].device().str(), ": the int8 kernels run on the CPU");
  // NOTE [ Replacing a child ]: every reference the tree holds is one replace_module updates.
  std::unordered_set<const nn::Module*> parents;
  long held = 0;
  for (const Site& s : n.sites)
    if (parents.insert(s.parent).second) held += s.parent->holds(*n.m);
  const long count = n.m->weak_from_this().use_count();
  if (count > held)
    return str("held outside the module tree (", count - held, " reference(s) besides its parents' registry ",
               "and bound members: a member filled by register_module(name, m) instead of ",
               "register_module(name, member, m), or a variable); whoever holds it would keep calling the "
               "float layer");
  return "";
}

// One conversion step over the whole tree: decide for every module first
// (so `check` can refuse before anything changes), then replace the chosen
// layers at every site that holds them.
Report run(nn::Module& model, const std::string& step, const Rule& rule, bool cpu_only,
           const std::function<void(const std::vector<Node*>&)>& check = {}) {
  Report r;
  r.step = step;
  std::vector<Node> nodes;
  std::unordered_map<const nn::Module*, size_t> index;
  nodes.push_back({&model, "", {}});
  index[&model] = 0;
  walk(model, "", nodes, index);

  Owners owners;
  for (const Node& n : nodes)
    for (auto& [name, t] : n.m->named_parameters(false)) owners[t.impl()].push_back(join(n.path, name));

  std::vector<Node*> chosen;
  std::vector<Decision> made;
  std::unordered_set<const nn::Module*> inside;  // children of a replaced layer (QAT's input_fq): not reported
  for (Node& n : nodes) {
    if (inside.count(n.m)) continue;
    Decision d = rule(*n.m);
    if (d.kind == Decision::replace)
      if (std::string why = blocker(n, owners, cpu_only); !why.empty()) d = left(why);
    if (d.kind == Decision::keep && !quantized(*n.m) && !n.m->named_parameters(false).empty())
      d = left(float_reason(*n.m));
    if (d.kind == Decision::left) r.left_float.push_back({n.path, n.m->repr(), d.reason});
    if (d.kind == Decision::replace) {
      chosen.push_back(&n);
      made.push_back(std::move(d));
      n.m->apply([&](nn::Module& sub) {
        if (&sub != n.m) inside.insert(&sub);
      });
    }
  }
  if (check) check(chosen);  // may throw: nothing has been changed yet
  for (size_t i = 0; i < chosen.size(); ++i) {
    const Node& n = *chosen[i];
    std::shared_ptr<nn::Module> q = made[i].make();
    q->train(n.m->is_training());
    for (const Site& s : n.sites) s.parent->replace_module(s.child, q);
    r.converted.push_back(n.path);
  }
  if (!r.left_float.empty()) std::fprintf(stderr, "%s", r.str().c_str());
  return r;
}

Decision replace_with(std::function<std::shared_ptr<nn::Module>()> make) {
  return {Decision::replace, "", std::move(make)};
}

// The rule shared by the two prepare steps: plain Linear and Conv2d are wrapped.
template <class L, class C>
Rule prepare_rule(const std::string& observer) {
  return [observer](nn::Module& m) -> Decision {
    if (exact_linear(m))
      return replace_with([&m, observer] { return std::make_shared<L>(static_cast<nn::Linear&>(m), observer); });
    if (exact_conv(m)) {
      auto& c = static_cast<nn::Conv2d&>(m);
      if (c.groups != 1) return grouped(c);
      return replace_with([&c, observer] { return std::make_shared<C>(c, observer); });
    }
    return {};
  };
}

}  // namespace

std::string Report::reason(const std::string& name) const {
  for (const Left& l : left_float)
    if (l.name == name) return l.reason;
  return "";
}

std::string Report::str() const {
  std::string s = snug::str("quant::", step, ": ", converted.size(), " layer(s) replaced");
  if (left_float.empty()) return s + "; nothing left in float\n";
  s += snug::str("; left in float (", left_float.size(), "):\n");
  for (const Left& l : left_float)
    s += snug::str("  ", l.name.empty() ? "(the model)" : l.name, " [", l.module, "]: ", l.reason, "\n");
  return s;
}

Report quantize_dynamic(nn::Module& model) {
  return run(
      model, "quantize_dynamic",
      [](nn::Module& m) -> Decision {
        if (exact_linear(m))
          return replace_with([&m] { return std::make_shared<QuantizedLinear>(static_cast<nn::Linear&>(m)); });
        if (exact_conv(m)) {
          auto& c = static_cast<nn::Conv2d&>(m);
          if (c.groups != 1) return grouped(c);
          return replace_with([&c] { return std::make_shared<QuantizedConv2d>(c); });
        }
        return {};
      },
      /*cpu_only=*/true);
}

Report prepare_static(nn::Module& model, const std::string& observer) {
  make_observer(observer, {});  // fails early on an unknown name
  return run(model, "prepare_static", prepare_rule<ObservedLinear, ObservedConv2d>(observer), false);
}

Report prepare_qat(nn::Module& model, const std::string& observer) {
  make_observer(observer, {});
  return run(model, "prepare_qat", prepare_rule<QATLinear, QATConv2d>(observer), false);
}

Report convert(nn::Module& model) {
  auto rule = [](nn::Module& m) -> Decision {
    auto* o = dynamic_cast<InputObserving*>(&m);
    if (!o) {
      if (exact_conv(m) && static_cast<nn::Conv2d&>(m).groups != 1) return grouped(static_cast<nn::Conv2d&>(m));
      if (exact_linear(m) || exact_conv(m)) return left("not prepared (prepare_static / prepare_qat did not see it)");
      return {};
    }
    return replace_with([&m, o]() -> std::shared_ptr<nn::Module> {
      const QParams in = o->input_observer().qparams();
      if (auto* l = dynamic_cast<nn::Linear*>(&m)) return std::make_shared<QuantizedLinear>(*l, in);
      return std::make_shared<QuantizedConv2d>(dynamic_cast<nn::Conv2d&>(m), in);
    });
  };
  auto check = [](const std::vector<Node*>& chosen) {
    std::string silent;
    for (const Node* n : chosen)
      if (!dynamic_cast<InputObserving*>(n->m)->input_observer().observed())
        silent += (silent.empty() ? "" : ", ") + (n->path.empty() ? n->m->repr() : n->path);
    SNUG_CHECK(silent.empty(), ValueError, "quant::convert: the observers of ", silent,
               " saw no data; run a calibration pass (or QAT steps) before convert");
  };
  Report r = run(model, "convert", rule, /*cpu_only=*/true, check);
  model.eval();
  return r;
}

void save_quantized(const std::string& path, const nn::Module& model) {
  TensorMap t;
  for (auto& [k, v] : model.state_dict()) t.emplace_back(k, v);
  save_safetensors(path, t, {{"format", "snug.quantized.v1"}});
}

void load_quantized(const std::string& path, nn::Module& model) {
  SafetensorsFile f = load_safetensors(path);
  auto it = f.metadata.find("format");
  SNUG_CHECK(it != f.metadata.end() && it->second == "snug.quantized.v1", IOError, "load_quantized: ", path,
             " is not a snug quantized model (metadata format = \"",
             it == f.metadata.end() ? std::string("(none)") : it->second, "\")");
  model.load_state_dict(nn::NamedTensors(f.tensors.begin(), f.tensors.end()), true);
  model.apply([](nn::Module& m) {
    if (auto* q = dynamic_cast<QuantizedWeights*>(&m)) q->repack();
  });
}

std::size_t model_bytes(const nn::Module& model) {
  std::size_t n = 0;
  for (auto& [k, p] : model.named_parameters()) n += p.nbytes();
  for (auto& [k, b] : model.named_buffers()) n += b.nbytes();
  const_cast<nn::Module&>(model).apply([&](nn::Module& m) {
    if (auto* q = dynamic_cast<QuantizedWeights*>(&m)) n += q->packed_bytes();
  });
  return n;
}

}  // namespace snug::quant

#include "quant/convert.h"

#include <functional>

#include "core/safetensors.h"
#include "quant/modules.h"

namespace snug::quant {

namespace {

using Replace = std::function<std::shared_ptr<nn::Module>(const std::shared_ptr<nn::Module>&)>;

// A copy of the Sequential tree with replace(m) (when not null) instead of m.
std::shared_ptr<nn::Module> rebuild(const std::shared_ptr<nn::Module>& m, const Replace& replace) {
  SNUG_CHECK(m != nullptr, ValueError, "quant: null model");
  if (auto r = replace(m)) return r;
  if (dynamic_cast<nn::Sequential*>(m.get()) == nullptr) return m;
  auto out = std::make_shared<nn::Sequential>();
  for (auto& [name, child] : m->named_children()) out->push_back(rebuild(child, replace));
  out->train(m->is_training());
  return out;
}

bool plain_conv(const nn::Module* m) {
  auto* c = dynamic_cast<const nn::Conv2d*>(m);
  return c && c->groups == 1;
}

}  // namespace

std::shared_ptr<nn::Module> quantize_dynamic(const std::shared_ptr<nn::Module>& model) {
  return rebuild(model, [](const std::shared_ptr<nn::Module>& m) -> std::shared_ptr<nn::Module> {
    if (auto* l = dynamic_cast<nn::Linear*>(m.get())) return std::make_shared<QuantizedLinear>(*l);
    return nullptr;
  });
}

std::shared_ptr<nn::Module> prepare_static(const std::shared_ptr<nn::Module>& model, const std::string& observer) {
  make_observer(observer, {});  // fails early on an unknown name
  return rebuild(model, [&](const std::shared_ptr<nn::Module>& m) -> std::shared_ptr<nn::Module> {
    if (dynamic_cast<nn::Linear*>(m.get()) || plain_conv(m.get())) return std::make_shared<Observed>(m, observer);
    return nullptr;
  });
}

std::shared_ptr<nn::Module> prepare_qat(const std::shared_ptr<nn::Module>& model, const std::string& observer) {
  make_observer(observer, {});
  return rebuild(model, [&](const std::shared_ptr<nn::Module>& m) -> std::shared_ptr<nn::Module> {
    if (dynamic_cast<nn::Linear*>(m.get()) || plain_conv(m.get())) return std::make_shared<QATLayer>(m, observer);
    return nullptr;
  });
}

std::shared_ptr<nn::Module> convert(const std::shared_ptr<nn::Module>& prepared) {
  auto make = [](nn::Module* layer, const Observer& obs) -> std::shared_ptr<nn::Module> {
    SNUG_CHECK(obs.observed(), ValueError, "quant::convert: the observer of ", layer->repr(),
               " saw no data; run a calibration pass (or QAT steps) before convert");
    const QParams in = obs.qparams();
    if (auto* l = dynamic_cast<nn::Linear*>(layer)) return std::make_shared<QuantizedLinear>(*l, in);
    return std::make_shared<QuantizedConv2d>(*dynamic_cast<nn::Conv2d*>(layer), in);
  };
  auto out = rebuild(prepared, [&](const std::shared_ptr<nn::Module>& m) -> std::shared_ptr<nn::Module> {
    if (auto* o = dynamic_cast<Observed*>(m.get())) return make(o->layer.get(), *o->observer);
    if (auto* q = dynamic_cast<QATLayer*>(m.get())) return make(q->layer.get(), *q->input_fq->observer);
    return nullptr;
  });
  out->eval();
  return out;
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
    if (auto* q = dynamic_cast<QuantizedWeightLayer*>(&m)) q->repack();
  });
}

std::size_t model_bytes(const nn::Module& model) {
  std::size_t n = 0;
  for (auto& [k, p] : model.named_parameters()) n += p.nbytes();
  for (auto& [k, b] : model.named_buffers()) n += b.nbytes();
  const_cast<nn::Module&>(model).apply([&](nn::Module& m) {
    if (auto* q = dynamic_cast<QuantizedWeightLayer*>(&m)) n += q->packed_bytes();
  });
  return n;
}

}  // namespace snug::quant

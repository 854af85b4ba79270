// SPDX-License-Identifier: MIT
#include <snug/prune/compact.h>

#include <cmath>
#include <functional>

#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>
#include <snug/nn/attention.h>
#include <snug/nn/batch_norm.h>
#include <snug/nn/conv.h>
#include <snug/nn/layers.h>
#include <snug/nn/pool.h>
#include <snug/prune/channel_groups.h>
#include <snug/prune/prune.h>

namespace snug::prune {

namespace detail {
void set_mask(const Tensor& param, const Tensor& m);  // prune/prune.cpp
}

namespace {

struct Leaf {
  std::string path;
  nn::Module* mod;
};

// Sequentials are transparent; every other module is one step of the chain.
void leaves(nn::Module& m, const std::string& prefix, std::vector<Leaf>& out) {
  if (dynamic_cast<nn::Sequential*>(&m) != nullptr) {
    for (auto& [n, c] : m.named_children()) leaves(*c, prefix.empty() ? n : prefix + "." + n, out);
    return;
  }
  out.push_back({prefix, &m});
}

bool is_producer(nn::Module* m) {
  if (dynamic_cast<nn::Linear*>(m)) return true;
  auto* c = dynamic_cast<nn::Conv2d*>(m);
  return c && c->groups == 1;
}

// Modules that keep channels apart (a channel's output depends only on that channel).
bool is_passthrough(nn::Module* m) {
  return dynamic_cast<nn::ReLU*>(m) || dynamic_cast<nn::GELU*>(m) || dynamic_cast<nn::SiLU*>(m) ||
         dynamic_cast<nn::Dropout*>(m) || dynamic_cast<nn::MaxPool2d*>(m) || dynamic_cast<nn::AvgPool2d*>(m) ||
         dynamic_cast<nn::AdaptiveAvgPool2d*>(m) || dynamic_cast<nn::BatchNorm2d*>(m) ||
         (dynamic_cast<nn::Flatten*>(m) && dynamic_cast<nn::Flatten*>(m)->start_dim == 1);
}

Tensor& weight_of(nn::Module* m) {
  if (auto* l = dynamic_cast<nn::Linear*>(m)) return l->weight;
  return dynamic_cast<nn::Conv2d*>(m)->weight;
}
Tensor& bias_of(nn::Module* m) {
  if (auto* l = dynamic_cast<nn::Linear*>(m)) return l->bias;
  return dynamic_cast<nn::Conv2d*>(m)->bias;
}

Tensor index_tensor(const std::vector<int64_t>& idx) { return from_vector(idx, {int64_t(idx.size())}, DType::i64); }

// What each producer channel carries after the modules between producer and
// consumer when its weights are zero: its bias (or 0) through activations,
// pooling and eval-mode BatchNorm. A constant map in, so read the centre.
using Act = std::function<Tensor(const Tensor&)>;
std::vector<float> dropped_values(nn::Module* producer, const std::vector<nn::Module*>& between, const Act& act,
                                  int64_t C) {
  const bool conv = dynamic_cast<nn::Conv2d*>(producer) != nullptr;
  const int64_t S = 32;
  Tensor b = bias_of(producer);
  Tensor x = b.defined() ? raw::to_dtype(raw::contiguous(b.detach()), DType::f32)
                         : zeros({C}, TensorOptions(DType::f32, weight_of(producer).device()));
  x = conv ? raw::contiguous(raw::expand(raw::view(x, {1, C, 1, 1}), {1, C, S, S})) : raw::view(x, {1, C});
  NoGradGuard ng;
  for (nn::Module* m : between) {
    if (dynamic_cast<nn::Flatten*>(m)) continue;  // shape only
    const bool was = m->is_training();
    m->eval();
    try {
      x = m->forward(x);
    } catch (...) {
      m->train(was);
      throw;
    }
    m->train(was);
  }
  if (act) x = act(x);
  if (conv) x = raw::select(raw::select(x, 3, x.size(3) / 2), 2, x.size(2) / 2);  // (1, C)
  return raw::contiguous(x).to_vector<float>();
}

}  // namespace

void select_in_place(const Tensor& t, int64_t dim, const Tensor& index_in, nn::optim::Optimizer* optimizer) {
  NoGradGuard ng;
  // The index is built on the host; the tensor may live on cpu:N or a GPU.
  const Tensor index = raw::to_device(index_in, t.device());
  const Shape old = t.shape();
  // The shrunk copies are tagged as what they replace (a parameter, its
  // gradient, its optimizer state), so that memory tables by tag stay true
  // after compaction; buffers (running statistics) keep the caller's tag.
  Tensor fresh;
  {
    memory::TagScope tag(t.requires_grad() ? memory::Tag::parameter : memory::current_tag());
    fresh = raw::contiguous(raw::index_select(t, dim, index));
  }
  Tensor grad = t.grad();
  TensorImpl* impl = t.impl();
  impl->storage = fresh.storage();
  impl->shape = fresh.shape();
  impl->strides = fresh.strides();
  impl->offset = fresh.offset();
  if (grad.defined()) {
    memory::TagScope tag(memory::Tag::gradient);
    t.set_grad(raw::contiguous(raw::index_select(grad, dim, index)));
  }
  Tensor m = mask(t);
  if (m.defined()) detail::set_mask(t, raw::contiguous(raw::index_select(m, dim, index)));
  if (optimizer) {
    memory::TagScope tag(memory::Tag::optimizer_state);
    optimizer->select_param_state(t, dim, index, old);
  }
}

std::size_t parameter_bytes(const nn::Module& model) {
  std::size_t n = 0;
  for (auto& [k, p] : model.named_parameters()) n += p.nbytes();
  return n;
}
std::size_t buffer_bytes(const nn::Module& model) {
  std::size_t n = 0;
  for (auto& [k, b] : model.named_buffers()) n += b.nbytes();
  return n;
}

namespace {
// Drops prod's all-zero output channels and the matching inputs of cons.
// between: channel-wise modules in between; act: a functional activation
// applied after them (a TransformerBlock's GELU), or null.
void compact_pair(const std::string& path, nn::Module* prod, const std::vector<nn::Module*>& between, const Act& act,
                  nn::Module* cons, bool flattened, nn::optim::Optimizer* optimizer, CompactReport& rep) {
  const bool prod_conv = dynamic_cast<nn::Conv2d*>(prod) != nullptr;
  const bool cons_conv = dynamic_cast<nn::Conv2d*>(cons) != nullptr;
  if (cons_conv && (!prod_conv || flattened)) return;  // shapes do not line up channel for channel
  if (!cons_conv && prod_conv && !flattened) return;

  Tensor& W = weight_of(prod);
  const int64_t C = W.size(0), rest = W.numel() / C;
  Tensor& Wc = weight_of(cons);
  const int64_t cons_in = Wc.size(1);
  if (cons_in % C != 0) return;
  const int64_t block = cons_in / C;  // input columns per channel (> 1 after a Flatten)
  if (cons_conv && block != 1) return;

  std::vector<float> w = raw::contiguous(raw::to_dtype(W, DType::f32)).to_vector<float>();
  std::vector<int64_t> keep, drop;
  for (int64_t c = 0; c < C; ++c) {
    bool zero = true;
    for (int64_t j = 0; j < rest && zero; ++j) zero = w[size_t(c * rest + j)] == 0.0f;
    (zero ? drop : keep).push_back(c);
  }
  if (drop.empty()) return;
  if (keep.empty()) {  // keep one channel: zero-size tensors help nobody
    keep.push_back(drop.front());
    drop.erase(drop.begin());
  }

  // Fold what the dropped channels still emit into the consumer's bias.
  const std::vector<float> v = dropped_values(prod, between, act, C);
  std::vector<float> wc = raw::contiguous(raw::to_dtype(Wc, DType::f32)).to_vector<float>();
  const int64_t O = Wc.size(0), k_area = Wc.numel() / (O * cons_in);  // kh*kw for a conv, 1 for a Linear
  std::vector<float> delta(size_t(O), 0.0f);
  bool any = false;
  for (int64_t c : drop) {
    if (v[size_t(c)] == 0.0f) continue;
    any = true;
    for (int64_t o = 0; o < O; ++o) {
      double s = 0;
      for (int64_t j = c * block * k_area; j < (c + 1) * block * k_area; ++j) s += wc[size_t(o * cons_in * k_area + j)];
      delta[size_t(o)] += float(s * v[size_t(c)]);
    }
  }
  if (any) {
    Tensor& bc = bias_of(cons);
    SNUG_CHECK(bc.defined(), ValueError, "prune::compact: the pruned channels of \"", path,
               "\" still emit a nonzero constant (their bias) and \"",
               "the next layer has no bias to fold it into; "
               "mask the bias too (prune::output_channels)");
    bc.add_(raw::to_device(raw::to_dtype(from_vector(delta, {O}), bc.dtype()), bc.device()));
  }

  const Tensor idx = index_tensor(keep);
  select_in_place(W, 0, idx, optimizer);
  if (bias_of(prod).defined()) select_in_place(bias_of(prod), 0, idx, optimizer);
  for (nn::Module* m : between)
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) {
      for (Tensor* t : {&bn->weight, &bn->bias, &bn->running_mean, &bn->running_var})
        if (t->defined()) select_in_place(*t, 0, idx, optimizer);
      bn->num_features = int64_t(keep.size());
    }
  std::vector<int64_t> cols;
  for (int64_t c : keep)
    for (int64_t j = 0; j < block; ++j) cols.push_back(c * block + j);
  select_in_place(Wc, 1, index_tensor(cols), optimizer);

  if (auto* l = dynamic_cast<nn::Linear*>(prod)) l->out_features = int64_t(keep.size());
  if (auto* cv = dynamic_cast<nn::Conv2d*>(prod)) cv->out_channels = int64_t(keep.size());
  if (auto* l = dynamic_cast<nn::Linear*>(cons)) l->in_features = int64_t(cols.size());
  if (auto* cv = dynamic_cast<nn::Conv2d*>(cons)) cv->in_channels = int64_t(cols.size());
  rep.layers.push_back({path, C, int64_t(keep.size())});
}

// Drops the heads of a MultiheadAttention whose value rows are all zero.
// Such a head outputs its value bias b_v (attention weights sum to 1), a
// constant folded into proj's bias: exact.
void compact_heads(const std::string& path, nn::MultiheadAttention& a, nn::optim::Optimizer* optimizer,
                   CompactReport& rep) {
  const int64_t H = a.heads, D = a.head_dim, inner = H * D;
  Tensor& Wqkv = a.qkv->weight;  // (3 inner, embd)
  const int64_t E = Wqkv.size(1);
  std::vector<float> w = raw::contiguous(Wqkv).to_vector<float>();
  std::vector<int64_t> keep, drop;
  for (int64_t h = 0; h < H; ++h) {
    bool zero = true;
    for (int64_t r = 2 * inner + h * D; r < 2 * inner + (h + 1) * D && zero; ++r)
      for (int64_t e = 0; e < E && zero; ++e) zero = w[size_t(r * E + e)] == 0.0f;
    (zero ? drop : keep).push_back(h);
  }
  if (drop.empty()) return;
  if (keep.empty()) {
    keep.push_back(drop.front());
    drop.erase(drop.begin());
  }
  Tensor& Wp = a.proj->weight;  // (embd, inner)
  if (a.qkv->bias.defined()) {
    std::vector<float> b = raw::contiguous(a.qkv->bias).to_vector<float>(), wp = raw::contiguous(Wp).to_vector<float>();
    const int64_t O = Wp.size(0);
    std::vector<float> delta(size_t(O), 0.0f);
    bool any = false;
    for (int64_t h : drop)
      for (int64_t d = 0; d < D; ++d) {
        const float bv = b[size_t(2 * inner + h * D + d)];
        if (bv == 0.0f) continue;
        any = true;
        for (int64_t o = 0; o < O; ++o) delta[size_t(o)] += wp[size_t(o * inner + h * D + d)] * bv;
      }
    if (any) {
      SNUG_CHECK(a.proj->bias.defined(), ValueError, "prune::compact: pruned heads of \"", path,
                 "\" have a value bias but proj has no bias to fold it into");
      a.proj->bias.add_(raw::to_device(from_vector(delta, {O}), a.proj->bias.device()));
    }
  }
  std::vector<int64_t> rows, cols;
  for (int64_t part = 0; part < 3; ++part)
    for (int64_t h : keep)
      for (int64_t d = 0; d < D; ++d) rows.push_back(part * inner + h * D + d);
  for (int64_t h : keep)
    for (int64_t d = 0; d < D; ++d) cols.push_back(h * D + d);
  select_in_place(Wqkv, 0, index_tensor(rows), optimizer);
  if (a.qkv->bias.defined()) select_in_place(a.qkv->bias, 0, index_tensor(rows), optimizer);
  select_in_place(Wp, 1, index_tensor(cols), optimizer);
  a.heads = int64_t(keep.size());
  a.qkv->out_features = int64_t(rows.size());
  a.proj->in_features = int64_t(cols.size());
  rep.layers.push_back({path, H, a.heads});
}

}  // namespace

CompactReport compact(nn::Module& model, nn::optim::Optimizer* optimizer) {
  CompactReport rep;
  rep.param_bytes_before = parameter_bytes(model);
  std::vector<Leaf> chain;
  leaves(model, "", chain);
  NoGradGuard ng;
  for (size_t i = 0; i < chain.size(); ++i) {
    nn::Module* prod = chain[i].mod;
    if (!is_producer(prod)) continue;
    // The next consumer, with only channel-preserving modules in between.
    std::vector<nn::Module*> between;
    nn::Module* cons = nullptr;
    bool flattened = false;
    for (size_t j = i + 1; j < chain.size(); ++j) {
      nn::Module* m = chain[j].mod;
      if (is_producer(m)) {
        cons = m;
        break;
      }
      if (!is_passthrough(m)) break;
      flattened = flattened || dynamic_cast<nn::Flatten*>(m) != nullptr;
      between.push_back(m);
    }
    if (cons == nullptr) continue;
    compact_pair(chain[i].path, prod, between, nullptr, cons, flattened, optimizer, rep);
  }
  // Transformer blocks: the MLP (fc -> GELU -> fc_proj) and the attention heads.
  for (auto& [path, mod] : model.named_modules()) {
    if (auto* tb = dynamic_cast<nn::TransformerBlock*>(mod.get()))
      compact_pair(
          path.empty() ? "fc" : path + ".fc", tb->fc.get(), {}, [](const Tensor& x) { return gelu(x); },
          tb->fc_proj.get(), false, optimizer, rep);
    if (auto* a = dynamic_cast<nn::MultiheadAttention*>(mod.get())) compact_heads(path, *a, optimizer, rep);
  }
  // Residual networks: channels tied by skip connections (prune/channel_groups.h).
  const std::vector<ChannelGroup> groups = channel_groups(model);
  if (!groups.empty()) {
    const CompactReport g = compact_groups(model, groups, optimizer);
    rep.layers.insert(rep.layers.end(), g.layers.begin(), g.layers.end());
  }
  rep.param_bytes_after = parameter_bytes(model);
  return rep;
}

}  // namespace snug::prune

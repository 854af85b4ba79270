// SPDX-License-Identifier: MIT
#include <snug/prune/prune.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <sstream>

#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_ops.h>
#include <snug/nn/optim/optimizer.h>

namespace snug::prune {

namespace {

// NOTE [ Mask registry ]: masks are keyed by the parameter's TensorImpl,
// held weakly (a dead parameter's entry can never match a new tensor that
// happens to reuse its address). The gradient hook and the step hook share
// the Slot, so compaction can shrink a mask in place (prune/compact.cpp) and
// remove() can switch the hook off by clearing it.
struct Slot {
  Tensor mask;  // same shape and dtype as the parameter; undefined after remove()
};
using Registry = std::map<std::weak_ptr<TensorImpl>, std::shared_ptr<Slot>, std::owner_less<>>;
std::mutex g_mu;
Registry& registry() {
  static Registry r;
  return r;
}

std::shared_ptr<Slot> find_slot(const Tensor& p) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto& r = registry();
  auto it = r.find(std::weak_ptr<TensorImpl>(p.impl_ptr()));
  return it == r.end() ? nullptr : it->second;
}

void ensure_step_hook() {
  static std::once_flag once;
  std::call_once(once, [] {
    nn::optim::register_optimizer_step_post_hook([](nn::optim::Optimizer& opt) {
      std::vector<Tensor> ps;
      for (auto& g : opt.param_groups())
        for (auto& p : g.params) ps.push_back(p);
      apply_masks(ps);
    });
  });
}

// named_parameters returns handles sharing the module's TensorImpl, which is
// all pruning touches.
Tensor get_param(nn::Module& m, const std::string& name) {
  std::string have;
  for (auto& [n, t] : m.named_parameters(false)) {
    if (n == name) return t;
    have += (have.empty() ? "" : ", ") + n;
  }
  throw ValueError(
      str("prune: module ", m.repr(), " has no parameter \"", name, "\" (it has: ", have.empty() ? "none" : have, ")"));
}

void check_amount(const char* fn, double amount) {
  SNUG_CHECK(amount >= 0 && amount <= 1, ValueError, "prune::", fn, ": amount must be in [0, 1], got ", amount);
}

std::vector<float> values_of(const Tensor& t) { return raw::contiguous(t).to_vector<float>(); }

// The current mask of p as floats (all ones when not pruned).
std::vector<float> alive_of(const Tensor& p) {
  Tensor m = mask(p);
  return m.defined() ? values_of(m) : std::vector<float>(size_t(p.numel()), 1.0f);
}

// Installs `new_mask` (0/1 floats, p's shape), combined with the existing
// mask if any, zeroes the pruned entries and hooks the gradient.
void install(const Tensor& p, const std::vector<float>& new_mask) {
  NoGradGuard ng;
  Tensor m = raw::to_dtype(from_vector(new_mask, p.shape()), p.dtype());
  m = raw::to_device(m, p.device());
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto& r = registry();
    // Drop entries of parameters that no longer exist.
    for (auto it = r.begin(); it != r.end();) it = it->first.expired() ? r.erase(it) : std::next(it);
    auto key = std::weak_ptr<TensorImpl>(p.impl_ptr());
    auto it = r.find(key);
    if (it != r.end() && it->second->mask.defined()) {
      it->second->mask = raw::binary(BinaryOp::mul, it->second->mask, m);
      slot = it->second;
    } else {
      slot = std::make_shared<Slot>();
      slot->mask = m;
      r[key] = slot;
      if (p.requires_grad()) {
        std::weak_ptr<Slot> weak = slot;
        p.register_hook([weak](const Tensor& g) -> Tensor {
          auto s = weak.lock();
          if (!s || !s->mask.defined()) return Tensor();
          return raw::binary(BinaryOp::mul, g, s->mask);
        });
      }
    }
  }
  ensure_step_hook();
  Tensor pm = p;
  pm.mul_(slot->mask);
  if (p.grad().defined()) p.grad().mul_(slot->mask);
}

// Marks the k lowest-scored entries 0 (ties: lower index first, so results are deterministic).
std::vector<float> mask_lowest(const std::vector<float>& score, int64_t k) {
  std::vector<int64_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::clamp<int64_t>(k, 0, int64_t(idx.size()));
  auto less = [&](int64_t a, int64_t b) { return score[a] != score[b] ? score[a] < score[b] : a < b; };
  if (k > 0 && k < int64_t(idx.size())) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), less);
  std::vector<float> out(score.size(), 1.0f);
  for (int64_t i = 0; i < k; ++i) out[idx[i]] = 0.0f;
  return out;
}

// Unstructured: score alive entries, dead ones first, prune round(amount * alive) more.
void prune_by_score(const Tensor& p, std::vector<float> score, double amount) {
  std::vector<float> alive = alive_of(p);
  int64_t n_alive = 0;
  for (size_t i = 0; i < score.size(); ++i) {
    if (alive[i] == 0)
      score[i] = -1.0f;  // below every |w| and every U[0,1) draw
    else
      ++n_alive;
  }
  const int64_t dead = int64_t(score.size()) - n_alive;
  install(p, mask_lowest(score, dead + std::llround(amount * double(n_alive))));
}

}  // namespace

// ---- methods ---------------------------------------------------------------------------

void l1_unstructured(nn::Module& m, const std::string& name, double amount) {
  check_amount("l1_unstructured", amount);
  const Tensor& p = get_param(m, name);
  std::vector<float> s = values_of(p);
  for (auto& v : s) v = std::fabs(v);
  prune_by_score(p, std::move(s), amount);
}

void random_unstructured(nn::Module& m, const std::string& name, double amount, Generator* gen) {
  check_amount("random_unstructured", amount);
  const Tensor& p = get_param(m, name);
  prune_by_score(p, values_of(rand(p.shape(), DType::f32, gen)), amount);
}

void ln_structured(nn::Module& m, const std::string& name, double amount, double n, int64_t dim) {
  check_amount("ln_structured", amount);
  SNUG_CHECK(n >= 1, ValueError, "prune::ln_structured: the norm order n must be >= 1 (or INFINITY), got ", n);
  const Tensor& p = get_param(m, name);
  SNUG_CHECK(p.dim() >= 1, ValueError, "prune::ln_structured: parameter \"", name, "\" is a scalar");
  const int64_t d = dim < 0 ? dim + p.dim() : dim;
  SNUG_CHECK(d >= 0 && d < p.dim(), IndexError, "prune::ln_structured: dim ", dim, " out of range for shape ",
             shape_str(p.shape()));
  // (S, rest): slice s along d is row s of the transposed, contiguous copy.
  const int64_t S = p.size(d), rest = p.numel() / std::max<int64_t>(S, 1);
  std::vector<float> w = values_of(raw::transpose(p, 0, d));
  std::vector<float> a = values_of(raw::transpose(from_vector(alive_of(p), p.shape()), 0, d));
  std::vector<float> score(size_t(S), -1.0f);
  int64_t n_alive = 0;
  for (int64_t s = 0; s < S; ++s) {
    bool any = false;
    double acc = 0;
    for (int64_t j = 0; j < rest; ++j) {
      const float am = a[size_t(s * rest + j)];
      any = any || am != 0;
      const double v = std::fabs(double(w[size_t(s * rest + j)] * am));
      acc = std::isinf(n) ? std::max(acc, v) : acc + std::pow(v, n);
    }
    if (!any) continue;  // a dead slice: already pruned
    ++n_alive;
    score[size_t(s)] = float(std::isinf(n) ? acc : std::pow(acc, 1.0 / n));
  }
  std::vector<float> slice_mask = mask_lowest(score, (S - n_alive) + std::llround(amount * double(n_alive)));
  // Back to p's layout: element (.., i_d, ..) keeps slice_mask[i_d].
  std::vector<float> out(size_t(p.numel()));
  int64_t inner = 1;
  for (int64_t k = d + 1; k < p.dim(); ++k) inner *= p.size(k);
  for (int64_t i = 0; i < p.numel(); ++i) out[size_t(i)] = slice_mask[size_t((i / inner) % S)];
  install(p, out);
}

void output_channels(nn::Module& layer, double amount, double n) {
  ln_structured(layer, "weight", amount, n, 0);
  const Tensor w = get_param(layer, "weight");
  for (auto& [name, b] : layer.named_parameters(false)) {
    if (name != "bias") continue;
    SNUG_CHECK(b.dim() == 1 && b.size(0) == w.size(0), ShapeError, "prune::output_channels: bias of shape ",
               shape_str(b.shape()), " does not match ", w.size(0), " output channels");
    const std::vector<float> wm = values_of(mask(w));
    const int64_t rest = w.numel() / std::max<int64_t>(w.size(0), 1);
    std::vector<float> bm(size_t(w.size(0)), 0.0f);
    for (int64_t c = 0; c < w.size(0); ++c)
      for (int64_t j = 0; j < rest; ++j) bm[size_t(c)] = std::max(bm[size_t(c)], wm[size_t(c * rest + j)]);
    install(b, bm);
  }
}

void attention_heads(nn::MultiheadAttention& a, double amount) {
  check_amount("attention_heads", amount);
  const int64_t H = a.heads, D = a.head_dim, inner = H * D;
  const Tensor& wq = a.qkv->weight;   // (3 inner, E)
  const Tensor& wp = a.proj->weight;  // (E, inner)
  const int64_t E = wq.size(1), O = wp.size(0);
  std::vector<float> w = values_of(wq), p = values_of(wp), alive = alive_of(wq);
  std::vector<float> score(size_t(H), -1.0f);
  int64_t n_alive = 0;
  for (int64_t h = 0; h < H; ++h) {
    double acc = 0;
    bool any = false;
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t r = part * inner + h * D; r < part * inner + (h + 1) * D; ++r)
        for (int64_t e = 0; e < E; ++e) {
          any = any || alive[size_t(r * E + e)] != 0;
          acc += double(w[size_t(r * E + e)]) * w[size_t(r * E + e)];
        }
    for (int64_t o = 0; o < O; ++o)
      for (int64_t d = h * D; d < (h + 1) * D; ++d) acc += double(p[size_t(o * inner + d)]) * p[size_t(o * inner + d)];
    if (!any) continue;
    ++n_alive;
    score[size_t(h)] = float(std::sqrt(acc));
  }
  const std::vector<float> head_mask = mask_lowest(score, (H - n_alive) + std::llround(amount * double(n_alive)));
  auto head_of_row = [&](int64_t r) { return (r % inner) / D; };
  std::vector<float> mq(w.size()), mp(p.size());
  for (int64_t r = 0; r < 3 * inner; ++r)
    for (int64_t e = 0; e < E; ++e) mq[size_t(r * E + e)] = head_mask[size_t(head_of_row(r))];
  for (int64_t o = 0; o < O; ++o)
    for (int64_t d = 0; d < inner; ++d) mp[size_t(o * inner + d)] = head_mask[size_t(d / D)];
  install(wq, mq);
  install(wp, mp);
  if (a.qkv->bias.defined()) {
    std::vector<float> mb(size_t(3 * inner));
    for (int64_t r = 0; r < 3 * inner; ++r) mb[size_t(r)] = head_mask[size_t(head_of_row(r))];
    install(a.qkv->bias, mb);
  }
}

void global_unstructured(const std::vector<ParamRef>& params, double amount) {
  check_amount("global_unstructured", amount);
  SNUG_CHECK(!params.empty(), ValueError, "prune::global_unstructured: no parameters given");
  std::vector<Tensor> ps;
  std::vector<float> score;
  std::vector<size_t> start;
  int64_t n_alive = 0;
  for (auto& [mod, name] : params) {
    SNUG_CHECK(mod != nullptr, ValueError, "prune::global_unstructured: null module for \"", name, "\"");
    Tensor p = get_param(*mod, name);
    for (auto& q : ps)
      SNUG_CHECK(!q.is_same(p), ValueError, "prune::global_unstructured: parameter \"", name, "\" given twice");
    std::vector<float> w = values_of(p), a = alive_of(p);
    start.push_back(score.size());
    for (size_t i = 0; i < w.size(); ++i) {
      score.push_back(a[i] == 0 ? -1.0f : std::fabs(w[i]));
      n_alive += a[i] != 0;
    }
    ps.push_back(p);
  }
  const int64_t dead = int64_t(score.size()) - n_alive;
  std::vector<float> all = mask_lowest(score, dead + std::llround(amount * double(n_alive)));
  for (size_t i = 0; i < ps.size(); ++i) {
    auto b = all.begin() + int64_t(start[i]);
    install(ps[i], std::vector<float>(b, b + ps[i].numel()));
  }
}

void n_m_unstructured(nn::Module& m, const std::string& name, int64_t n, int64_t group) {
  SNUG_CHECK(group >= 1 && n >= 0 && n <= group, ValueError, "prune::n_m_unstructured: need 0 <= N <= M, M >= 1, got ",
             n, ":", group);
  const Tensor& p = get_param(m, name);
  SNUG_CHECK(p.dim() >= 1, ValueError, "prune::n_m_unstructured: parameter \"", name, "\" is a scalar");
  const int64_t K = p.dim() == 1 ? p.numel() : p.numel() / p.size(0);
  SNUG_CHECK(K % group == 0, ShapeError, "prune::n_m_unstructured: ", n, ":", group, " needs the row length (", K,
             " for shape ", shape_str(p.shape()), ") to be a multiple of ", group);
  std::vector<float> w = values_of(p), out(w.size(), 0.0f);
  std::vector<int64_t> idx(static_cast<size_t>(group));
  for (size_t g0 = 0; g0 < w.size(); g0 += size_t(group)) {
    std::iota(idx.begin(), idx.end(), int64_t(g0));
    // Largest |w| first; ties keep the earlier entry.
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return std::fabs(w[a]) > std::fabs(w[b]); });
    for (int64_t j = 0; j < n; ++j) out[size_t(idx[size_t(j)])] = 1.0f;
  }
  install(p, out);
}

void custom_from_mask(nn::Module& m, const std::string& name, const Tensor& mk) {
  const Tensor& p = get_param(m, name);
  SNUG_CHECK(mk.defined() && mk.shape() == p.shape(), ShapeError, "prune::custom_from_mask: the mask has shape ",
             mk.defined() ? shape_str(mk.shape()) : std::string("(undefined)"), " but \"", name, "\" has ",
             shape_str(p.shape()));
  std::vector<float> v = values_of(raw::to_dtype(mk, DType::f32));
  for (float x : v)
    SNUG_CHECK(x == 0 || x == 1, ValueError, "prune::custom_from_mask: mask entries must be 0 or 1, found ", x);
  install(p, v);
}

void remove(nn::Module& m, const std::string& name) {
  const Tensor& p = get_param(m, name);
  std::shared_ptr<Slot> slot = find_slot(p);
  SNUG_CHECK(slot && slot->mask.defined(), ValueError, "prune::remove: parameter \"", name, "\" of ", m.repr(),
             " is not pruned");
  {
    NoGradGuard ng;
    Tensor pm = p;
    pm.mul_(slot->mask);
  }
  std::lock_guard<std::mutex> lk(g_mu);
  slot->mask = Tensor();  // switches the gradient hook off
  registry().erase(std::weak_ptr<TensorImpl>(p.impl_ptr()));
}

void remove_all(nn::Module& model) {
  for (auto& [prefix, mod] : model.named_modules())
    for (auto& [n, t] : mod->named_parameters(false))
      if (is_pruned(t)) remove(*mod, n);
}

bool is_pruned(const Tensor& param) { return mask(param).defined(); }

Tensor mask(const Tensor& param) {
  auto s = find_slot(param);
  return s ? s->mask : Tensor();
}

void apply_masks(const std::vector<Tensor>& params) {
  NoGradGuard ng;
  for (const Tensor& p : params) {
    Tensor m = mask(p);
    if (!m.defined()) continue;
    Tensor pm = p;
    pm.mul_(m);
  }
}

// Internal to prune/: compaction replaces a mask by its selected slices.
namespace detail {
void set_mask(const Tensor& param, const Tensor& m) {
  auto s = find_slot(param);
  if (s) s->mask = m;
}
}  // namespace detail

// ---- report -------------------------------------------------------------------------------

std::vector<LayerSparsity> sparsity_report(const nn::Module& model) {
  std::vector<LayerSparsity> rows;
  for (auto& [n, p] : model.named_parameters()) {
    LayerSparsity r;
    r.name = n;
    r.shape = p.shape();
    r.numel = p.numel();
    for (float v : values_of(p)) r.zeros += v == 0.0f;
    r.masked = is_pruned(p);
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string format_sparsity_report(const std::vector<LayerSparsity>& rows) {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-28s %-18s %12s %12s %9s %s\n", "parameter", "shape", "numel", "zeros", "sparsity",
                "mask");
  os << buf;
  int64_t numel = 0, zeros = 0;
  for (auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%-28s %-18s %12lld %12lld %8.2f%% %s\n", r.name.c_str(), shape_str(r.shape).c_str(),
                  (long long)r.numel, (long long)r.zeros, 100 * r.sparsity(), r.masked ? "yes" : "");
    os << buf;
    numel += r.numel;
    zeros += r.zeros;
  }
  std::snprintf(buf, sizeof buf, "%-28s %-18s %12lld %12lld %8.2f%%\n", "total", "", (long long)numel, (long long)zeros,
                numel ? 100.0 * double(zeros) / double(numel) : 0.0);
  os << buf;
  return os.str();
}

}  // namespace snug::prune

// SPDX-License-Identifier: MIT
#include <snug/autograd/autocast.h>

#include <unordered_map>

#include <snug/autograd/grad_mode.h>
#include <snug/memory/allocator.h>

namespace snug::autocast {

namespace {

struct CacheEntry {
  Tensor source;  // keeps the key's TensorImpl alive, so its address cannot be reused
  uint32_t version;
  Tensor cast;
};

struct State {
  bool enabled = false;
  DType dtype = DType::bf16;
  int depth = 0;  // enabled scopes currently open
  std::unordered_map<const TensorImpl*, CacheEntry> cache;
};

thread_local State t_state;

bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }

}  // namespace

bool is_enabled() { return t_state.enabled; }
DType dtype() { return t_state.dtype; }

AutocastGuard::AutocastGuard(DType dt, bool enabled)
    : prev_enabled_(t_state.enabled), prev_dtype_(t_state.dtype), depth_before_(t_state.depth) {
  if (enabled) {
    SNUG_CHECK(is_half(dt), DTypeError, "autocast: the scope's dtype must be f16 or bf16, got ", dtype_name(dt));
    t_state.dtype = dt;
    ++t_state.depth;
  }
  t_state.enabled = enabled;
}

AutocastGuard::~AutocastGuard() {
  t_state.enabled = prev_enabled_;
  t_state.dtype = prev_dtype_;
  t_state.depth = depth_before_;
  // Leaving the outermost enabled scope: the cached casts belong to it.
  if (depth_before_ == 0) t_state.cache.clear();
}

void clear_cache() { t_state.cache.clear(); }
std::size_t cache_size() { return t_state.cache.size(); }
std::size_t cache_bytes() {
  std::size_t n = 0;
  for (const auto& [key, e] : t_state.cache) n += e.cast.nbytes();
  return n;
}

Tensor lower(const Tensor& x) {
  if (!t_state.enabled || !x.defined()) return x;
  const DType from = x.dtype(), to = t_state.dtype;
  if (from == to || (from != DType::f32 && !is_half(from))) return x;  // f64 and integers pass
  // Only parameters are cached (as PyTorch does): an activation is cast once
  // anyway, and caching it would keep it alive for the whole scope.
  const bool cacheable = x.requires_grad() && x.is_leaf() && autograd::is_grad_enabled();
  if (!cacheable) return x.to(to);
  auto it = t_state.cache.find(x.impl());
  if (it != t_state.cache.end() && it->second.version == x.version() && it->second.cast.dtype() == to)
    return it->second.cast;
  Tensor c;
  {
    // The cast is the parameter in the scope's dtype, held for the scope, not
    // an activation of the op that first asked for it (a step's forward is
    // usually under TagScope(activation)): tagged so, a memory table shows
    // what autocast keeps per weight apart from what the forward keeps.
    memory::TagScope tag(memory::Tag::parameter);
    c = x.to(to);  // differentiable: records a to_dtype node
  }
  t_state.cache[x.impl()] = CacheEntry{x, x.version(), c};
  return c;
}

Tensor widen(const Tensor& x) {
  if (!t_state.enabled || !x.defined() || !is_half(x.dtype())) return x;
  return x.to(DType::f32);
}

}  // namespace snug::autocast

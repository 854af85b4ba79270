// TEMPORARY stand-in (replaced by the caching allocator): plain aligned malloc
// with byte counters, so core/ can be built while memory/ is written.
#include "memory/allocator.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>

namespace snug::memory {
namespace {
thread_local Tag t_tag = Tag::other;
thread_local const char* t_op = nullptr;
std::mutex g_mu;
std::unordered_map<void*, std::size_t> g_sizes;
std::size_t g_alloc = 0, g_peak = 0;
}  // namespace

const char* tag_name(Tag t) {
  static const char* names[] = {"other", "parameter", "gradient", "optimizer_state",
                                "activation", "temporary", "data", "workspace"};
  return names[static_cast<int>(t)];
}
TagScope::TagScope(Tag t) : prev_(t_tag) { t_tag = t; }
TagScope::~TagScope() { t_tag = prev_; }
OpScope::OpScope(const char* n) : prev_(t_op) { t_op = n; }
OpScope::~OpScope() { t_op = prev_; }
Tag current_tag() { return t_tag; }
const char* current_op() { return t_op; }

void* allocate(Device, std::size_t n, StreamId) {
  std::size_t r = (n + 511) / 512 * 512;
  if (r == 0) r = 512;
  void* p = std::aligned_alloc(64, r);
  if (!p) throw std::bad_alloc();
  std::lock_guard<std::mutex> l(g_mu);
  g_sizes[p] = r;
  g_alloc += r;
  if (g_alloc > g_peak) g_peak = g_alloc;
  return p;
}
void deallocate(Device, void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = g_sizes.find(p);
    g_alloc -= it->second;
    g_sizes.erase(it);
  }
  std::free(p);
}
std::size_t allocated(Device) { return g_alloc; }
std::size_t reserved(Device) { return g_alloc; }
std::size_t peak_allocated(Device) { return g_peak; }
void reset_peak(Device) { g_peak = g_alloc; }
void empty_cache(Device) {}
}  // namespace snug::memory

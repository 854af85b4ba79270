// SPDX-License-Identifier: MIT
// memory::summary(d): the statistics of one device as a fixed-width table,
// laid out like torch.cuda.memory_summary() so users of both read it at once.
#include <cstdio>
#include <string>

#include <snug/memory/caching_allocator.h>
#include <snug/memory/stats.h>

namespace snug::memory {
namespace {

constexpr int kWidth = 87;

std::string line(char c) { return "|" + std::string(kWidth - 2, c) + "|\n"; }

std::string text_row(const std::string& text) {
  std::string t = text.substr(0, kWidth - 4);
  return "| " + t + std::string(kWidth - 4 - t.size(), ' ') + " |\n";
}

std::string row(const char* name, const std::string& a, const std::string& b, const std::string& c,
                const std::string& d) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "| %-28s| %12s | %12s | %12s | %12s |\n", name, a.c_str(), b.c_str(), c.c_str(),
                d.c_str());
  return buf;
}

std::string bytes(int64_t v) { return format_bytes(static_cast<std::size_t>(v < 0 ? 0 : v)); }

std::string bytes_row(const char* name, const Stat& s) {
  return row(name, bytes(s.current), bytes(s.peak), bytes(s.allocated), bytes(s.freed));
}
std::string count_row(const char* name, const Stat& s) {
  return row(name, std::to_string(s.current), std::to_string(s.peak), std::to_string(s.allocated),
             std::to_string(s.freed));
}

}  // namespace

std::string summary(Device d) {
  CachingAllocator& a = allocator_for(d);
  const DeviceStats s = a.stats();
  const AllocatorSettings cfg = a.settings();
  std::string out;
  out += line('=');
  out += text_row("snug memory summary: " + d.str() + " (" + a.backend().name() + " backend), capacity " +
                  (s.capacity == kNoLimit ? std::string("unlimited") : format_bytes(s.capacity)));
  out += line('-');
  out += row("Metric", "Current", "Peak", "Tot. added", "Tot. removed");
  out += line('-');
  out += bytes_row("Allocated memory", s.allocated_bytes);
  out += bytes_row("Requested memory", s.requested_bytes);
  out += bytes_row("Active memory", s.active_bytes);
  out += bytes_row("Reserved memory", s.reserved_bytes);
  out += bytes_row("Non-releasable memory", s.inactive_split_bytes);
  out += line('-');
  out += count_row("Allocations", s.allocation);
  out += count_row("Active blocks", s.active);
  out += count_row("Segments", s.segment);
  out += count_row("Non-releasable blocks", s.inactive_split);
  out += line('-');
  out += row("Allocated bytes by tag", "Current", "Peak", "At peak", "Tot. added");
  out += line('-');
  for (int t = 0; t < kNumTags; ++t) {
    const Stat& ts = s.tag_bytes[t];
    if (ts.allocated == 0) continue;  // tags never used would only add noise
    out += row(tag_name(static_cast<Tag>(t)), bytes(ts.current), bytes(ts.peak), bytes(s.tag_at_peak[t]),
               bytes(ts.allocated));
  }
  out += line('-');
  out += text_row(str("Cache hits: ", s.num_cache_hits, "   misses: ", s.num_cache_misses,
                      "   raw allocs: ", s.num_raw_allocs, "   raw frees: ", s.num_raw_frees));
  out += text_row(str("Alloc retries: ", s.num_alloc_retries, "   OOMs: ", s.num_ooms,
                      "   deferred frees (other streams): ", s.num_deferred_frees));
  out += line('-');
  std::string conf = "Settings: " + cfg.to_string();
  while (!conf.empty()) {  // wrap long settings strings at commas
    std::size_t cut = conf.size() <= kWidth - 4 ? conf.size() : conf.rfind(',', kWidth - 5) + 1;
    out += text_row(conf.substr(0, cut));
    conf = conf.substr(cut);
  }
  out += line('=');
  return out;
}

}  // namespace snug::memory

// SPDX-License-Identifier: MIT
#include <snug/memory/planned_arena.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include <snug/base/error.h>

namespace snug::memory {
namespace {
// How far a request that does not match the next entry looks ahead for one
// of its size: a step that skips a few recorded allocations (the optimizer
// state the first step made) stays on the plan; one that differs more falls
// back.
constexpr std::size_t kLookAhead = 8;
}  // namespace

// ---- the recorded step ---------------------------------------------------------------

void PlannedArena::start_recording() {
  state_ = State::recording;
  rec_.clear();
  rec_live_.clear();
  t_ = 0;
}

void PlannedArena::record_alloc(const void* p, std::size_t size) {
  rec_live_[reinterpret_cast<std::uintptr_t>(p)] = rec_.size();
  rec_.push_back(Rec{size, t_++, -1});
}

void PlannedArena::record_free(const void* p) {
  auto it = rec_live_.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == rec_live_.end()) return;  // allocated before the step: not the step's own
  rec_[it->second].t_free = t_++;
  rec_live_.erase(it);
}

std::size_t PlannedArena::plan() {
  // Slots: the step's own blocks (freed within it), numbered in allocation order.
  entries_.clear();
  slots_.clear();
  std::vector<std::size_t> rec_of;  // slot -> rec index
  for (std::size_t i = 0; i < rec_.size(); ++i) {
    const bool own = rec_[i].t_free >= 0;
    entries_.push_back(Entry{rec_[i].size, own ? static_cast<int32_t>(slots_.size()) : -1});
    if (own) {
      slots_.push_back(Slot{0, rec_[i].size, 0});
      rec_of.push_back(i);
    } else {
      ++stats_.kept_out;
    }
  }
  const std::size_t n = slots_.size();
  auto t_alloc = [&](std::size_t s) { return rec_[rec_of[s]].t_alloc; };
  auto t_free = [&](std::size_t s) { return rec_[rec_of[s]].t_free; };

  // Greedy by size: largest first (ties: earlier first), each at the lowest
  // offset where it overlaps no placed slot whose lifetime overlaps its own.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return slots_[a].size > slots_[b].size; });
  std::vector<std::size_t> placed;
  std::vector<std::pair<std::size_t, std::size_t>> busy;  // [offset, end) of conflicting slots
  std::size_t arena = 0;
  for (std::size_t s : order) {
    busy.clear();
    for (std::size_t q : placed)
      if (t_alloc(q) < t_free(s) && t_alloc(s) < t_free(q)) busy.emplace_back(slots_[q].offset, slots_[q].offset + slots_[q].size);
    std::sort(busy.begin(), busy.end());
    std::size_t off = 0;
    for (auto [lo, hi] : busy) {
      if (lo >= off + slots_[s].size) break;  // the gap below this one fits
      off = std::max(off, hi);
    }
    slots_[s].offset = off;
    arena = std::max(arena, off + slots_[s].size);
    placed.push_back(s);
  }

  // frees_before: how many of the step's frees came before each allocation;
  // free_order_: the slots in the order they were freed.
  free_order_.resize(n);
  std::iota(free_order_.begin(), free_order_.end(), 0);
  std::sort(free_order_.begin(), free_order_.end(), [&](int32_t a, int32_t b) { return t_free(a) < t_free(b); });
  std::vector<int64_t> free_times(n);
  for (std::size_t k = 0; k < n; ++k) free_times[k] = t_free(static_cast<std::size_t>(free_order_[k]));
  for (std::size_t s = 0; s < n; ++s)
    slots_[s].frees_before = static_cast<uint32_t>(
        std::lower_bound(free_times.begin(), free_times.end(), t_alloc(s)) - free_times.begin());

  // The lower bound no plan can beat: the most bytes live at once.
  std::vector<std::pair<int64_t, int64_t>> deltas;
  for (std::size_t s = 0; s < n; ++s) {
    deltas.emplace_back(t_alloc(s), static_cast<int64_t>(slots_[s].size));
    deltas.emplace_back(t_free(s), -static_cast<int64_t>(slots_[s].size));
  }
  std::sort(deltas.begin(), deltas.end());
  int64_t cur = 0, most = 0;
  for (auto [t, d] : deltas) most = std::max(most, cur += d);

  stats_.lower_bound = static_cast<std::size_t>(most);
  stats_.planned_blocks = static_cast<int64_t>(n);
  stats_.arena_bytes = arena;
  rec_.clear();
  rec_live_.clear();
  return arena;
}

void PlannedArena::attach(char* base, std::size_t bytes, std::size_t granule) {
  base_ = base;
  bytes_ = bytes;
  SNUG_CHECK(std::has_single_bit(granule), ValueError, "PlannedArena: granule ", granule, " is not a power of two");
  granule_shift_ = static_cast<unsigned>(std::countr_zero(granule));
  for (Slot& sl : slots_) sl.done = sl.live = 0;
  slot_at_.assign((bytes >> granule_shift_) + 1, -1);
  state_ = State::planned;
  cursor_ = freed_prefix_ = 0;
  active_ = base != nullptr;
}

void PlannedArena::detach() {
  base_ = nullptr;
  bytes_ = 0;
  active_ = false;
}

// ---- planned steps -------------------------------------------------------------------

void PlannedArena::replan() {
  other_step_ = false;
  if (++replans_in_row_ > kMaxReplans) {  // the steps keep changing: planning does not pay
    state_ = State::gave_up;
    stats_.gave_up = true;
    return;
  }
  ++stats_.replans;
  start_recording();
}

void PlannedArena::next_step() {
  if (step_matched_) replans_in_row_ = 0;  // the last step ran on the plan
  step_matched_ = false;
  other_step_ = false;
  if (state_ != State::planned || !base_) return;
  if (live_count_ > 0) {  // a block of the last step outlives it: its bytes may be planned for others
    active_ = false;
    ++stats_.suspended_steps;
    return;
  }
  for (Slot& sl : slots_) sl.done = 0;
  cursor_ = freed_prefix_ = 0;
  active_ = true;
}

void PlannedArena::done(int32_t slot) {
  slots_[static_cast<std::size_t>(slot)].done = 1;
  while (freed_prefix_ < free_order_.size() && slots_[static_cast<std::size_t>(free_order_[freed_prefix_])].done)
    ++freed_prefix_;
}

char* PlannedArena::take(std::size_t size, std::size_t requested, Tag tag) {
  if (!active_) {
    if (state_ == State::planned && base_) ++stats_.fallbacks;
    return nullptr;
  }
  std::size_t k = cursor_;
  if (k == 0 && !entries_.empty() && entries_[0].size != size) {
    // A step that does not begin as the recorded one did is another kind of
    // step (other shapes, an evaluation, a set-up): the fallback serves all
    // of it, and the caller may re-plan from it (replan()).
    active_ = false;
    other_step_ = live_count_ == 0;
    ++stats_.fallbacks;
    return nullptr;
  }
  if (k == 0) step_matched_ = true;
  if (k >= entries_.size() || entries_[k].size != size) {
    // Not the next entry: one a few further on of this size?
    const std::size_t end = std::min(entries_.size(), cursor_ + kLookAhead + 1);
    while (k < end && entries_[k].size != size) ++k;
    if (k == end) {
      ++stats_.fallbacks;
      return nullptr;
    }
    for (std::size_t j = cursor_; j < k; ++j)  // skipped: their slots will not be used this step
      if (entries_[j].slot >= 0) done(entries_[j].slot);
  }
  cursor_ = k + 1;
  const int32_t s = entries_[k].slot;
  if (s < 0) {  // the plan leaves this one to best fit
    ++stats_.kept_out;
    return nullptr;
  }
  Slot& sl = slots_[static_cast<std::size_t>(s)];
  if (freed_prefix_ < sl.frees_before) {  // a block planned to be gone by now is still live
    done(s);
    ++stats_.fallbacks;
    return nullptr;
  }
  sl.live = 1;
  sl.requested = requested;
  sl.tag = tag;
  slot_at_[sl.offset >> granule_shift_] = s;
  live_bytes_ += sl.size;
  ++live_count_;
  ++stats_.hits;
  return base_ + sl.offset;
}

std::size_t PlannedArena::give_back(const void* p, std::size_t* requested, Tag* tag) {
  const auto off = static_cast<std::size_t>(static_cast<const char*>(p) - base_);
  const std::size_t mask = (std::size_t{1} << granule_shift_) - 1;
  const int32_t s = (off & mask) == 0 ? slot_at_[off >> granule_shift_] : -1;
  Slot* sl = s >= 0 ? &slots_[static_cast<std::size_t>(s)] : nullptr;
  SNUG_CHECK(sl && sl->live && sl->offset == off, ValueError, "memory::deallocate: ", p,
             " is not a live block of the planned arena (freed twice?)");
  sl->live = 0;
  slot_at_[off >> granule_shift_] = -1;
  live_bytes_ -= sl->size;
  --live_count_;
  *requested = sl->requested;
  *tag = sl->tag;
  if (active_) done(s);
  return sl->size;
}

std::size_t PlannedArena::size_of(const void* p) const {
  const auto off = static_cast<std::size_t>(static_cast<const char*>(p) - base_);
  const std::size_t mask = (std::size_t{1} << granule_shift_) - 1;
  const int32_t s = (off & mask) == 0 ? slot_at_[off >> granule_shift_] : -1;
  SNUG_CHECK(s >= 0 && slots_[static_cast<std::size_t>(s)].live, ValueError, p,
             " is not a live block of the planned arena");
  return slots_[static_cast<std::size_t>(s)].size;
}

std::vector<PlannedArena::Live> PlannedArena::live_blocks() const {
  std::vector<Live> out;
  for (std::size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].live) out.push_back(Live{slots_[s].offset, slots_[s].size, slots_[s].requested, slots_[s].tag});
  std::sort(out.begin(), out.end(), [](const Live& a, const Live& b) { return a.offset < b.offset; });
  return out;
}

}  // namespace snug::memory

// SPDX-License-Identifier: MIT
#include <snug/memory/planned_arena.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <utility>

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
  // The probation window: the step's first allocations, at most kProbation
  // and (after the first) no more than 1/16 of the most bytes its own blocks
  // held at once. They stay with the base policy, so a step can show it is
  // another kind before the arena hands anything out (NOTE [ Planned arena ]).
  int64_t most = 0;
  {
    std::vector<std::pair<int64_t, int64_t>> deltas;
    for (const Rec& r : rec_)
      if (r.t_free >= 0) {
        deltas.emplace_back(r.t_alloc, static_cast<int64_t>(r.size));
        deltas.emplace_back(r.t_free, -static_cast<int64_t>(r.size));
      }
    std::sort(deltas.begin(), deltas.end());
    int64_t cur = 0;
    for (auto [t, d] : deltas) most = std::max(most, cur += d);
  }
  probation_ = 0;
  for (std::size_t sum = 0; probation_ < std::min(kProbation, rec_.size()); ++probation_) {
    sum += rec_[probation_].size;
    if (probation_ > 0 && sum > static_cast<std::size_t>(most) / 16) break;
  }

  // Slots: the step's own blocks (freed within it) after the probation
  // window, numbered in allocation order.
  entries_.clear();
  slots_.clear();
  std::vector<std::size_t> rec_of;  // slot -> rec index
  held_plan_.clear();
  std::unordered_map<std::size_t, std::uintptr_t> live_addr;  // rec index -> address, blocks live now
  for (const auto& [addr, i] : rec_live_) live_addr.emplace(i, addr);
  for (std::size_t i = 0; i < rec_.size(); ++i) {
    const bool own = rec_[i].t_free >= 0 && i >= probation_;
    entries_.push_back(Entry{rec_[i].size, own ? static_cast<int32_t>(slots_.size()) : -1});
    if (own) {
      slots_.push_back(Slot{0, rec_[i].size, 0});
      rec_of.push_back(i);
    } else {
      entries_.back().held = static_cast<int32_t>(held_plan_.size());
      const auto it = live_addr.find(i);
      held_plan_.push_back(HeldPlan{rec_[i].size, it == live_addr.end() ? 0 : it->second});
    }
  }
  n_entries_ = entries_.size();
  stats_.held_blocks = static_cast<int64_t>(held_plan_.size());
  const std::size_t n = slots_.size();
  auto t_alloc = [&](std::size_t s) { return rec_[rec_of[s]].t_alloc; };
  auto t_free = [&](std::size_t s) { return rec_[rec_of[s]].t_free; };

  // Greedy by size: largest first (ties: earlier first), each at the lowest
  // offset where it overlaps no placed slot whose lifetime overlaps its own.
  // The placed slots are kept by offset, so the search walks them upward and
  // stops at the first gap that fits, with no list of conflicts to build and
  // sort (that was O(n^2 log n): 15 ms for W-GPT's 1,900 blocks, seconds
  // for a tape ten times longer). Ties in offset may be in any order: the
  // gap found is the same.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return slots_[a].size > slots_[b].size; });
  struct Span {  // a placed slot: [lo, hi) bytes over [t0, t1) in the step
    std::size_t lo, hi;
    int64_t t0, t1;
  };
  std::vector<Span> span(n);
  std::vector<uint32_t> by_off;  // placed slots by offset
  by_off.reserve(n);
  std::size_t arena = 0;
  for (std::size_t s : order) {
    const std::size_t size = slots_[s].size;
    const int64_t t0 = t_alloc(s), t1 = t_free(s);
    std::size_t off = 0;
    for (uint32_t q : by_off) {
      const Span& o = span[q];
      if (o.t0 >= t1 || t0 >= o.t1) continue;  // never live together
      if (o.lo >= off + size) break;           // the gap below this one fits
      off = std::max(off, o.hi);
    }
    slots_[s].offset = off;
    span[s] = Span{off, off + size, t0, t1};
    arena = std::max(arena, off + size);
    const auto at = std::upper_bound(by_off.begin(), by_off.end(), off,
                                     [&](std::size_t v, uint32_t q) { return v < span[q].lo; });
    by_off.insert(at, static_cast<uint32_t>(s));
  }

  // frees_before: how many of the step's frees came before each allocation;
  // free_order_: the slots in the order they were freed.
  free_order_.resize(n);
  n_free_order_ = n;
  std::iota(free_order_.begin(), free_order_.end(), 0);
  std::sort(free_order_.begin(), free_order_.end(), [&](int32_t a, int32_t b) { return t_free(a) < t_free(b); });
  std::vector<int64_t> free_times(n);
  for (std::size_t k = 0; k < n; ++k) free_times[k] = t_free(static_cast<std::size_t>(free_order_[k]));
  for (std::size_t s = 0; s < n; ++s)
    slots_[s].frees_before = static_cast<uint32_t>(
        std::lower_bound(free_times.begin(), free_times.end(), t_alloc(s)) - free_times.begin());

  // The lower bound no arena can beat: the most bytes its slots held at once.
  {
    std::vector<std::pair<int64_t, int64_t>> deltas;
    for (std::size_t q = 0; q < n; ++q) {
      deltas.emplace_back(t_alloc(q), static_cast<int64_t>(slots_[q].size));
      deltas.emplace_back(t_free(q), -static_cast<int64_t>(slots_[q].size));
    }
    std::sort(deltas.begin(), deltas.end());
    int64_t cur = 0;
    most = 0;
    for (auto [t, d] : deltas) most = std::max(most, cur += d);
  }
  stats_.lower_bound = static_cast<std::size_t>(most);
  stats_.planned_blocks = static_cast<int64_t>(n);
  stats_.arena_bytes = arena;
  rec_.clear();
  rec_live_.clear();
  return arena;
}

void PlannedArena::attach(char* base, std::size_t bytes) {
  base_ = base;
  bytes_ = bytes;
  for (Slot& sl : slots_) sl.done = sl.live = 0;
  by_offset_.clear();
  for (std::size_t s = 0; s < slots_.size(); ++s) by_offset_.emplace_back(slots_[s].offset, static_cast<int32_t>(s));
  std::sort(by_offset_.begin(), by_offset_.end());
  state_ = State::planned;
  cursor_ = freed_prefix_ = 0;
  active_ = base != nullptr;
  bounded_ = suspended_ = false;
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
  // The step's allocations before the one that showed it is another kind
  // (at most kProbation, each of its entry's size: take_slow() calls a step
  // another kind only before any other difference) are its first: recorded,
  // so the new plan's entries line up with the next step's. Their frees are
  // not known (kept entries: each gets a held block).
  for (std::size_t i = 0; i < cursor_ && i < entries_.size(); ++i) rec_.push_back(Rec{entries_[i].size, t_++, -1});
}

void PlannedArena::next_step() {
  bounded_ = false;
  if (step_matched_) replans_in_row_ = 0;  // the last step ran on the plan
  step_matched_ = false;
  other_step_ = false;
  if (state_ != State::planned || !base_) return;
  if (counts_.blocks > 0) {  // a block of the last step outlives it: its bytes may be planned for others
    active_ = false;
    ++stats_.suspended_steps;
    suspended_ = true;
    return;
  }
  if (std::exchange(suspended_, false)) {
    // The arena waited for blocks of a step to go: the plan gave slots to
    // blocks that live across steps (its recorded step freed them before
    // its end), and every other step would wait again. This step is another
    // kind: recorded, and planned in turn.
    active_ = false;
    other_step_ = true;
    cursor_ = 0;
    return;
  }
  for (Slot& sl : slots_) sl.done = 0;
  cursor_ = freed_prefix_ = 0;
  active_ = true;
}

char* PlannedArena::take_slow(std::size_t size, std::size_t requested, Tag tag) {
  held_request_ = -1;
  if (!active_) {
    if (state_ == State::planned && base_) ++stats_.fallbacks;
    return nullptr;
  }
  std::size_t k = cursor_;
  // Not the next entry's size (take() served those that are, and a bounded
  // step's smaller ones). In order:
  //   - after probation, an entry a few further on of this size: the entries
  //     between are skipped (a step without the first step's set-up);
  //   - smaller than the next entry: a bounded step from here (NOTE [ Planned
  //     arena ]), the entry taken as if its size had come;
  //   - in probation, or larger among the step's first kProbation allocations
  //     with no arena block live (so nothing is handed out yet), and not
  //     bounded: another kind of step (other shapes, an evaluation, a set-up):
  //     the base policy serves all of it, and the caller may re-plan from it;
  //   - else a fallback to the base policy for this one.
  // A smaller request could be either (the entries of a step's set-up
  // skipped, or a bounded step): skipping is taken only over kept entries
  // (the set-up's optimizer state), not over the step's own blocks, whose
  // sizes a shorter step's may meet by chance.
  bool skip = false;
  const bool smaller = k < entries_.size() && size < entries_[k].size;
  if (k >= probation_ && k < entries_.size()) {
    const std::size_t end = std::min(entries_.size(), cursor_ + kLookAhead + 1);
    std::size_t j = k;
    bool over_own = false;
    for (; j < end && entries_[j].size != size; ++j) over_own = over_own || entries_[j].slot >= 0;
    if (j < end && !(smaller && over_own)) {
      skip = true;
      for (std::size_t i = cursor_; i < j; ++i)  // skipped: their slots will not be used this step
        if (entries_[i].slot >= 0) done(entries_[i].slot);
      k = j;
    }
  }
  if (!skip) {
    if (smaller) {
      if (!bounded_) ++stats_.bounded_steps;
      bounded_ = true;
    } else {
      const bool first = k < probation_ || (k < kProbation && counts_.blocks == 0);
      if (first && !bounded_) {
        active_ = false;
        other_step_ = counts_.blocks == 0;
      }
      ++stats_.fallbacks;
      return nullptr;
    }
  }
  if (k < probation_) {  // probation: the entry's held block
    cursor_ = k + 1;
    if (cursor_ == probation_) step_matched_ = true;
    ++stats_.probation;
    held_request_ = entries_[k].held;
    return nullptr;
  }
  cursor_ = k + 1;
  const int32_t s = entries_[k].slot;
  if (s < 0) {  // not in the arena: its held block, if it has one
    ++stats_.kept_out;
    held_request_ = entries_[k].held;
    return nullptr;
  }
  if (freed_prefix_ < slots_[static_cast<std::size_t>(s)].frees_before) {  // a block planned to be gone by now is still live
    done(s);
    ++stats_.fallbacks;
    return nullptr;
  }
  return hand_out(s, requested, tag);
}

int32_t PlannedArena::live_slot_at(const void* p) const {
  const auto off = static_cast<std::size_t>(static_cast<const char*>(p) - base_);
  auto it = std::lower_bound(by_offset_.begin(), by_offset_.end(), std::pair<std::size_t, int32_t>(off, -1));
  for (; it != by_offset_.end() && it->first == off; ++it)
    if (slots_[static_cast<std::size_t>(it->second)].live) return it->second;
  throw ValueError(str("memory: ", p, " is not a live block of the planned arena (freed twice?)"));
}

std::size_t PlannedArena::size_of(const void* p) const {
  return slots_[static_cast<std::size_t>(live_slot_at(p))].size;
}

std::vector<PlannedArena::Live> PlannedArena::live_blocks() const {
  std::vector<Live> out;
  for (std::size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].live) out.push_back(Live{slots_[s].offset, slots_[s].size, slots_[s].requested, slots_[s].tag});
  std::sort(out.begin(), out.end(), [](const Live& a, const Live& b) { return a.offset < b.offset; });
  return out;
}

}  // namespace snug::memory

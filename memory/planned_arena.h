// SPDX-License-Identifier: MIT
// PlannedArena: the tape-planned part of policy=planned (memory/alloc_policy.h).
//
// NOTE [ Planned arena ]
// A training step allocates the same sizes in the same order every time. So
// the allocator records one step (between two mark_step calls: the first
// step), and at its end solves offline where each of its blocks could have
// lived in one arena: every block allocated and freed within the step gets
// an offset such that two blocks whose lifetimes overlap never overlap in
// address (greedy by size, largest first, each at the lowest offset free for
// its whole lifetime, as ggml-alloc and TFLite's planner do for inference; here
// the tape includes the backward). Blocks the step does not free (optimizer
// state, the gradients kept for the next step) are not placed: each such
// entry is served by a held block of the base policy (NOTE [ Held blocks ] in
// caching_allocator.cpp), as are the probation window's (below).
//
// Later steps replay the plan: the k-th allocation of a step takes slot k's
// offset when its size matches, with no search: a few compares and stores.
// A request that does not match (another size, or one the recorded step did
// not make) looks a few entries ahead, and otherwise falls back to best fit;
// each fallback is counted. A step's first few allocations (at most 8, and
// beyond the first at most 1/16 of the step's bytes) are left out of the
// arena: held blocks of the base policy serve them while they are checked
// against the recorded step's; a step that differs among them is another
// kind of step (other shapes: a new sequence length, an evaluation): the
// arena's memory goes back at once (its step would only hold it idle beside
// the fallback's), that step is recorded instead, and its end plans a new
// arena. After kMaxReplans such steps in a row the policy stops planning and
// its fallback serves everything (planned_base: best_fit, or expandable).
//
// A smaller step of the same tape (a shorter sequence, a smaller batch: the
// padded batches of varying length that fragment caching allocators) is not
// another kind: from its first allocation smaller than its entry (and no
// larger one before it), the step is bounded, and each of its allocations
// takes the next entry's slot if it is no larger than the slot (the slot was
// planned for the longer step's block, live over the same part of the step).
// A step larger than the plan among its first kProbation allocations, before
// any arena block is live, is another kind: it is recorded, and its plan (for
// the larger step) then serves the smaller ones. So a varying
// length re-plans only when a new longest step comes, and the arena holds
// what the longest step needs.
// Safety does not depend on the step matching: a
// slot is handed out only once every block planned to be freed before it
// has been freed (frees_before), so two live blocks never share bytes. A
// step that ends with arena blocks still live suspends the arena until they
// are freed, and the next step is then recorded for a new plan (one that put
// blocks living across steps into slots would suspend every other step).
#pragma once
#include <cstddef>
#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <snug/memory/allocator.h>

namespace snug::memory {

struct PlannedStats {
  int64_t hits = 0;              // allocations served by the arena (Counts::total_blocks)
  int64_t fallbacks = 0;         // allocations of a planned step that went to best fit
  int64_t kept_out = 0;          // allocations of entries the recorded step did not free (held blocks serve them)
  int64_t held_hits = 0;         // allocations served by a held block (probation, kept entries)
  int64_t held_blocks = 0;       // held blocks the plan keeps
  int64_t steps = 0;             // step boundaries seen
  int64_t suspended_steps = 0;   // steps that began with arena blocks still live
  int64_t replans = 0;           // plans made after the first (steps of another kind)
  int64_t probation = 0;         // a step's first allocations, served by held blocks while checked
  int64_t bounded_steps = 0;     // steps smaller than the recorded one, served by its plan
  bool gave_up = false;          // too many replans in a row: the fallback serves everything
  std::size_t arena_bytes = 0;   // the plan's arena (0 before the plan)
  std::size_t lower_bound = 0;   // the most bytes the recorded step's own blocks held at once
  int64_t planned_blocks = 0;    // blocks the plan placed
  double plan_ms = 0;            // time spent making plans (solving, and taking the arena), all of them
  // What the plan says the device needs: the arena plus the most bytes best
  // fit held at once (parameters, optimizer state, gradients kept between
  // steps), since the last reset_peak. Peak reserved over it is the policy's
  // overhead.
  std::size_t planned_peak = 0;
};

class PlannedArena {
 public:
  enum class State : uint8_t { waiting, recording, planned, gave_up };
  static constexpr int kMaxReplans = 3;
  // At most this many of a step's first allocations are checked against the
  // recorded step's before the arena serves it (they go to held blocks).
  static constexpr std::size_t kProbation = 8;
  State state() const { return state_; }

  // ---- the recorded step ----
  void start_recording();
  void record_alloc(const void* p, std::size_t size);
  void record_free(const void* p);
  // Solves the recorded step; returns the arena bytes it needs (0: nothing to plan).
  std::size_t plan();
  // Held blocks (NOTE [ Held blocks ] in caching_allocator.cpp): the
  // probation window's entries and those the recorded step did not free each
  // get one block of the base policy, kept by the plan between uses. For each:
  // its size, and the address of the recorded step's block when that is
  // still live at the plan (it is adopted: no second copy of a gradient).
  struct HeldPlan {
    std::size_t size;
    std::uintptr_t live_at;
  };
  const std::vector<HeldPlan>& held_plan() const { return held_plan_; }
  // The held block the last take() that returned nullptr asks for (-1:
  // none), cleared by the call.
  int32_t take_held_request() {
    const int32_t h = held_request_;
    held_request_ = -1;
    return h;
  }
  // The arena's memory (from the device), after plan(); detach() lets it go
  // (empty_cache with no arena block live) until the next attach.
  void attach(char* base, std::size_t bytes);
  void detach();
  char* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }

  // ---- planned steps ----
  // A new step: the plan starts over if no arena block is live, else the step is suspended.
  void next_step();
  // take() met a step of another kind with no arena block live: the caller
  // gives the arena's memory back (detach) and calls replan(), which records
  // the step from here (or gives up after kMaxReplans in a row).
  bool other_step() const { return other_step_; }
  void replan();
  // The arena block for the step's next allocation of `size`, or nullptr
  // (the base policy serves it, or the held block take_held_request() names).
  // The common case is inline, a few compares and stores: the next entry, of
  // this size, planned with every block planned to be gone by now gone, or
  // held. take_slow() has every other case.
  char* take(std::size_t size, std::size_t requested, Tag tag) {
    if (const Entry* e = next_entry(size)) {
      if (cursor_ < probation_ || e->slot < 0) {  // the recorded step's window, or not in the arena: its held block
        take_held_entry();
        held_request_ = e->held;
        return nullptr;
      }
      if (freed_prefix_ >= slots_[static_cast<std::size_t>(e->slot)].frees_before) {
        ++cursor_;
        return hand_out(e->slot, requested, tag);
      }
    }
    return take_slow(size, requested, tag);
  }
  // The allocator's fast path (NOTE [ Planned fast path ] in
  // caching_allocator.cpp), which must make no call: what take() would do
  // with an allocation of `size`, nothing changed yet. A slot (>= 0): take()
  // would hand it out, and hand_out_next(slot) does. kHeld: the next entry is
  // a held one (the probation window's, or one not in the arena) and this
  // allocation is it, entry *held; take_held_entry() then moves on as take()
  // would have. kOther: anything else, for take().
  static constexpr int32_t kHeld = -1, kOther = -2;
  int32_t ready(std::size_t size, int32_t* held) const {
    const Entry* e = next_entry(size);
    if (!e) return kOther;
    if (cursor_ < probation_ || e->slot < 0) {
      *held = e->held;
      return kHeld;
    }
    return freed_prefix_ >= slots_[static_cast<std::size_t>(e->slot)].frees_before ? e->slot : kOther;
  }
  char* hand_out_next(int32_t s, std::size_t requested, Tag tag) {
    ++cursor_;
    return hand_out(s, requested, tag);
  }
  void take_held_entry() {
    if (cursor_++ < probation_) {
      if (cursor_ == probation_) step_matched_ = true;
      ++stats_.probation;
    } else {
      ++stats_.kept_out;
    }
  }
  bool contains(const void* p) const { return p >= base_ && p < base_ + bytes_; }
  // Frees an arena block (p: contains(p)); returns its size. Throws
  // ValueError for an address that is not a live arena block.
  std::size_t give_back(const void* p, std::size_t* requested, Tag* tag) {
    int32_t s = expected_free(p);
    if (s < 0) s = live_slot_at(p);  // throws unless p is a live arena block
    return release(s, requested, tag);
  }
  // The free the plan expects next, if p is its block: in a step that
  // follows the plan it is, and its slot is warm (done() below just read
  // it), so the address table is not looked up. -1 otherwise.
  int32_t expected_free(const void* p) const {
    const auto off = static_cast<std::size_t>(static_cast<const char*>(p) - base_);
    const int32_t s = freed_prefix_ < n_free_order_ ? free_order_[freed_prefix_] : -1;
    return s >= 0 && slots_[static_cast<std::size_t>(s)].offset == off && slots_[static_cast<std::size_t>(s)].live ? s
                                                                                                                   : -1;
  }
  // Slot s's live block freed (give_back, or the caller found s with expected_free).
  std::size_t release(int32_t s, std::size_t* requested, Tag* tag) {
    const Slot& sl = uncount(s);
    *requested = sl.requested;
    *tag = sl.tag;
    if (active_) done(s);
    return sl.size;
  }
  // release(s) for the free expected_free() found: s is free_order_'s next,
  // so the done prefix moves past it at once; nothing is returned.
  void release_expected(int32_t s) {
    Slot& sl = uncount(s);
    if (!active_) return;  // (as release())
    sl.done = 1;
    pass_done(freed_prefix_ + 1);  // expected_free() found s at free_order_[freed_prefix_]
  }
  std::size_t size_of(const void* p) const;  // a live arena block's size (ValueError otherwise)

  struct Live {
    std::size_t offset, size, requested;
    Tag tag;
  };
  std::vector<Live> live_blocks() const;  // by offset
  std::size_t live_bytes() const { return static_cast<std::size_t>(counts_.bytes); }
  int64_t live_count() const { return counts_.blocks; }
  // What the arena's blocks add to the device's statistics: live now, and
  // ever handed out. The caching allocator adds them in when it reports
  // (NOTE [ Deferred peaks ] in caching_allocator.cpp), so a planned block
  // updates these few counts and nothing else.
  struct Counts {
    int64_t bytes = 0, blocks = 0, requested = 0;                    // live
    int64_t total_bytes = 0, total_blocks = 0, total_requested = 0;  // ever handed out
    std::array<int64_t, kNumTags> tag{}, tag_total{};                // bytes by tag: live, ever
  };
  const Counts& counts() const { return counts_; }
  PlannedStats stats() const {
    PlannedStats s = stats_;
    s.hits = counts_.total_blocks;
    return s;
  }
  void count_step() { ++stats_.steps; }
  void count_plan_time(double ms) { stats_.plan_ms += ms; }
  void count_fallback() { ++stats_.fallbacks; }  // a held block that was not free

 private:
  struct Entry {           // one allocation of the recorded step, in order
    std::size_t size;
    int32_t slot;          // -1: not in the arena
    int32_t held = -1;     // its held block (probation and kept entries)
  };
  // Everything about a slot in one place: a planned step touches one line per block.
  struct Slot {
    std::size_t offset, size;
    uint32_t frees_before;   // recorded frees of slots that came before this allocation
    uint8_t done = 0;        // this step: freed (or skipped)
    uint8_t live = 0;        // handed out and not freed
    Tag tag = Tag::other;
    std::size_t requested = 0;
  };
  // Slot s's live block no longer live, and out of the counts (hand_out's reverse).
  Slot& uncount(int32_t s) {
    Slot& sl = slots_[static_cast<std::size_t>(s)];
    sl.live = 0;
    counts_.bytes -= static_cast<int64_t>(sl.size);
    --counts_.blocks;
    counts_.requested -= static_cast<int64_t>(sl.requested);
    counts_.tag[static_cast<int>(sl.tag)] -= static_cast<int64_t>(sl.size);
    return sl;
  }
  // Slot s's block is freed (or will not be used this step): the prefix of
  // free_order_ that is all done grows.
  void done(int32_t s) {
    slots_[static_cast<std::size_t>(s)].done = 1;
    pass_done(freed_prefix_);
  }
  // freed_prefix_ from k (all of free_order_ before k done) past every done slot.
  void pass_done(std::size_t k) {
    while (k < n_free_order_ && slots_[static_cast<std::size_t>(free_order_[k])].done) ++k;
    freed_prefix_ = k;
  }
  char* hand_out(int32_t s, std::size_t requested, Tag tag) {
    Slot& sl = slots_[static_cast<std::size_t>(s)];
    sl.live = 1;
    sl.requested = requested;
    sl.tag = tag;
    const auto bytes = static_cast<int64_t>(sl.size);
    counts_.bytes += bytes;
    ++counts_.blocks;
    counts_.requested += static_cast<int64_t>(requested);
    counts_.tag[static_cast<int>(tag)] += bytes;
    counts_.total_bytes += bytes;
    ++counts_.total_blocks;
    counts_.total_requested += static_cast<int64_t>(requested);
    counts_.tag_total[static_cast<int>(tag)] += bytes;
    return base_ + sl.offset;
  }
  // The next entry, if an allocation of `size` is it (its size, or smaller
  // in a bounded step); nullptr otherwise or when the plan is not active.
  const Entry* next_entry(std::size_t size) const {
    if (!active_ || cursor_ >= n_entries_) return nullptr;
    const Entry& e = entries_[cursor_];
    return e.size == size || (bounded_ && size < e.size) ? &e : nullptr;
  }
  char* take_slow(std::size_t size, std::size_t requested, Tag tag);
  // The live slot whose block starts at p (ValueError if none): a binary
  // search of by_offset_, for frees out of the recorded order.
  int32_t live_slot_at(const void* p) const;

  State state_ = State::waiting;
  // Recording: each allocation's size, when it came and when it was freed
  // (positions in the step's sequence of allocations and frees).
  struct Rec {
    std::size_t size;
    int64_t t_alloc, t_free;
  };
  std::vector<Rec> rec_;
  std::unordered_map<std::uintptr_t, std::size_t> rec_live_;
  int64_t t_ = 0;

  // The plan.
  std::vector<Entry> entries_;
  std::vector<HeldPlan> held_plan_;
  int32_t held_request_ = -1;
  std::vector<Slot> slots_;
  std::vector<int32_t> free_order_;  // slots by recorded free time
  // entries_.size() and free_order_.size(), kept beside the fast path's other
  // fields (plan() sets them where it fills the vectors): a compare, not a
  // subtraction and a shift, on each planned allocation and free.
  std::size_t n_entries_ = 0, n_free_order_ = 0;
  char* base_ = nullptr;
  std::size_t bytes_ = 0;

  // This step.
  std::size_t probation_ = 0;       // the step's first entries, checked and left to held blocks
  std::size_t cursor_ = 0;          // next entry
  std::size_t freed_prefix_ = 0;    // free_order_[0, freed_prefix_) are all done
  bool active_ = false;             // false: suspended, every allocation goes to best fit
  bool other_step_ = false;         // this step began unlike the recorded one
  bool step_matched_ = false;       // this step's probation window matched the plan
  bool bounded_ = false;            // this step is smaller than the recorded one: slots take smaller blocks
  bool suspended_ = false;          // the last step began with arena blocks live
  int replans_in_row_ = 0;
  std::vector<std::pair<std::size_t, int32_t>> by_offset_;  // (offset, slot), sorted: at most one of an offset's slots is live
  Counts counts_;
  PlannedStats stats_;
};

}  // namespace snug::memory

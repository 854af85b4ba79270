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
// state, the gradients kept for the next step) stay with best fit.
//
// Later steps replay the plan: the k-th allocation of a step takes slot k's
// offset when its size matches, with no search: a few compares and stores.
// A request that does not match (another size, or one the recorded step did
// not make) looks a few entries ahead, and otherwise falls back to best fit;
// each fallback is counted. A step's first few allocations (at most 8, and
// beyond the first at most 1/16 of the step's bytes) are left out of the
// plan: the base policy serves them while they are checked against the
// recorded step's; a step that differs among them is another kind of step (other shapes: a new
// sequence length, an evaluation): the arena's memory goes back at once (its
// step would only hold it idle beside the fallback's), that step is recorded
// instead, and its end plans a new arena. After kMaxReplans such steps in a
// row the policy stops planning and its fallback serves everything
// (planned_base: best_fit, or expandable). Safety does not depend on the step matching: a
// slot is handed out only once every block planned to be freed before it
// has been freed (frees_before), so two live blocks never share bytes. A
// step that ends with arena blocks still live suspends the arena until they
// are freed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <snug/memory/allocator.h>

namespace snug::memory {

struct PlannedStats {
  int64_t hits = 0;              // allocations served by the arena
  int64_t fallbacks = 0;         // allocations of a planned step that went to best fit
  int64_t kept_out = 0;          // allocations the plan leaves to best fit (not freed in the recorded step)
  int64_t steps = 0;             // step boundaries seen
  int64_t suspended_steps = 0;   // steps that began with arena blocks still live
  int64_t replans = 0;           // plans made after the first (steps of another kind)
  int64_t probation = 0;         // a step's first allocations, served by the base policy while checked
  bool gave_up = false;          // too many replans in a row: the fallback serves everything
  std::size_t arena_bytes = 0;   // the plan's arena (0 before the plan)
  std::size_t lower_bound = 0;   // the most bytes the recorded step's own blocks held at once
  int64_t planned_blocks = 0;    // blocks the plan placed
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
  State state() const { return state_; }

  // ---- the recorded step ----
  void start_recording();
  void record_alloc(const void* p, std::size_t size);
  void record_free(const void* p);
  // Solves the recorded step; returns the arena bytes it needs (0: nothing to plan).
  std::size_t plan();
  // The sizes of the probation window's blocks (the base policy serves them).
  std::vector<std::size_t> probation_sizes() const;
  // The arena's memory (from the device), after plan(); detach() lets it go
  // (empty_cache with no arena block live) until the next attach.
  void attach(char* base, std::size_t bytes, std::size_t granule);
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
  // The arena block for the step's next allocation of `size`, or nullptr (best fit serves it).
  char* take(std::size_t size, std::size_t requested, Tag tag);
  bool contains(const void* p) const { return p >= base_ && p < base_ + bytes_; }
  // Frees an arena block; returns its size. Throws ValueError for an address that is not a live arena block.
  std::size_t give_back(const void* p, std::size_t* requested, Tag* tag);
  std::size_t size_of(const void* p) const;  // a live arena block's size (ValueError otherwise)

  struct Live {
    std::size_t offset, size, requested;
    Tag tag;
  };
  std::vector<Live> live_blocks() const;  // by offset
  std::size_t live_bytes() const { return live_bytes_; }
  int64_t live_count() const { return live_count_; }
  const PlannedStats& stats() const { return stats_; }
  void count_step() { ++stats_.steps; }

 private:
  struct Entry {           // one allocation of the recorded step, in order
    std::size_t size;
    int32_t slot;          // -1: left to best fit
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
  void done(int32_t slot);

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
  std::vector<Slot> slots_;
  std::vector<int32_t> free_order_;  // slots by recorded free time
  char* base_ = nullptr;
  std::size_t bytes_ = 0;
  unsigned granule_shift_ = 9;  // offsets are multiples of 2^this (settings.round): a shift, not a division

  // This step.
  std::size_t probation_ = 0;       // the step's first entries, checked and left to the base policy
  std::size_t cursor_ = 0;          // next entry
  std::size_t freed_prefix_ = 0;    // free_order_[0, freed_prefix_) are all done
  bool active_ = false;             // false: suspended, every allocation goes to best fit
  bool other_step_ = false;         // this step began unlike the recorded one
  bool step_matched_ = false;       // this step's first allocation matched the plan
  int replans_in_row_ = 0;
  std::vector<int32_t> slot_at_;    // by offset / granule_: the slot last handed out there
  std::size_t live_bytes_ = 0;
  int64_t live_count_ = 0;
  PlannedStats stats_;
};

}  // namespace snug::memory

// SPDX-License-Identifier: MIT
// Recomputation: checkpoint frames and the saved-tensor redirection.
//
// NOTE [ Checkpoint frames ]
// A call to checkpoint() creates a frame (its function, its inputs, the RNG
// states) and pushes a thread-local scope while fn runs. Every SavedTensor
// created inside asks pack_saved() first; in a `forward` scope the frame
// hands out slot k (the k-th tensor saved in the segment) and the tensor
// itself is not kept. The first unpack of any slot in backward recomputes the
// segment in a `recompute` scope: fn runs again on the kept inputs (detached
// leaves with the original requires_grad), with the RNG restored and grad mode
// on, so the same ops record and save in the same order, and the k-th saved
// tensor goes into slot k. The graph that recomputation records is thrown
// away (its own SavedTensors are `discarded`); backward goes on on the
// forward's graph. A released slot drops its tensor, so recomputed activations
// die as early as stored ones (NOTE [ Saved tensors die early ]); when every
// slot is released the frame drops its inputs too.
//
// Nesting: an inner checkpoint's inputs are SavedTensors created in the outer
// scope, so in the forward they become slots of the outer frame. When the
// outer segment is recomputed, the inner checkpoint call packs its inputs
// into the outer's slots again (same order) and runs its fn in a `discard`
// scope: only the values matter there, the inner frame from the forward
// recomputes its own segment later, from the inputs the outer recomputation
// produced.
#include <snug/autograd/checkpoint.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/node.h>
#include <snug/core/generator.h>
#include <snug/memory/allocator.h>

namespace snug::autograd {

namespace detail {

struct CheckpointFrame : std::enable_shared_from_this<CheckpointFrame> {
  struct Slot {
    const char* op = "?";
    Shape shape;
    DType dtype = DType::f32;
    uint64_t checksum = 0;  // verify mode only
    // The saved tensor's storage and version at save time: a tensor that is
    // not recomputed but shared (a parameter) must still not change in place
    // before backward (NOTE [ Saved tensors are detached ]).
    std::weak_ptr<Storage> storage;
    uint32_t version = 0;
    bool released = false;
    Tensor value;  // the recomputed tensor, between recomputation and release
  };

  SegmentFn fn;
  CheckpointOptions opts;
  std::vector<SavedTensor> inputs;
  std::vector<bool> input_requires_grad;
  std::vector<std::pair<Generator*, PhiloxState>> rng;
  // The autocast state the forward ran under (NOTE [ Recomputation replays autocast ]).
  bool autocast_enabled = false;
  DType autocast_dtype = DType::bf16;
  std::vector<Slot> slots;
  size_t released_slots = 0;
  bool recomputed = false, recomputing = false;
  // Selective recomputation: outputs of ops the policy saves, in forward order.
  std::vector<std::vector<Tensor>> kept;
  std::vector<std::vector<uint32_t>> kept_versions;
  std::vector<const char*> kept_ops;
};

}  // namespace detail

namespace {

using detail::CheckpointFrame;

enum class Mode : uint8_t { forward, recompute, discard };

struct Scope {
  CheckpointFrame* frame = nullptr;  // null in discard scopes
  Mode mode = Mode::discard;
  size_t cursor = 0;       // recompute: the next slot to fill
  size_t kept_cursor = 0;  // recompute: the next kept output to hand back
  size_t extra_saves = 0;  // recompute: saves beyond the forward's count
  std::optional<size_t> first_mismatch;
  std::string mismatch_detail;
};

thread_local std::vector<Scope> t_scopes;
thread_local int t_recompute_depth = 0;

std::atomic<int64_t> g_recompute_segments{0};
std::atomic<int64_t> g_recompute_ns{0};

class ScopePush {
 public:
  ScopePush(CheckpointFrame* frame, Mode mode) {
    Scope s;
    s.frame = frame;
    s.mode = mode;
    t_scopes.push_back(std::move(s));
  }
  ~ScopePush() { t_scopes.pop_back(); }
  ScopePush(const ScopePush&) = delete;
  ScopePush& operator=(const ScopePush&) = delete;
  Scope& scope() { return t_scopes.back(); }
};

// Sets the generators to the frame's states for its lifetime, then puts back
// where they were, so recomputation in backward does not move the RNG stream
// that the next forward will draw from.
class RngReplay {
 public:
  explicit RngReplay(const std::vector<std::pair<Generator*, PhiloxState>>& states) {
    for (auto& [g, s] : states) {
      saved_.emplace_back(g, g->get_state());
      g->set_state(s);
    }
  }
  ~RngReplay() {
    for (auto& [g, s] : saved_) g->set_state(s);
  }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  std::vector<std::pair<Generator*, PhiloxState>> saved_;
};

// FNV-1a over the values (as f64, which holds every supported dtype's values
// exactly) in row-major order: equal tensors give equal sums whatever their strides.
uint64_t checksum(const Tensor& t) {
  uint64_t h = 1469598103934665603ULL;
  for (double v : t.to_vector<double>()) {
    unsigned char b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    for (unsigned char c : b) h = (h ^ c) * 1099511628211ULL;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void recompute(CheckpointFrame& f) {
  SNUG_CHECK(!f.recomputing, AutogradError, f.opts.name,
             ": a saved tensor of the segment was needed while the segment itself was being recomputed");
  f.recomputing = true;
  struct Reset {
    CheckpointFrame& f;
    ~Reset() { f.recomputing = false; }
  } reset{f};
  const auto t0 = std::chrono::steady_clock::now();
  ++t_recompute_depth;
  struct Depth {
    ~Depth() { --t_recompute_depth; }
  } depth;

  // Inputs first: unpacking them may recompute an enclosing segment.
  std::vector<Tensor> ins;
  ins.reserve(f.inputs.size());
  for (size_t i = 0; i < f.inputs.size(); ++i) {
    Tensor t = f.inputs[i].unpack(f.opts.name.c_str());
    if (t.defined()) {
      t = t.detach();
      if (f.input_requires_grad[i]) t.requires_grad_(true);
    }
    ins.push_back(std::move(t));
  }

  {
    RngReplay rng(f.rng);
    // NOTE [ Recomputation replays autocast ]
    // Which dtype an op computes and saves in depends on the autocast scope
    // around it, so the segment must run again under the scope its forward
    // saw, not the one backward happens to run in: the usual pattern runs
    // the forward inside AutocastGuard and backward() outside it, and a
    // recomputation in f32 would save f32 tensors where the forward's graph
    // expects bf16 ones. Like the RNG state, the scope is captured when the
    // segment starts; a region inside fn that disables autocast does so again
    // on its own, and a nested segment replays the state it started under.
    AutocastGuard autocast_as_forward(f.autocast_dtype, f.autocast_enabled);
    GradModeGuard record(true);  // the engine runs with recording off
    memory::TagScope tag(memory::Tag::activation);
    ScopePush push(&f, Mode::recompute);
    std::vector<Tensor> outs = f.fn(ins);
    Scope& s = push.scope();
    SNUG_CHECK(s.cursor == f.slots.size() && s.extra_saves == 0, AutogradError, f.opts.name,
               ": recomputing the segment saved ", s.cursor + s.extra_saves,
               " tensors for backward, but its forward "
               "saved ",
               f.slots.size(),
               "; the segment is not deterministic (it must depend only on its inputs, "
               "parameters and the RNG; pass other generators in CheckpointOptions::generators)");
    SNUG_CHECK(s.kept_cursor == f.kept.size(), AutogradError, f.opts.name, ": recomputing the segment used ",
               s.kept_cursor, " of the ", f.kept.size(),
               " op outputs its forward kept; the segment is not "
               "deterministic");
    if (s.first_mismatch) {
      const auto& slot = f.slots[*s.first_mismatch];
      throw AutogradError(str(f.opts.name, ": recomputation differs from the forward at saved tensor #",
                              *s.first_mismatch, " (saved by '", slot.op, "'): ", s.mismatch_detail,
                              "; the segment is not deterministic"));
    }
  }
  // Every kept output was handed back (or the recomputation would have
  // failed above); what is left of them is referenced by the slots only.
  f.kept.clear();
  f.kept_versions.clear();
  f.kept_ops.clear();
  f.recomputed = true;
  if (t_recompute_depth == 1) {
    const auto t1 = std::chrono::steady_clock::now();
    g_recompute_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }
  ++g_recompute_segments;
}

}  // namespace

namespace detail {

bool pack_saved(const Tensor& t, const char* op, std::shared_ptr<CheckpointFrame>& frame, size_t& slot) {
  if (t_scopes.empty()) return false;
  Scope& s = t_scopes.back();
  switch (s.mode) {
    case Mode::discard:
      return true;
    case Mode::forward: {
      CheckpointFrame& f = *s.frame;
      CheckpointFrame::Slot sl;
      sl.op = op;
      sl.shape = t.shape();
      sl.dtype = t.dtype();
      if (f.opts.verify) sl.checksum = checksum(t);
      sl.storage = t.storage();
      sl.version = t.version();
      slot = f.slots.size();
      f.slots.push_back(std::move(sl));
      frame = f.shared_from_this();
      return true;
    }
    case Mode::recompute: {
      CheckpointFrame& f = *s.frame;
      const size_t k = s.cursor;
      if (k >= f.slots.size()) {
        ++s.extra_saves;
        return true;
      }
      ++s.cursor;
      CheckpointFrame::Slot& sl = f.slots[k];
      auto original = sl.storage.lock();
      SNUG_CHECK(!(original && original == t.storage() && t.version() != sl.version), AutogradError, "backward of '",
                 op, "': a tensor it saved (shape ", shape_str(t.shape()), ", in ", f.opts.name,
                 ") was modified by an in-place operation after the forward (version ", sl.version, ", now ",
                 t.version(), "); clone it before modifying, or modify it out of place");
      if (!s.first_mismatch) {
        std::string why;
        if (t.shape() != sl.shape || t.dtype() != sl.dtype)
          why = str("shape ", shape_str(t.shape()), " ", dtype_name(t.dtype()), ", the forward saved ",
                    shape_str(sl.shape), " ", dtype_name(sl.dtype));
        else if (f.opts.verify && std::strcmp(op, sl.op) != 0)
          why = str("it was saved by '", op, "' this time");
        else if (f.opts.verify && checksum(t) != sl.checksum)
          why = str("same shape ", shape_str(t.shape()), " and dtype ", dtype_name(t.dtype()),
                    ", but the values differ (checksum ", hex(checksum(t)), ", the forward's ", hex(sl.checksum), ")");
        if (!why.empty()) {
          s.first_mismatch = k;
          s.mismatch_detail = why;
        }
      }
      if (!sl.released) sl.value = t.detach();
      return true;
    }
  }
  return false;
}

Tensor unpack_saved(CheckpointFrame& f, size_t slot, const char* op) {
  if (!f.recomputed) recompute(f);
  const CheckpointFrame::Slot& sl = f.slots.at(slot);
  SNUG_CHECK(sl.value.defined(), AutogradError, "backward of '", op, "': its saved tensor #", slot, " of ", f.opts.name,
             " is gone (released, or not produced by the recomputation)");
  return sl.value;
}

void release_saved(CheckpointFrame& f, size_t slot) {
  CheckpointFrame::Slot& sl = f.slots.at(slot);
  if (sl.released) return;
  sl.released = true;
  sl.value = Tensor();
  // Once nothing can ask for a recomputation, the inputs are dead weight.
  if (++f.released_slots == f.slots.size()) {
    for (auto& in : f.inputs) in.release();
    f.kept.clear();
  }
}

int selective_begin(const char* op, std::vector<Tensor>& hit) {
  if (t_scopes.empty()) return 0;
  Scope& s = t_scopes.back();
  if (s.mode == Mode::discard) return 0;
  CheckpointFrame& f = *s.frame;
  if (!f.opts.policy || f.opts.policy(op) != RecomputeChoice::save) return 0;
  if (s.mode == Mode::forward) return 2;
  const size_t k = s.kept_cursor++;
  SNUG_CHECK(k < f.kept.size() && std::strcmp(f.kept_ops[k], op) == 0, AutogradError, f.opts.name,
             ": recomputation asked for a kept output of '", op, "' (#", k,
             ") that the forward did not keep; "
             "the segment is not deterministic");
  for (size_t i = 0; i < f.kept[k].size(); ++i)
    SNUG_CHECK(!f.kept[k][i].defined() || f.kept[k][i].version() == f.kept_versions[k][i], AutogradError, f.opts.name,
               ": the output of '", op,
               "' that the policy keeps was modified in place after the "
               "forward; let the policy recompute '",
               op, "', or avoid the in-place op");
  // Handed over: from here the recomputed slots hold these tensors, and they
  // die when those slots are released.
  hit = std::move(f.kept[k]);
  f.kept[k].clear();
  return 1;
}

void selective_store(const char* op, const std::vector<Tensor>& outs) {
  CheckpointFrame& f = *t_scopes.back().frame;
  // Detached aliases: the outputs themselves will get grad_fns whose saved
  // tensors point back at this frame, and holding them here would make a
  // cycle that never frees if backward never runs.
  std::vector<Tensor> aliases;
  std::vector<uint32_t> versions;
  for (const Tensor& t : outs) {
    aliases.push_back(t.defined() ? t.detach() : Tensor());
    versions.push_back(t.defined() ? t.version() : 0);
  }
  f.kept.push_back(std::move(aliases));
  f.kept_versions.push_back(std::move(versions));
  f.kept_ops.push_back(op);
}

}  // namespace detail

RecomputePolicy save_ops(const std::vector<std::string>& ops) {
  for (const auto& op : ops) {
    bool known = false;
    for (const char* s : kSelectiveOps) known = known || op == s;
    SNUG_CHECK(known, ValueError, "save_ops: '", op,
               "' never asks a recomputation policy; the ops that do are "
               "matmul, linear, layer_norm, causal_softmax, causal_attention and attention (all others are recomputed)");
  }
  return [ops](const char* op) {
    for (const auto& o : ops)
      if (o == op) return RecomputeChoice::save;
    return RecomputeChoice::recompute;
  };
}

std::vector<Tensor> checkpoint(SegmentFn fn, const std::vector<Tensor>& inputs, const CheckpointOptions& opts) {
  SNUG_CHECK(static_cast<bool>(fn), ValueError, opts.name, ": the segment function is empty");
  for (Generator* g : opts.generators)
    SNUG_CHECK(g != nullptr, ValueError, opts.name, ": CheckpointOptions::generators holds a null generator");
  // Nothing will be recorded, so nothing would be saved: a plain call.
  if (!is_grad_enabled()) return fn(inputs);

  if (!t_scopes.empty() && t_scopes.back().mode != Mode::forward) {
    // Recomputing an enclosing segment (see NOTE [ Checkpoint frames ]): pack
    // the inputs so the enclosing frame's slots line up with its forward,
    // then only the values matter.
    std::vector<SavedTensor> packed;
    packed.reserve(inputs.size());
    for (const Tensor& t : inputs) packed.emplace_back(t, "checkpoint");
    ScopePush push(nullptr, Mode::discard);
    return fn(inputs);
  }

  auto f = std::make_shared<CheckpointFrame>();
  f->fn = std::move(fn);
  f->opts = opts;
  f->inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    f->inputs.emplace_back(t, "checkpoint");
    f->input_requires_grad.push_back(t.defined() && t.requires_grad());
  }
  f->rng.emplace_back(&default_generator(), default_generator().get_state());
  for (Generator* g : opts.generators)
    if (g != &default_generator()) f->rng.emplace_back(g, g->get_state());
  f->autocast_enabled = autocast::is_enabled();
  f->autocast_dtype = autocast::dtype();
  ScopePush push(f.get(), Mode::forward);
  return f->fn(inputs);
}

RecomputeStats recompute_stats() {
  RecomputeStats s;
  s.segments = g_recompute_segments.load();
  s.ms = static_cast<double>(g_recompute_ns.load()) / 1e6;
  return s;
}

void reset_recompute_stats() {
  g_recompute_segments = 0;
  g_recompute_ns = 0;
}

}  // namespace snug::autograd

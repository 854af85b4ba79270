// SPDX-License-Identifier: MIT
// Attention through cuDNN's fused flash attention (the graph API, through its
// header-only C++ frontend): the path CudaBackend::attention takes for bf16
// and f16 when cuDNN serves the case (cuda/sdpa_plan.h says which).
//
// NOTE [ Attention through cuDNN ]
// The graph reads q, k and v where they lie in the packed (B, T, 3C) qkv, as
// (B, H, T, D) tensors with strides (3TC, D, 3C, 1): nothing is packed or
// converted. It writes y as (B, H, T, D) with strides (TC, D, C, 1), which is
// y's own (B, T, C) layout, and the softmax statistics, the logsumexp of each
// row's scaled scores (B, H, T, 1) in f32, into lse: what the backward needs,
// and all it keeps (not the scores). The backward graph reads qkv, y, lse and
// gy and writes dq, dk and dv into their thirds of dqkv the same way. One
// graph is built per (shape, dtype, causal, scale, device) and direction, the
// first time it is met, and cached for the process (SdpaGraphCache); a shape
// cuDNN refuses is remembered, and goes to the kernels from then on.
//
// A key padding mask goes to cuDNN as sequence lengths (its padding mask:
// seq_len_q = T for every row, so every query row stays and sees the keys
// below seq_len_kv = L_b), which says the same as ours when each row of the
// mask is L_b >= 1 valid keys followed by padding (SdpaPadding::suffix, what
// data::pad_collate makes). The mask's values are read back once to know
// that (cudnn_key_padding; the answer is kept for the next layer's call).
//
// Not served here, so they take today's kernels (cuda/attention.cpp): f32;
// head sizes that are not a multiple of 8 up to 128; GPUs before sm 80; key
// padding of any other pattern (inside a row, or a row with no key, which
// must give zeros); general masks; dropout inside attention: cuDNN's dropout
// draws from its own Philox mapping, not snug's stream (core/philox.h), so its
// masks would not match the CPU's; with dropout, attention is the composed
// ops (the block's dropout after attention is ours either way). The profiler
// names the path of each call: "attention[cudnn]" or "attention[kernels]"
// (and the _backward twins).
#include <snug/cuda/sdpa_plan.h>

#include <snug/core/backend.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/cuda/cudnn_util.h>
#include <snug/memory/allocator.h>

#include <algorithm>
#include <mutex>

#if defined(SNUG_HAVE_CUDNN_FRONTEND)
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cudnn_frontend.h>

// The frontend is built with dynamic loading (cuda/CMakeLists.txt) and finds
// cuDNN's entry points through this handle: the library the plugin already
// links, taken by name without loading anything new.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace snug::cuda {

#if defined(SNUG_HAVE_CUDNN_FRONTEND)
namespace {

bool frontend_ready() {
  static const bool ready = [] {
    for (const char* name : {"libcudnn.so.9", "libcudnn.so"})
      if (void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) {
        cudnn_frontend::cudnn_dlhandle = h;
        return true;
      }
    return false;
  }();
  return ready;
}

namespace fe = cudnn_frontend;

// The uids the variant packs bind.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeqQ, kSeqKV };

SdpaCaps caps_of(int device) {
  static std::mutex mu;
  static std::unordered_map<int, SdpaCaps> known;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(device); it != known.end()) return it->second;
  SdpaCaps c;
  c.frontend = frontend_ready();
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess)
    c.sm = major * 10 + minor;
  c.cudnn_version = static_cast<int>(cudnnGetVersion());
  known.emplace(device, c);
  return c;
}

fe::DataType_t fe_type(DType t) { return t == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

// A third of a packed (B, T, 3C) tensor (q, k or v; dq, dk or dv) as
// (B, H, T, D): the same strides for each (which third it is, is the pointer
// bound at execution, part() below).
std::vector<int64_t> packed_strides(const SdpaKey& k) {
  const int64_t C = k.H * k.D;
  return {k.T * 3 * C, k.D, 3 * C, 1};
}
std::shared_ptr<fe::graph::Tensor_attributes> qkv_part(fe::graph::Graph& g, const SdpaKey& k, int64_t uid,
                                                       const char* name) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({k.B, k.H, k.T, k.D})
                      .set_stride(packed_strides(k)));
}
// A (B, T, C) tensor as (B, H, T, D).
std::vector<int64_t> btc_strides(const SdpaKey& k) {
  const int64_t C = k.H * k.D;
  return {k.T * C, k.D, C, 1};
}
std::vector<int64_t> stats_strides(const SdpaKey& k) { return {k.H * k.T, k.T, 1, 1}; }
// The sequence lengths of a padded call: (B, 1, 1, 1) i32.
std::shared_ptr<fe::graph::Tensor_attributes> seq_lens(fe::graph::Graph& g, const SdpaKey& k, int64_t uid,
                                                       const char* name) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({k.B, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT32));
}

// Builds and checks the graph on this handle; nullptr when cuDNN does not
// support it (the caller falls back; the reason is cuDNN's message).
std::shared_ptr<fe::graph::Graph> finish(std::shared_ptr<fe::graph::Graph> g, cudnnHandle_t h) {
  if (!g->validate().is_good()) return nullptr;
  if (!g->build_operation_graph(h).is_good()) return nullptr;
  if (!g->create_execution_plans({fe::HeurMode_t::A}).is_good()) return nullptr;
  if (!g->check_support(h).is_good()) return nullptr;
  if (!g->build_plans(h).is_good()) return nullptr;
  return g;
}

std::shared_ptr<fe::graph::Graph> make_graph(const SdpaKey& k) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(k.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = qkv_part(*g, k, kQ, "q");
  auto kk = qkv_part(*g, k, kK, "k");
  auto v = qkv_part(*g, k, kV, "v");
  if (!k.backward) {
    auto attrs = fe::graph::SDPA_attributes()
                     .set_name("sdpa")
                     .set_generate_stats(true)
                     .set_attn_scale(static_cast<float>(k.scale))
                     .set_causal_mask(k.causal);
    if (k.padded)
      attrs.set_padding_mask(true)
          .set_seq_len_q(seq_lens(*g, k, kSeqQ, "seq_q"))
          .set_seq_len_kv(seq_lens(*g, k, kSeqKV, "seq_kv"));
    auto [o, stats] = g->sdpa(q, kk, v, attrs);
    o->set_output(true).set_uid(kO).set_dim({k.B, k.H, k.T, k.D}).set_stride(btc_strides(k));
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({k.B, k.H, k.T, 1})
        .set_stride(stats_strides(k));
  } else {
    auto o = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("o")
                           .set_uid(kO)
                           .set_dim({k.B, k.H, k.T, k.D})
                           .set_stride(btc_strides(k)));
    auto d_o = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("do")
                             .set_uid(kDO)
                             .set_dim({k.B, k.H, k.T, k.D})
                             .set_stride(btc_strides(k)));
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("stats")
                               .set_uid(kStats)
                               .set_dim({k.B, k.H, k.T, 1})
                               .set_stride(stats_strides(k))
                               .set_data_type(fe::DataType_t::FLOAT));
    auto attrs = fe::graph::SDPA_backward_attributes()
                     .set_name("sdpa_backward")
                     .set_attn_scale(static_cast<float>(k.scale))
                     .set_causal_mask(k.causal);
    if (k.padded)
      attrs.set_padding_mask(true)
          .set_seq_len_q(seq_lens(*g, k, kSeqQ, "seq_q"))
          .set_seq_len_kv(seq_lens(*g, k, kSeqKV, "seq_kv"));
    auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, d_o, stats, attrs);
    const std::vector<int64_t> packed = packed_strides(k);  // into dqkv's thirds
    dq->set_output(true).set_uid(kDQ).set_dim({k.B, k.H, k.T, k.D}).set_stride(packed);
    dk->set_output(true).set_uid(kDK).set_dim({k.B, k.H, k.T, k.D}).set_stride(packed);
    dv->set_output(true).set_uid(kDV).set_dim({k.B, k.H, k.T, k.D}).set_stride(packed);
  }
  return g;
}

SdpaGraphCache<fe::graph::Graph>& graphs() {
  static SdpaGraphCache<fe::graph::Graph> cache;
  return cache;
}

// Runs the graph for key on qkv's device and current stream; false when cuDNN
// refused to build it (the caller falls back).
bool run(const SdpaKey& key, std::unordered_map<int64_t, void*> pack) {
  OnDevice guard(key.device);
  LockedCudnn handle = cudnn_for(key.device, guard.stream());
  std::shared_ptr<fe::graph::Graph> g = graphs().get(key, [&] { return finish(make_graph(key), handle.h); });
  if (!g) return false;
  const int64_t ws = g->get_workspace_size();
  Tensor workspace;
  if (ws > 0) {
    memory::TagScope tag(memory::Tag::workspace);
    workspace = empty({(ws + 3) / 4}, TensorOptions(DType::f32, Device(DeviceType::CUDA, key.device)));
  }
  fe::error_t st = g->execute(handle.h, pack, workspace.defined() ? workspace.data_ptr() : nullptr);
  SNUG_CHECK(st.is_good(), DeviceError, "cuDNN attention: executing the graph failed: ", st.get_message());
  return true;
}

char* part(const Tensor& packed, int p, int64_t C) {
  return static_cast<char*>(packed.data_ptr()) + static_cast<std::ptrdiff_t>(p * C) * dtype_size(packed.dtype());
}

}  // namespace

SdpaChoice cudnn_attention_choice(const SdpaKey& key, SdpaPadding key_padding, bool general_mask) {
  return choose_sdpa(key, key_padding, general_mask, caps_of(key.device));
}

// The last mask classified, kept with its answer: a step's layers share one mask.
SdpaPaddingInfo cudnn_key_padding(const Tensor& key_padding) {
  // Never destroyed: device tensors must not be freed by static destruction, after the runtime.
  struct Last {
    std::mutex mu;
    Tensor mask;  // held, so no other tensor can take its storage's place
    uint32_t version = 0;
    SdpaPaddingInfo info;
  };
  static Last* const state = new Last;
  std::lock_guard<std::mutex> lock(state->mu);
  const Tensor& last = state->mask;
  if (last.defined() && last.storage() == key_padding.storage() && last.offset() == key_padding.offset() &&
      last.shape() == key_padding.shape() && last.strides() == key_padding.strides() &&
      state->version == key_padding.version())
    return state->info;
  const int64_t B = key_padding.size(0), T = key_padding.size(1);
  const Tensor host = raw::contiguous(raw::to_device(key_padding, kCPU));  // waits for the stream: once per mask
  std::vector<int32_t> lens;
  SdpaPaddingInfo info;
  info.kind = classify_key_padding(static_cast<const bool*>(host.data_ptr()), B, T, &lens);
  if (info.kind == SdpaPadding::suffix) {
    const Tensor q = full({B}, double(T), TensorOptions(DType::i32, kCPU));
    Tensor kv = empty({B}, TensorOptions(DType::i32, kCPU));
    std::copy(lens.begin(), lens.end(), static_cast<int32_t*>(kv.data_ptr()));
    info.seq_q = raw::to_device(q, key_padding.device());
    info.seq_kv = raw::to_device(kv, key_padding.device());
  }
  state->mask = key_padding, state->version = key_padding.version(), state->info = info;
  return info;
}

namespace {
void add_padding(std::unordered_map<int64_t, void*>& pack, const SdpaKey& key, const SdpaPaddingInfo& padding) {
  if (!key.padded) return;
  SNUG_CHECK(padding.kind == SdpaPadding::suffix, DeviceError,
             "cuDNN attention: a padded call without the mask's sequence lengths");
  pack[kSeqQ] = padding.seq_q.data_ptr();
  pack[kSeqKV] = padding.seq_kv.data_ptr();
}
}  // namespace

bool cudnn_attention_forward(const SdpaKey& key, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                             const SdpaPaddingInfo& padding) {
  const int64_t C = key.H * key.D;
  std::unordered_map<int64_t, void*> pack{{kQ, part(qkv, 0, C)},
                                          {kK, part(qkv, 1, C)},
                                          {kV, part(qkv, 2, C)},
                                          {kO, y.data_ptr()},
                                          {kStats, lse.data_ptr()}};
  add_padding(pack, key, padding);
  return run(key, pack);
}

bool cudnn_attention_backward(const SdpaKey& key, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                              const Tensor& gy, const Tensor& dqkv, const SdpaPaddingInfo& padding) {
  const int64_t C = key.H * key.D;
  std::unordered_map<int64_t, void*> pack{{kQ, part(qkv, 0, C)},
                                          {kK, part(qkv, 1, C)},
                                          {kV, part(qkv, 2, C)},
                                          {kO, y.data_ptr()},
                                          {kDO, gy.data_ptr()},
                                          {kStats, lse.data_ptr()},
                                          {kDQ, part(dqkv, 0, C)},
                                          {kDK, part(dqkv, 1, C)},
                                          {kDV, part(dqkv, 2, C)}};
  add_padding(pack, key, padding);
  return run(key, pack);
}

#else  // built without cuDNN's frontend: every call takes the kernels

SdpaChoice cudnn_attention_choice(const SdpaKey& key, SdpaPadding key_padding, bool general_mask) {
  return choose_sdpa(key, key_padding, general_mask, SdpaCaps{});
}
SdpaPaddingInfo cudnn_key_padding(const Tensor&) { return {SdpaPadding::other, Tensor(), Tensor()}; }
bool cudnn_attention_forward(const SdpaKey&, const Tensor&, const Tensor&, const Tensor&, const SdpaPaddingInfo&) {
  return false;
}
bool cudnn_attention_backward(const SdpaKey&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const SdpaPaddingInfo&) {
  return false;
}

#endif

}  // namespace snug::cuda

// SPDX-License-Identifier: MIT
// The host side of attention through cuDNN's fused flash attention (NOTE [
// Attention through cuDNN ] in cuda/attention_cudnn.cpp): which path a call
// takes, and the cache of built graphs, keyed by everything a graph is built
// for. Plain C++ (no CUDA or cuDNN header), so the CPU tests check the keys
// and the choices without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <snug/core/dtype.h>
#include <snug/core/tensor.h>

namespace snug::cuda {

// One attention call as a graph sees it: qkv (B, T, 3C) packed, C = H * D.
struct SdpaKey {
  int64_t B = 0, T = 0, H = 0, D = 0;
  DType dtype = DType::f32;
  bool causal = false;
  bool backward = false;
  bool padded = false;  // a key padding mask, as each row's count of valid keys (SdpaPadding::suffix)
  double scale = 1.0;
  int device = 0;
  bool operator==(const SdpaKey&) const = default;
};

struct SdpaKeyHash {
  std::size_t operator()(const SdpaKey& k) const {
    std::size_t h = 0;
    auto mix = [&h](std::size_t v) { h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2); };
    for (int64_t v : {k.B, k.T, k.H, k.D}) mix(std::hash<int64_t>{}(v));
    mix(static_cast<std::size_t>(k.dtype));
    mix(static_cast<std::size_t>(k.causal) | static_cast<std::size_t>(k.backward) << 1 |
        static_cast<std::size_t>(k.padded) << 2);
    mix(std::hash<double>{}(k.scale));
    mix(std::hash<int>{}(k.device));
    return h;
  }
};

// What a device and this build offer.
struct SdpaCaps {
  bool frontend = false;  // built with cuDNN's C++ frontend (SNUG_HAVE_CUDNN_FRONTEND)
  int sm = 0;             // compute capability, major * 10 + minor
  int cudnn_version = 0;  // cudnnGetVersion(), e.g. 91900
};

enum class SdpaPath : uint8_t { cudnn, kernels };

// A key padding mask as cuDNN can take it: its padding mask masks the keys of
// batch row b from a count L_b on (seq_len_kv; every query row stays, with
// seq_len_q = T). So cuDNN serves a mask whose every row is L_b valid keys
// followed by T - L_b padding ones, L_b >= 1 (a row that saw no key must give
// zeros, which cuDNN does not promise): `suffix`. Any other pattern: `other`.
enum class SdpaPadding : uint8_t { none, suffix, other };

// pad: the (B, T) mask's values, row-major, true = padding. lens receives
// each row's L_b when the answer is suffix.
inline SdpaPadding classify_key_padding(const bool* pad, int64_t B, int64_t T, std::vector<int32_t>* lens) {
  lens->assign(static_cast<std::size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    const bool* row = pad + b * T;
    int64_t L = 0;
    while (L < T && !row[L]) ++L;
    if (L == 0) return SdpaPadding::other;
    for (int64_t j = L; j < T; ++j)
      if (!row[j]) return SdpaPadding::other;
    (*lens)[static_cast<std::size_t>(b)] = static_cast<int32_t>(L);
  }
  return SdpaPadding::suffix;
}

struct SdpaChoice {
  SdpaPath path = SdpaPath::kernels;
  const char* why = "";  // for the profiler and the docs: why not cuDNN, or "" when cuDNN
};

// cuDNN's fused flash attention takes bf16 and f16 (not f32), head sizes that
// are multiples of 8 up to 128, on Ampere and later (sm 80), from cuDNN 9.0
// (the backward's and the stats' forms this code builds), and a key padding
// mask of the suffix form (above). Other key padding and a general mask stay
// with today's kernels (NOTE [ Attention through cuDNN ]).
inline SdpaChoice choose_sdpa(const SdpaKey& k, SdpaPadding key_padding, bool general_mask, const SdpaCaps& caps) {
  if (!caps.frontend) return {SdpaPath::kernels, "built without cuDNN's frontend"};
  if (k.dtype != DType::bf16 && k.dtype != DType::f16) return {SdpaPath::kernels, "not bf16 or f16"};
  if (k.D % 8 != 0 || k.D > 128) return {SdpaPath::kernels, "head size not a multiple of 8 up to 128"};
  if (caps.sm < 80) return {SdpaPath::kernels, "GPU older than sm 80"};
  if (caps.cudnn_version < 90000) return {SdpaPath::kernels, "cuDNN older than 9.0"};
  if (general_mask) return {SdpaPath::kernels, "a general mask"};
  if (key_padding == SdpaPadding::other)
    return {SdpaPath::kernels, "key padding that is not a suffix of each row's keys (or a row with none)"};
  return {SdpaPath::cudnn, ""};
}

// Built graphs by key, kept for the process (a training run has a handful of
// shapes). A graph that failed to build is remembered too (as nullptr), so a
// shape cuDNN refuses is asked once and then goes to the kernels.
template <class Graph>
class SdpaGraphCache {
 public:
  // The cached graph for k, else make() once (which may return nullptr).
  template <class Make>
  std::shared_ptr<Graph> get(const SdpaKey& k, Make make) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = graphs_.find(k); it != graphs_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
    std::shared_ptr<Graph> g = make();
    graphs_.emplace(k, g);
    return g;
  }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  std::size_t size() const { return graphs_.size(); }

 private:
  std::mutex mu_;
  std::unordered_map<SdpaKey, std::shared_ptr<Graph>, SdpaKeyHash> graphs_;
  int64_t hits_ = 0, misses_ = 0;
};

// cuda/attention_cudnn.cpp (the CUDA plugin). The choice for a call on its
// device (a build without the frontend always says kernels). The runs take
// contiguous tensors of the key's dtype, lse f32 (B, H, T), and return false
// when cuDNN refused to build the graph (the caller takes the kernels).
SdpaChoice cudnn_attention_choice(const SdpaKey& key, SdpaPadding key_padding, bool general_mask);
// A key padding mask (B, T) bool on the GPU, classified (classify_key_padding)
// from its values, read back once per mask: the last mask's answer is kept
// (with the mask, and its version) for the next call, so the layers of a step
// that share one mask read it once. seq_q and seq_kv: (B) i32 on the GPU,
// T and each row's count of valid keys, when suffix.
struct SdpaPaddingInfo {
  SdpaPadding kind = SdpaPadding::none;
  Tensor seq_q, seq_kv;
};
SdpaPaddingInfo cudnn_key_padding(const Tensor& key_padding);
bool cudnn_attention_forward(const SdpaKey& key, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                             const SdpaPaddingInfo& padding = {});
bool cudnn_attention_backward(const SdpaKey& key, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                              const Tensor& gy, const Tensor& dqkv, const SdpaPaddingInfo& padding = {});

}  // namespace snug::cuda

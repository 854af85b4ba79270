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

#include <snug/core/dtype.h>

namespace snug {
class Tensor;
}

namespace snug::cuda {

// One attention call as a graph sees it: qkv (B, T, 3C) packed, C = H * D.
struct SdpaKey {
  int64_t B = 0, T = 0, H = 0, D = 0;
  DType dtype = DType::f32;
  bool causal = false;
  bool backward = false;
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
    mix(static_cast<std::size_t>(k.causal) | static_cast<std::size_t>(k.backward) << 1);
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

struct SdpaChoice {
  SdpaPath path = SdpaPath::kernels;
  const char* why = "";  // for the profiler and the docs: why not cuDNN, or "" when cuDNN
};

// cuDNN's fused flash attention takes bf16 and f16 (not f32), head sizes that
// are multiples of 8 up to 128, on Ampere and later (sm 80), from cuDNN 9.0
// (the backward's and the stats' forms this code builds). A key padding mask
// or a general one stays with today's kernels (NOTE [ Attention through cuDNN ]).
inline SdpaChoice choose_sdpa(const SdpaKey& k, bool key_padding, bool general_mask, const SdpaCaps& caps) {
  if (!caps.frontend) return {SdpaPath::kernels, "built without cuDNN's frontend"};
  if (k.dtype != DType::bf16 && k.dtype != DType::f16) return {SdpaPath::kernels, "not bf16 or f16"};
  if (k.D % 8 != 0 || k.D > 128) return {SdpaPath::kernels, "head size not a multiple of 8 up to 128"};
  if (caps.sm < 80) return {SdpaPath::kernels, "GPU older than sm 80"};
  if (caps.cudnn_version < 90000) return {SdpaPath::kernels, "cuDNN older than 9.0"};
  if (general_mask) return {SdpaPath::kernels, "a general mask"};
  if (key_padding) return {SdpaPath::kernels, "key padding"};
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
SdpaChoice cudnn_attention_choice(const SdpaKey& key, bool key_padding, bool general_mask);
bool cudnn_attention_forward(const SdpaKey& key, const Tensor& qkv, const Tensor& y, const Tensor& lse);
bool cudnn_attention_backward(const SdpaKey& key, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                              const Tensor& gy, const Tensor& dqkv);

}  // namespace snug::cuda

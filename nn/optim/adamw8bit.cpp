// SPDX-License-Identifier: MIT
#include <snug/nn/optim/adamw8bit.h>

#include <algorithm>
#include <cmath>

#include <snug/autograd/grad_mode.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug::nn::optim {

namespace {

// NOTE [ Dynamic quantization map ]: after an optional sign, a value is
// 10^-e * f with e = 0..E (the decimal exponent; more exponent means fewer
// bits left) and f one of 2^b evenly spaced fractions in (0.1, 1] (the top
// of each of 2^b bins), b = (bits left) - 1 - e. Signed: 7 bits after the
// sign, e = 0..6, 64 + 32 + ... + 1 = 127 magnitudes, mirrored, plus 0 and
// 1e-7 (to fill 256). Unsigned: 8 bits, e = 0..7, 255 magnitudes plus 0.
// Relative spacing is about the same at every scale down to 1e-6 or 1e-7,
// which is what moments spanning many orders of magnitude need.
std::vector<float> make_map(bool is_signed) {
  std::vector<float> v{0.0f};
  const int bits = is_signed ? 7 : 8;
  for (int e = 0; e < bits; ++e) {
    const int b = bits - 1 - e;
    const int n = 1 << b;
    for (int j = 0; j < n; ++j) {
      const float mag = float(std::pow(10.0, -e) * (0.1 + 0.9 * double(j + 1) / double(n)));
      v.push_back(mag);
      if (is_signed) v.push_back(-mag);
    }
  }
  if (is_signed) v.push_back(1e-7f);
  std::sort(v.begin(), v.end());
  SNUG_CHECK(v.size() == 256 && std::adjacent_find(v.begin(), v.end()) == v.end(), Error,
             "AdamW8bit: internal error building the quantization map");
  return v;
}

// Decision thresholds: code i wins for (mid[i-1], mid[i]].
std::vector<float> midpoints(const std::vector<float>& map) {
  std::vector<float> m(255);
  for (size_t i = 0; i < 255; ++i) m[i] = 0.5f * (map[i] + map[i + 1]);
  return m;
}
const std::vector<float>& signed_mid() {
  static const std::vector<float> m = midpoints(AdamW8bit::signed_map());
  return m;
}
const std::vector<float>& unsigned_mid() {
  static const std::vector<float> m = midpoints(AdamW8bit::unsigned_map());
  return m;
}

// The index of the nearest map entry: the number of thresholds below x (8 steps).
inline uint8_t nearest(const float* mid, float x) {
  int idx = 0;
  for (int step = 128; step > 0; step >>= 1)
    if (x > mid[idx + step - 1]) idx += step;
  return uint8_t(idx);
}

constexpr int64_t kMaxBlock = 4096;

bool is_8bit(const Tensor& p, int64_t min_size) { return p.numel() >= min_size; }
int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

}  // namespace

const std::vector<float>& AdamW8bit::signed_map() {
  static const std::vector<float> m = make_map(true);
  return m;
}
const std::vector<float>& AdamW8bit::unsigned_map() {
  static const std::vector<float> m = make_map(false);
  return m;
}

void AdamW8bit::quantize_blockwise(const float* x, int64_t n, int64_t block, const std::vector<float>& map,
                                   uint8_t* codes, float* absmax) {
  const float* mid = (&map == &signed_map()) ? signed_mid().data() : unsigned_mid().data();
  if (&map != &signed_map() && &map != &unsigned_map()) {
    static thread_local std::vector<float> own;
    own = midpoints(map);
    mid = own.data();
  }
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t s = b * block, e = std::min(n, s + block);
    float a = 0;
    for (int64_t i = s; i < e; ++i) a = std::max(a, std::fabs(x[i]));
    absmax[b] = a;
    const float inv = a > 0 ? 1.0f / a : 0.0f;
    for (int64_t i = s; i < e; ++i) codes[i] = nearest(mid, x[i] * inv);
  }
}

void AdamW8bit::dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, int64_t block,
                                     const std::vector<float>& map, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = map[codes[i]] * absmax[i / block];
}

AdamW8bit::AdamW8bit(std::vector<Tensor> params, AdamW8bitOptions o)
    : AdamW8bit(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, o) {}

AdamW8bit::AdamW8bit(std::vector<ParamGroup> groups, AdamW8bitOptions o) : defaults(o) {
  // NOTE [ Parameter group options ]: block_size and min_8bit_size shape the
  // state, so they are the optimizer's alone, not per group.
  group_defaults_ = ParamGroup{{}, o.lr, o.weight_decay, {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}}};
  check_group(group_defaults_, "the optimizer's defaults");
  SNUG_CHECK(o.block_size >= 16 && o.block_size <= kMaxBlock, ValueError, "AdamW8bit: block_size must be in [16, ",
             kMaxBlock, "], got ", o.block_size);
  SNUG_CHECK(o.min_8bit_size >= 0, ValueError, "AdamW8bit: min_8bit_size must be >= 0, got ", o.min_8bit_size);
  for (auto& g : groups) {
    for (auto& p : g.params)
      SNUG_CHECK(p.defined() && p.dtype() == DType::f32 && p.device().is_cpu(), ValueError,
                 "AdamW8bit: parameters must be f32 CPU tensors, got ",
                 p.defined() ? str(dtype_name(p.dtype()), " on ", p.device().str()) : std::string("undefined"));
    add_param_group(std::move(g));
  }
}

void AdamW8bit::check_group(const ParamGroup& g, const std::string& where) const {
  Optimizer::check_group(g, where);
  const double b1 = hyper(g, "beta1"), b2 = hyper(g, "beta2"), eps = hyper(g, "eps");
  SNUG_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1, ValueError, "AdamW8bit: betas must be in [0, 1), got (", b1, ", ",
             b2, ") (", where, ")");
  SNUG_CHECK(eps > 0 && std::isfinite(eps), ValueError, "AdamW8bit: eps must be > 0, got ", eps, " (", where, ")");
}

Shape AdamW8bit::state_shape(const Tensor& p, const std::string& name) const {
  if (name == "exp_avg_absmax" || name == "exp_avg_sq_absmax") return {num_blocks(p.numel(), defaults.block_size)};
  return p.shape();
}

// Large tensors: two u8 codes per element and two f32 absmax per block; small ones two f32 moments.
std::size_t AdamW8bit::expected_param_state_bytes(size_t, const Tensor& p) const {
  const auto n = static_cast<std::size_t>(p.numel());
  if (!is_8bit(p, defaults.min_8bit_size)) return 2 * n * sizeof(float);
  return 2 * n + 2 * static_cast<std::size_t>(num_blocks(p.numel(), defaults.block_size)) * sizeof(float);
}

// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
void AdamW8bit::step() {
  profiler::RecordRange range("optim:", "AdamW8bit.step");
  NoGradGuard ng;
  ++step_count_;
  const double t = static_cast<double>(step_count_);
  const int64_t block = defaults.block_size;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& g = groups_[gi];
    const double lr = hyper(g, "lr"), wd = hyper(g, "weight_decay");
    const float b1 = float(hyper(g, "beta1")), b2 = float(hyper(g, "beta2"));
    const float eps = float(hyper(g, "eps"));
    const double bc1 = 1 - std::pow(double(b1), t), bc2 = 1 - std::pow(double(b2), t);
    const float decay = float(1 - lr * wd), step_size = float(lr / bc1), inv_sqrt_bc2 = float(1 / std::sqrt(bc2));
    for (size_t pi = 0; pi < g.params.size(); ++pi) {
      Tensor p = g.params[pi];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      SNUG_CHECK(p.is_contiguous(), ValueError, "AdamW8bit: parameter ", pi, " of group ", gi, " is not contiguous");
      Tensor gc = raw::contiguous(raw::to_dtype(grad, DType::f32));
      float* w = p.data<float>();
      const float* gr = gc.data<float>();
      const int64_t n = p.numel();
      auto update = [&](float& m, float& v, int64_t i) {
        const float gi_ = gr[i];
        m = b1 * m + (1 - b1) * gi_;
        v = b2 * v + (1 - b2) * gi_ * gi_;
        w[i] = w[i] * decay - step_size * m / (std::sqrt(v) * inv_sqrt_bc2 + eps);
      };
      if (!is_8bit(p, defaults.min_8bit_size)) {
        float* m = state(gi, pi, "exp_avg", p).data<float>();
        float* v = state(gi, pi, "exp_avg_sq", p).data<float>();
        for (int64_t i = 0; i < n; ++i) update(m[i], v[i], i);
        p.bump_version();
        continue;
      }
      auto& st = state_[gi][pi];
      if (!st.count("exp_avg_q")) {
        memory::TagScope tag(memory::Tag::optimizer_state);
        const int64_t nb = num_blocks(n, block);
        // Code of 0.0 in each map, absmax 0: the moments start at zero.
        const auto& sm = signed_map();
        const uint8_t zero_code = uint8_t(std::find(sm.begin(), sm.end(), 0.0f) - sm.begin());
        st["exp_avg_q"] = full(p.shape(), double(zero_code), TensorOptions(DType::u8, p.device()));
        st["exp_avg_sq_q"] = zeros(p.shape(), TensorOptions(DType::u8, p.device()));
        st["exp_avg_absmax"] = zeros({nb}, TensorOptions(DType::f32, p.device()));
        st["exp_avg_sq_absmax"] = zeros({nb}, TensorOptions(DType::f32, p.device()));
      }
      uint8_t* mq = st["exp_avg_q"].data<uint8_t>();
      uint8_t* vq = st["exp_avg_sq_q"].data<uint8_t>();
      float* ma = st["exp_avg_absmax"].data<float>();
      float* va = st["exp_avg_sq_absmax"].data<float>();
      const float* smap = signed_map().data();
      const float* umap = unsigned_map().data();
      const float* smid = signed_mid().data();
      const float* umid = unsigned_mid().data();
      const int64_t nb = num_blocks(n, block);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t s = b * block, e = std::min(n, s + block);
        float mb[kMaxBlock], vb[kMaxBlock];  // the block's new moments, exact
        const int64_t len = e - s;
        float m_abs = 0, v_abs = 0;
        for (int64_t i = 0; i < len; ++i) {
          mb[i] = smap[mq[s + i]] * ma[b];
          vb[i] = umap[vq[s + i]] * va[b];
          update(mb[i], vb[i], s + i);
          m_abs = std::max(m_abs, std::fabs(mb[i]));
          v_abs = std::max(v_abs, vb[i]);
        }
        ma[b] = m_abs;
        va[b] = v_abs;
        const float m_inv = m_abs > 0 ? 1 / m_abs : 0, v_inv = v_abs > 0 ? 1 / v_abs : 0;
        for (int64_t i = 0; i < len; ++i) {
          mq[s + i] = nearest(smid, mb[i] * m_inv);
          vq[s + i] = nearest(umid, vb[i] * v_inv);
        }
      }
      p.bump_version();
    }
  }
  run_step_post_hooks();
}

// Compaction: dequantize, select, quantize again.
void AdamW8bit::select_param_state(const Tensor& param, int64_t dim, const Tensor& index, const Shape& old_shape) {
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      if (!groups_[gi].params[pi].is_same(param)) continue;
      auto& st = state_[gi][pi];
      memory::TagScope tag(memory::Tag::optimizer_state);
      if (st.count("exp_avg")) {
        for (const char* k : {"exp_avg", "exp_avg_sq"}) st[k] = raw::contiguous(raw::index_select(st[k], dim, index));
        continue;
      }
      if (!st.count("exp_avg_q")) continue;
      const int64_t n_old = numel_of(old_shape), block = defaults.block_size;
      for (auto [q, a, is_signed] :
           {std::tuple{"exp_avg_q", "exp_avg_absmax", true}, std::tuple{"exp_avg_sq_q", "exp_avg_sq_absmax", false}}) {
        const auto& map = is_signed ? signed_map() : unsigned_map();
        Tensor full_f = empty(old_shape, DType::f32);
        dequantize_blockwise(st[q].data<uint8_t>(), st[a].data<float>(), n_old, block, map, full_f.data<float>());
        Tensor sel = raw::contiguous(raw::index_select(full_f, dim, index));
        const int64_t n = sel.numel();
        Tensor codes = empty(sel.shape(), DType::u8), absmax = empty({num_blocks(n, block)}, DType::f32);
        quantize_blockwise(sel.data<float>(), n, block, map, codes.data<uint8_t>(), absmax.data<float>());
        st[q] = codes;
        st[a] = absmax;
      }
    }
}

}  // namespace snug::nn::optim

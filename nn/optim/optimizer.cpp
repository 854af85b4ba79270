// SPDX-License-Identifier: MIT
#include <snug/nn/optim/optimizer.h>

#include <cmath>
#include <mutex>

#include <snug/autograd/grad_mode.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug::nn::optim {

// ---- base ------------------------------------------------------------------------------

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_)
    for (auto& p : g.params) {
      if (set_to_none || !p.grad().defined()) {
        p.set_grad(Tensor());
      } else {
        NoGradGuard ng;
        p.grad().zero_();
      }
    }
}

namespace {
std::string known_options(const ParamGroup& defaults) {
  std::string out;
  for (auto& [k, v] : defaults.options) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "none" : out;
}
}  // namespace

// NOTE [ Parameter group options ]: fill what g leaves unset from the
// optimizer's defaults, then check the result.
void Optimizer::add_param_group(ParamGroup g) {
  const std::string where = str("parameter group ", groups_.size());
  if (!g.lr) g.lr = group_defaults_.lr;
  if (!g.weight_decay) g.weight_decay = group_defaults_.weight_decay;
  for (auto& [k, v] : g.options)
    SNUG_CHECK(group_defaults_.options.count(k), ValueError, name(), ": ", where, " sets unknown option \"", k, "\" (",
               name(), " takes lr, weight_decay and options: ", known_options(group_defaults_), ")");
  for (auto& [k, v] : group_defaults_.options) g.options.try_emplace(k, v);
  check_group(g, where);
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Tensor& p = g.params[i];
    SNUG_CHECK(p.defined() && p.is_floating_point(), ValueError, name(), ": parameters must be floating tensors");
    // Fix: a parameter listed twice in the same group was accepted (and then
    // stepped twice per step(); only other groups were checked).
    for (size_t j = 0; j < i; ++j)
      SNUG_CHECK(!g.params[j].is_same(p), ValueError, name(), ": parameter ", i,
                 " of the group is the same tensor as parameter ", j, " (each parameter may appear once)");
    for (auto& other : groups_)
      for (auto& q : other.params)
        SNUG_CHECK(!q.is_same(p), ValueError, name(), ": a parameter appears in more than one group");
  }
  state_.emplace_back(g.params.size());
  groups_.push_back(std::move(g));
}

// The checks every optimizer shares; subclasses add their own options'.
void Optimizer::check_group(const ParamGroup& g, const std::string& where) const {
  const double lr = hyper(g, "lr"), wd = hyper(g, "weight_decay");
  SNUG_CHECK(lr >= 0 && std::isfinite(lr), ValueError, name(), ": learning rate must be finite and >= 0, got ", lr,
             " (", where, ")");
  SNUG_CHECK(wd >= 0 && std::isfinite(wd), ValueError, name(), ": weight_decay must be finite and >= 0, got ", wd, " (",
             where, ")");
}

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) g.lr = lr;
}

double Optimizer::hyper(const ParamGroup& g, const std::string& key) const {
  const std::optional<double>* field = key == "lr" ? &g.lr : key == "weight_decay" ? &g.weight_decay : nullptr;
  if (field) {
    SNUG_CHECK(field->has_value(), ValueError, name(), ": a parameter group has no ", key,
               " (it was reset after the group was added)");
    return **field;
  }
  auto it = g.options.find(key);
  SNUG_CHECK(it != g.options.end(), ValueError, name(), ": a parameter group has no option \"", key,
             "\" (it was erased after the group was added)");
  return it->second;
}

Tensor& Optimizer::state(size_t group, size_t param, const std::string& name, const Tensor& like) {
  Tensor& t = state_[group][param][name];
  if (!t.defined()) {
    memory::TagScope tag(memory::Tag::optimizer_state);
    t = zeros(like.shape(), TensorOptions(like.dtype(), like.device()));
  }
  return t;
}

// NOTE [ Master weights ]
// A parameter stored in f16/bf16 is not updated in place: its f32 master
// copy (state "master", created from the parameter at its first step and
// tagged master_weights) takes the update, with the gradient converted to
// f32 and all other state in f32, and the parameter then receives the master
// rounded to its dtype. An update smaller than half an ulp of the parameter
// would vanish if applied to the half value; in the master it accumulates
// until the rounded value moves. The master is part of state_dict, so a
// resumed run continues from the same f32 values.
namespace {
bool is_half(const Tensor& p) { return p.dtype() == DType::f16 || p.dtype() == DType::bf16; }
// A new f32 master copy of a half parameter.
Tensor make_master(const Tensor& p) {
  memory::TagScope tag(memory::Tag::master_weights);
  return raw::to_dtype(p, DType::f32);  // a new tensor: p is half, so this is a conversion
}
}  // namespace

Tensor Optimizer::master(size_t group, size_t param, const Tensor& p) {
  if (!is_half(p)) return p;
  Tensor& m = state_[group][param]["master"];
  if (!m.defined()) m = make_master(p);
  return m;
}

Tensor Optimizer::grad_as(const Tensor& param, const Tensor& target) const {
  Tensor gr = param.grad();
  return gr.dtype() == target.dtype() ? gr : raw::to_dtype(gr, target.dtype());
}

// NOTE [ Failure-atomic optimizer steps ]
// A step first creates every state tensor it lacks (the f32 master of a half
// parameter, moments, momentum buffers) into a staging list, and installs
// them only once all exist: running out of memory there leaves the optimizer
// exactly as it was. The update then runs the backend's fused kernels
// (Backend::adam_update / sgd_update in core/backend.h: core/cpu/update.cpp,
// cuda/update.cu), which allocate nothing, so it cannot stop halfway through
// the parameters. tests/test_alloc_failure.cpp fails every allocation of a
// training step in turn and checks that the next step equals one that never
// failed. Tensors the fused kernels do not take (f64, strided, spread over
// devices) get the backend's composed default (core/update.cpp), which
// allocates temporaries and is not failure-atomic.
void Optimizer::stage_state(const std::vector<std::string>& names) {
  struct Fresh {
    size_t gi, pi;
    std::string name;
    Tensor t;
  };
  std::vector<Fresh> fresh;
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      const Tensor& param = groups_[gi].params[pi];
      if (!param.grad().defined()) continue;
      auto& st = state_[gi][pi];
      Tensor target = param;
      if (is_half(param)) {
        auto it = st.find("master");
        if (it != st.end() && it->second.defined()) {
          target = it->second;
        } else {
          target = make_master(param);
          fresh.push_back({gi, pi, "master", target});
        }
      }
      for (const std::string& n : names) {
        auto it = st.find(n);
        if (it != st.end() && it->second.defined()) continue;
        memory::TagScope tag(memory::Tag::optimizer_state);
        fresh.push_back({gi, pi, n, zeros(target.shape(), TensorOptions(target.dtype(), target.device()))});
      }
    }
  for (auto& f : fresh) state_[f.gi][f.pi][f.name] = std::move(f.t);
}

void Optimizer::write_back(const Tensor& param, const Tensor& target) {
  if (target.is_same(param)) return;
  raw::copy_(param, target);  // rounds to nearest even
  param.bump_version();
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  auto scalar = [](double v) { return full({}, v, DType::f64); };
  out.emplace_back("step", scalar(static_cast<double>(step_count_)));
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto& g = groups_[gi];
    std::string pre = str("group.", gi, ".");
    out.emplace_back(pre + "lr", scalar(hyper(g, "lr")));
    out.emplace_back(pre + "weight_decay", scalar(hyper(g, "weight_decay")));
    out.emplace_back(pre + "num_params", scalar(static_cast<double>(g.params.size())));
    for (auto& [k, v] : g.options) out.emplace_back(pre + "opt." + k, scalar(v));
    for (size_t pi = 0; pi < state_[gi].size(); ++pi)
      for (auto& [k, t] : state_[gi][pi]) out.emplace_back(str("state.", gi, ".", pi, ".", k), t.detach());
  }
  return out;
}

// Fix: this used to assign as it validated, so a bad state (wrong layout,
// a mis-shaped tensor) left the optimizer half-loaded; and it kept old
// per-parameter state that the loaded dict did not have. Now everything is
// checked and built first, then committed at once, replacing the state.
void Optimizer::load_state_dict(const NamedTensors& sd) {
  std::map<std::string, Tensor> m(sd.begin(), sd.end());
  auto get = [&](const std::string& k) -> Tensor {
    auto it = m.find(k);
    SNUG_CHECK(it != m.end(), ValueError, name(), ".load_state_dict: missing key \"", k, "\"");
    return it->second;
  };
  // Counts stored as f64 scalars: checked before any conversion to an integer
  // (a NaN or a huge value is undefined behaviour to convert; found by fuzzing).
  auto count = [&](const std::string& k) -> int64_t {
    const Tensor t = get(k);
    SNUG_CHECK(t.numel() == 1, ValueError, name(), ".load_state_dict: \"", k, "\" must hold one value, got shape ",
               shape_str(t.shape()));
    const double v = t.item();
    SNUG_CHECK(std::isfinite(v) && v >= 0 && v <= 9.0e15 && v == std::floor(v), ValueError, name(),
               ".load_state_dict: \"", k, "\" must be a whole number >= 0, got ", v);
    return static_cast<int64_t>(v);
  };
  auto value = [&](const std::string& k) -> double {
    const Tensor t = get(k);
    SNUG_CHECK(t.numel() == 1, ValueError, name(), ".load_state_dict: \"", k, "\" must hold one value, got shape ",
               shape_str(t.shape()));
    return t.item();
  };
  const int64_t new_step = count("step");
  std::vector<ParamGroup> new_groups = groups_;
  for (size_t gi = 0; gi < new_groups.size(); ++gi) {
    auto& g = new_groups[gi];
    std::string pre = str("group.", gi, ".");
    SNUG_CHECK(static_cast<size_t>(count(pre + "num_params")) == g.params.size(), ValueError, name(),
               ".load_state_dict: group ", gi, " has ", g.params.size(), " parameters but the state has ",
               count(pre + "num_params"));
    g.lr = value(pre + "lr");
    g.weight_decay = value(pre + "weight_decay");
    for (auto& [k, v] : m) {
      if (k.rfind(pre + "opt.", 0) != 0) continue;
      const std::string opt_name = k.substr(pre.size() + 4);
      SNUG_CHECK(g.options.count(opt_name), ValueError, name(), ".load_state_dict: \"", k, "\" is not an option of ",
                 name(), " (options: ", known_options(group_defaults_), ")");
      g.options[opt_name] = value(k);
    }
    check_group(g, str("group ", gi, " of the loaded state"));
  }
  auto index = [&](const std::string& k, size_t from, size_t to) -> size_t {
    std::string digits = k.substr(from, to - from);
    bool ok = !digits.empty() && digits.size() < 10;
    for (char c : digits) ok = ok && c >= '0' && c <= '9';
    SNUG_CHECK(ok, ValueError, name(), ".load_state_dict: malformed key \"", k, "\"");
    return std::stoul(digits);
  };
  std::vector<std::vector<std::map<std::string, Tensor>>> new_state(groups_.size());
  for (size_t gi = 0; gi < groups_.size(); ++gi) new_state[gi].resize(groups_[gi].params.size());
  for (auto& [k, v] : m) {
    if (k.rfind("state.", 0) != 0) continue;
    size_t a = k.find('.', 6), b = a == std::string::npos ? a : k.find('.', a + 1);
    SNUG_CHECK(b != std::string::npos, ValueError, name(), ".load_state_dict: malformed key \"", k, "\"");
    size_t gi = index(k, 6, a), pi = index(k, a + 1, b);
    SNUG_CHECK(gi < groups_.size() && pi < groups_[gi].params.size(), ValueError, name(), ".load_state_dict: key \"", k,
               "\" refers to a parameter that does not exist");
    const Tensor& p = groups_[gi].params[pi];
    const Shape want = state_shape(p, k.substr(b + 1));
    SNUG_CHECK(v.shape() == want, ValueError, name(), ".load_state_dict: \"", k, "\" has shape ", shape_str(v.shape()),
               " but the parameter's state needs ", shape_str(want));
    memory::TagScope tag(memory::Tag::optimizer_state);
    new_state[gi][pi][k.substr(b + 1)] = raw::clone(raw::to_device(v, p.device()));
  }
  step_count_ = new_step;
  groups_ = std::move(new_groups);
  state_ = std::move(new_state);
}

std::size_t Optimizer::state_bytes() const {
  std::size_t n = 0;
  for (auto& g : state_)
    for (auto& p : g)
      for (auto& [k, t] : p) n += t.nbytes();
  return n;
}

std::size_t Optimizer::expected_state_bytes() const {
  std::size_t n = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (const Tensor& p : groups_[gi].params) {
      if (!p.requires_grad()) continue;
      n += expected_param_state_bytes(gi, p);
      if (is_half(p)) n += static_cast<std::size_t>(p.numel()) * sizeof(float);  // the f32 master
    }
  return n;
}

// One f32 momentum buffer per parameter when any group uses momentum (step()
// stages them for all, NOTE [ Failure-atomic optimizer steps ]).
std::size_t SGD::expected_param_state_bytes(size_t, const Tensor& p) const {
  bool any_momentum = false;
  for (auto& g : groups_) any_momentum = any_momentum || hyper(g, "momentum") != 0;
  return any_momentum ? static_cast<std::size_t>(p.numel()) * sizeof(float) : 0;
}

// exp_avg and exp_avg_sq, f32.
std::size_t Adam::expected_param_state_bytes(size_t, const Tensor& p) const {
  return 2 * static_cast<std::size_t>(p.numel()) * sizeof(float);
}

void Optimizer::select_param_state(const Tensor& param, int64_t dim, const Tensor& index, const Shape& old_shape) {
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      if (!groups_[gi].params[pi].is_same(param)) continue;
      for (auto& [k, t] : state_[gi][pi]) {
        if (t.shape() != old_shape) continue;
        memory::TagScope tag(memory::Tag::optimizer_state);
        t = raw::contiguous(raw::index_select(t, dim, index));
      }
    }
}

namespace {
std::mutex g_hooks_mu;
std::vector<std::pair<int64_t, Optimizer::StepHook>>& global_hooks() {
  static std::vector<std::pair<int64_t, Optimizer::StepHook>> h;
  return h;
}
int64_t g_next_hook = 1;
}  // namespace

int64_t register_optimizer_step_post_hook(Optimizer::StepHook hook) {
  std::lock_guard<std::mutex> lk(g_hooks_mu);
  global_hooks().emplace_back(g_next_hook, std::move(hook));
  return g_next_hook++;
}
void remove_optimizer_step_post_hook(int64_t id) {
  std::lock_guard<std::mutex> lk(g_hooks_mu);
  auto& h = global_hooks();
  std::erase_if(h, [&](auto& e) { return e.first == id; });
}

void Optimizer::run_step_post_hooks() {
  for (auto& h : post_hooks_) h(*this);
  std::vector<StepHook> global;
  {
    std::lock_guard<std::mutex> lk(g_hooks_mu);
    for (auto& [id, h] : global_hooks()) global.push_back(h);
  }
  for (auto& h : global) h(*this);
}

// ---- SGD --------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, o) {}
SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o) : defaults(o) {
  group_defaults_ =
      ParamGroup{{},
                 o.lr,
                 o.weight_decay,
                 {{"momentum", o.momentum}, {"dampening", o.dampening}, {"nesterov", o.nesterov ? 1 : 0}}};
  check_group(group_defaults_, "the optimizer's defaults");
  for (auto& g : groups) add_param_group(std::move(g));
}

void SGD::check_group(const ParamGroup& g, const std::string& where) const {
  Optimizer::check_group(g, where);
  const double mom = hyper(g, "momentum"), damp = hyper(g, "dampening"), nesterov = hyper(g, "nesterov");
  SNUG_CHECK(mom >= 0 && std::isfinite(mom), ValueError, "SGD: momentum must be >= 0, got ", mom, " (", where, ")");
  SNUG_CHECK(std::isfinite(damp), ValueError, "SGD: dampening must be finite, got ", damp, " (", where, ")");
  SNUG_CHECK(nesterov == 0 || nesterov == 1, ValueError, "SGD: nesterov must be 0 or 1, got ", nesterov, " (", where,
             ")");
  SNUG_CHECK(nesterov == 0 || (mom > 0 && damp == 0), ValueError,
             "SGD: Nesterov momentum requires momentum > 0 and dampening = 0, got momentum ", mom, ", dampening ", damp,
             " (", where, ")");
}

void SGD::step() {
  profiler::RecordRange range("optim:", "SGD.step");
  NoGradGuard ng;
  // NOTE [ Failure-atomic optimizer steps ]: state first, then the update.
  std::vector<std::vector<bool>> first(groups_.size());
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t pi = 0; pi < groups_[gi].params.size(); ++pi) {
      auto it = state_[gi][pi].find("momentum_buffer");
      first[gi].push_back(it == state_[gi][pi].end() || !it->second.defined());
    }
  bool any_momentum = false;
  for (auto& g : groups_) any_momentum = any_momentum || hyper(g, "momentum") != 0;
  stage_state(any_momentum ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{});
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& g = groups_[gi];
    const double lr = hyper(g, "lr"), wd = hyper(g, "weight_decay");
    const double mom = hyper(g, "momentum"), damp = hyper(g, "dampening");
    const bool nesterov = hyper(g, "nesterov") != 0;
    for (size_t pi = 0; pi < g.params.size(); ++pi) {
      const Tensor& param = g.params[pi];
      if (!param.grad().defined()) continue;
      Tensor p = master(gi, pi, param);  // NOTE [ Master weights ]
      Tensor buf = mom != 0 ? state_[gi][pi]["momentum_buffer"] : Tensor();
      // Fused when the backend's kernel takes these tensors (NOTE [ Failure-atomic optimizer steps ]).
      backend_for(p.device()).sgd_update(p, param.grad(), buf, {lr, mom, damp, wd, nesterov, first[gi][pi]});
      write_back(param, p);
    }
  }
  ++step_count_;
  run_step_post_hooks();
}

// ---- Adam / AdamW -------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, AdamOptions o)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, o) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam(std::move(groups), o, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled) : defaults(o), decoupled_(decoupled) {
  group_defaults_ = ParamGroup{{}, o.lr, o.weight_decay, {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}}};
  check_group(group_defaults_, "the optimizer's defaults");
  for (auto& g : groups) add_param_group(std::move(g));
}

void Adam::check_group(const ParamGroup& g, const std::string& where) const {
  Optimizer::check_group(g, where);
  const double b1 = hyper(g, "beta1"), b2 = hyper(g, "beta2"), eps = hyper(g, "eps");
  SNUG_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1, ValueError, name(), ": betas must be in [0, 1), got (", b1, ", ",
             b2, ") (", where, ")");
  SNUG_CHECK(eps > 0 && std::isfinite(eps), ValueError, name(), ": eps must be > 0, got ", eps, " (", where, ")");
}

namespace {
AdamOptions as_adam(const AdamWOptions& o) { return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}; }
}  // namespace
AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, o) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o) : Adam(std::move(groups), as_adam(o), true) {}

// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
void Adam::step() {
  profiler::RecordRange range("optim:", decoupled_ ? "AdamW.step" : "Adam.step");
  NoGradGuard ng;
  stage_state({"exp_avg", "exp_avg_sq"});  // NOTE [ Failure-atomic optimizer steps ]
  ++step_count_;
  const double t = static_cast<double>(step_count_);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& g = groups_[gi];
    const double lr = hyper(g, "lr"), wd = hyper(g, "weight_decay");
    const double b1 = hyper(g, "beta1"), b2 = hyper(g, "beta2"), eps = hyper(g, "eps");
    double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t pi = 0; pi < g.params.size(); ++pi) {
      const Tensor& param = g.params[pi];
      if (!param.grad().defined()) continue;
      Tensor p = master(gi, pi, param);  // NOTE [ Master weights ]
      Tensor& m = state(gi, pi, "exp_avg", p);
      Tensor& v = state(gi, pi, "exp_avg_sq", p);
      // Fused when the backend's kernel takes these tensors (NOTE [ Failure-atomic optimizer steps ]).
      backend_for(p.device()).adam_update(p, param.grad(), m, v, {lr, b1, b2, eps, wd, bc1, bc2, decoupled_});
      write_back(param, p);
    }
  }
  run_step_post_hooks();
}

// ---- schedulers ------------------------------------------------------------------------------

// The groups are resolved (NOTE [ Parameter group options ]): each base lr
// is the lr its group trains at, its own or the optimizer's.
LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (auto& g : opt.param_groups()) {
    SNUG_CHECK(g.lr.has_value(), ValueError, "LRScheduler: a parameter group of ", opt.name(), " has no lr");
    base_lrs_.push_back(*g.lr);
  }
}
void LRScheduler::step() { set_last_step(step_ + 1); }
void LRScheduler::set_last_step(int64_t s) {
  step_ = s;
  double f = lr_at(s);
  auto& groups = opt_.param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) groups[i].lr = base_lrs_[i] * f;
}

WarmupCosine::WarmupCosine(Optimizer& opt, int64_t w, int64_t t, double mf)
    : LRScheduler(opt), warmup(w), total(t), min_factor(mf) {
  SNUG_CHECK(w >= 0 && t > 0 && w <= t, ValueError,
             "WarmupCosine: need 0 <= warmup <= total and total > 0, got warmup=", w, " total=", t);
  SNUG_CHECK(mf >= 0 && mf <= 1, ValueError, "WarmupCosine: min_factor must be in [0, 1], got ", mf);
  set_last_step(0);
}
double WarmupCosine::lr_at(int64_t s) const {
  if (s < warmup) return static_cast<double>(s + 1) / static_cast<double>(warmup);
  if (s >= total) return min_factor;
  double progress = static_cast<double>(s - warmup) / static_cast<double>(std::max<int64_t>(total - warmup, 1));
  return min_factor + (1 - min_factor) * 0.5 * (1 + std::cos(M_PI * progress));
}

StepLR::StepLR(Optimizer& opt, int64_t ss, double gm) : LRScheduler(opt), step_size(ss), gamma(gm) {
  SNUG_CHECK(ss > 0, ValueError, "StepLR: step_size must be > 0, got ", ss);
  set_last_step(0);
}
double StepLR::lr_at(int64_t s) const { return std::pow(gamma, static_cast<double>(s / step_size)); }

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  SNUG_CHECK(max_norm > 0, ValueError, "clip_grad_norm_: max_norm must be > 0, got ", max_norm);
  NoGradGuard ng;
  double total = 0;
  for (auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor g64 = raw::to_dtype(g, DType::f64);
    total += raw::reduce(ReduceOp::sum, raw::binary(BinaryOp::mul, g64, g64), {}, false).item();
  }
  double norm = std::sqrt(total);
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for (auto& p : params)
      if (p.grad().defined()) p.grad().mul_(coef);
  return norm;
}

}  // namespace snug::nn::optim

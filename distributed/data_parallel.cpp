// SPDX-License-Identifier: MIT
// DataParallel: NOTE [ Gradient buckets ] in data_parallel.h.
#include <snug/distributed/data_parallel.h>

#include <chrono>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/node.h>
#include <snug/core/raw_ops.h>
#include <snug/memory/allocator.h>

namespace snug::distributed {

struct DataParallel::Bucket {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;  // element offset of each param in flat
  Tensor flat;                   // (numel) the reduction buffer
  size_t pending = 0;            // params not yet ready in this sync
  bool launched = false;
  std::shared_ptr<Work> work;
};

namespace {
// Reductions run in f32 for half gradients (MPI has no f16 arithmetic, and a
// sum of many f16 values loses what the loss scale kept).
DType bucket_dtype(DType d) { return d == DType::f16 || d == DType::bf16 ? DType::f32 : d; }
}  // namespace

DataParallel::DataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group, DataParallelOptions opt)
    : module_(module), group_(std::move(group)), opt_(opt) {
  SNUG_CHECK(group_ != nullptr, ValueError, "DataParallel: the process group is null (call init_process_group)");
  SNUG_CHECK(opt_.bucket_bytes > 0, ValueError, "DataParallel: bucket_bytes must be positive, got ", opt_.bucket_bytes);
  for (auto& [name, p] : module_.named_parameters()) {
    if (!p.requires_grad()) continue;
    params_.push_back(p);
    names_.push_back(name);
  }

  // 1. Every rank must hold the same model: compare (count, shapes) digests.
  {
    uint64_t u = params_.size();  // unsigned: the digest wraps around
    for (const Tensor& p : params_) {
      for (int64_t s : p.shape()) u = u * 1000003u + static_cast<uint64_t>(s);
      u = u * 31u + static_cast<uint64_t>(p.dtype());
    }
    const int64_t h = static_cast<int64_t>(u);
    Tensor mine = from_vector(std::vector<int64_t>{h}).to(group_->device());
    Tensor all = group_->all_gather(mine);
    std::vector<int64_t> v = all.to(kCPU).to_vector<int64_t>();
    for (size_t r = 0; r < v.size(); ++r)
      SNUG_CHECK(v[r] == h, DistributedError, "DataParallel: rank ", r, "'s model differs from rank ", rank(),
                 "'s (parameter count, shapes or dtypes; this rank has ", params_.size(),
                 " parameters); every rank must build the same model");
  }

  // 2. Rank 0's parameters (and buffers) everywhere.
  {
    NoGradGuard ng;
    std::vector<Tensor> targets;
    for (const Tensor& p : params_) targets.push_back(p.detach());
    if (opt_.broadcast_buffers)
      for (auto& [name, b] : module_.named_buffers()) targets.push_back(b.detach());
    std::vector<std::pair<Tensor, Tensor>> copies;  // (target, contiguous stand-in)
    std::vector<std::shared_ptr<Work>> works;
    for (Tensor& t : targets) {
      Tensor c = t.is_contiguous() ? t : t.contiguous();
      if (!c.is_same(t)) copies.emplace_back(t, c);
      works.push_back(group_->broadcast_async(c, 0));
    }
    for (auto& w : works) w->wait();
    for (auto& [t, c] : copies) raw::copy_(t, c);
  }

  // 3. Buckets, last parameters first.
  bucket_of_.assign(params_.size(), 0);
  ready_.assign(params_.size(), 0);
  std::vector<size_t> cur;
  int64_t cur_bytes = 0;
  auto close = [&] {
    if (cur.empty()) return;
    bucket_params_.push_back(cur);
    cur.clear();
    cur_bytes = 0;
  };
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    if (!cur.empty()) {
      const Tensor& q = params_[cur.back()];
      if (bucket_dtype(q.dtype()) != bucket_dtype(p.dtype()) || !(q.device() == p.device())) close();
    }
    cur.push_back(k);
    cur_bytes += p.numel() * static_cast<int64_t>(dtype_size(bucket_dtype(p.dtype())));
    if (cur_bytes >= opt_.bucket_bytes) close();
  }
  close();
  for (size_t b = 0; b < bucket_params_.size(); ++b) {
    auto bk = std::make_unique<Bucket>();
    bk->params = bucket_params_[b];
    int64_t n = 0;
    for (size_t k : bk->params) {
      bk->offsets.push_back(n);
      n += params_[k].numel();
      bucket_of_[k] = b;
    }
    const Tensor& first = params_[bk->params.front()];
    {
      memory::TagScope tag(memory::Tag::gradient);
      bk->flat = zeros({n}, TensorOptions(bucket_dtype(first.dtype()), first.device()));
    }
    bk->pending = bk->params.size();
    buckets_.push_back(std::move(bk));
  }

  // 4. The hooks.
  for (size_t k = 0; k < params_.size(); ++k)
    hook_ids_.push_back(autograd::register_post_accumulate_grad_hook(params_[k], [this, k](const Tensor&) {
      if (sync_) on_ready(k);
    }));
}

DataParallel::~DataParallel() {
  for (size_t k = 0; k < params_.size(); ++k) autograd::remove_post_accumulate_grad_hook(params_[k], hook_ids_[k]);
  // Started reductions must end before their buffers go (a broken group's
  // never will: the group keeps the buffers); errors cannot leave a destructor.
  for (auto& b : buckets_)
    if (b->work && !group_->broken()) try {
        b->work->wait();
      } catch (...) {
      }
}

void DataParallel::on_ready(size_t k) {
  SNUG_CHECK(!ready_[k], DistributedError, "DataParallel: parameter '", names_[k],
             "' got a second gradient before this step's gradient sync finished (two backward passes in sync mode "
             "with an unused parameter?); wrap all but the last backward of a step in no_sync(), or call "
             "finish_gradient_sync() between them");
  ready_[k] = 1;
  ++ready_count_;
  Bucket& b = *buckets_[bucket_of_[k]];
  --b.pending;
  launch_ready_buckets();
  // MPI progresses a nonblocking collective only while the program is inside
  // the MPI library: polling the buckets in flight at every hook moves their
  // transfers along between backward's ops (a cheap MPI_Test each).
  for (size_t i = 0; i < next_launch_; ++i) buckets_[i]->work->is_completed();
  if (ready_count_ == params_.size()) finish_gradient_sync();
}

void DataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) launch(*buckets_[next_launch_++]);
}

void DataParallel::launch(Bucket& b) {
  // flat <- this rank's gradients (zeros for a parameter that has none).
  for (size_t i = 0; i < b.params.size(); ++i) {
    const Tensor& p = params_[b.params[i]];
    Tensor slot = b.flat.narrow(0, b.offsets[i], p.numel());
    Tensor g = p.grad();
    if (g.defined())
      raw::copy_(slot, g.reshape({-1}));
    else
      raw::fill_(slot, 0.0);
  }
  b.launched = true;
  b.work = group_->all_reduce_async(b.flat, ReduceOp::avg);
  ++stats_.buckets_reduced;
  stats_.bytes_reduced += static_cast<int64_t>(b.flat.nbytes());
}

void DataParallel::finish_gradient_sync() {
  bool any = false;
  for (auto& b : buckets_) any = any || b->launched || b->pending != b->params.size();
  if (!any) return;  // nothing started since the last sync
  // Parameters that got no gradient: reduce them as zeros, in bucket order.
  for (auto& b : buckets_) b->pending = 0;
  launch_ready_buckets();
  for (auto& b : buckets_) stats_.buckets_done_early += b->work->is_completed();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& b : buckets_) b->work->wait();
  stats_.wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // .grad <- the averages.
  for (auto& b : buckets_) {
    for (size_t i = 0; i < b->params.size(); ++i) {
      const Tensor& p = params_[b->params[i]];
      Tensor avg = b->flat.narrow(0, b->offsets[i], p.numel()).view(p.shape());
      Tensor g = p.grad();
      if (g.defined()) {
        raw::copy_(g, avg);
        g.bump_version();
      } else {
        memory::TagScope tag(memory::Tag::gradient);
        p.set_grad(raw::to_dtype(raw::clone(avg), p.dtype()));
      }
    }
    b->work.reset();
    b->launched = false;
    b->pending = b->params.size();
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  ready_count_ = 0;
  next_launch_ = 0;
  ++stats_.syncs;
}

}  // namespace snug::distributed

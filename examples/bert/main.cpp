// SPDX-License-Identifier: MIT
// examples/bert: masked-LM pretraining of a small BERT on a text's lines, and
// the memory case study told one stage at a time (docs/bert.md):
//
//   batch32   the recipe: batches of 32 variable-length lines (pad_collate,
//             its padding_mask as the attention's key padding), f32
//   accum     the same batches as 8 x 4 micro-batches (GradAccumulator): the
//             same gradients at a quarter of the activations
//   bf16      accum under bf16 autocast (f32 parameters and optimizer)
//   f16       accum under f16 autocast with dynamic loss scaling (GradScaler)
//   pruned    the trained encoder with half its heads and MLP channels pruned
//             and compacted away (prune::compact), then fine-tuned
//   int8      the pruned encoder's Linears quantized to int8 (quant::quantize_dynamic)
//
//   bert --data ../shared/data/tinyshakespeare.txt --steps 600 [--json]
//
// Each training stage starts from the same initial weights and sees the same
// batches; batch32 trains --steps steps (the model the last two stages
// compress), the others --stage-steps. --save-init DIR writes the initial
// weights as a Hugging Face BertForMaskedLM (nn/models/hf.h), which the
// PyTorch peer (bench/peers/bert_torch.py) trains on the same batches.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/core/cpu_isa.h>
#include <snug/core/raw_ops.h>
#include <snug/data/collate.h>
#include <snug/data/dataloader.h>
#include <snug/data/device_prefetch.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stats.h>
#include <snug/nn/accumulate.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/functional.h>
#include <snug/nn/models/bert.h>
#include <snug/nn/models/hf.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/training_state.h>
#include <snug/prune/compact.h>
#include <snug/prune/prune.h>
#include <snug/quant/convert.h>

#include "bert/mlm_data.h"
#include "common/cli.h"

using namespace snug;
using namespace bert_example;
using nn::models::Bert;
using nn::models::BertConfig;

namespace {

struct Flags {
  std::string data = SNUG_EXAMPLES_DIR "/../../shared/data/tinyshakespeare.txt", save_init;
  int64_t steps = 600, stage_steps = 20, finetune_steps = 100, batch = 32, accum = 4, max_len = 64;
  int64_t layers = 2, heads = 4, hidden = 128, intermediate = 512, threads = 2, workers = 1, seed = 1234;
  int64_t eval_every = 0;
  std::string device = "cpu";  // where the model, its optimizer and the batches live (int8 runs on the CPU)
  double lr = 1e-3, weight_decay = 0.01, dropout = 0.0, prune = 0.5;
  bool json = false;
};

// What one stage measured.
struct Stage {
  std::string name;
  int64_t steps = 0;
  double step_ms = 0, loss = 0, val_loss = NAN;
  int64_t peak_allocated = 0;
  std::array<int64_t, memory::kNumTags> tag_peak{};  // each tag's own peak over the stage
  int64_t params = 0, model_bytes = 0;
};

int64_t tag_peak(const Stage& s, memory::Tag t) { return s.tag_peak[size_t(t)]; }

struct Run {
  const Flags& f;
  Corpus corpus;
  BertConfig cfg;
  std::shared_ptr<data::Dataset> train_set, val_set;
};

enum class Amp { none, bf16, f16 };

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<data::DataLoader> loader(const Run& r, int64_t micro_batch) {
  data::DataLoaderOptions o;
  o.batch_size = micro_batch;
  o.drop_last = true;
  o.num_workers = int(r.f.workers);
  o.collate = data::pad_collate({.pad_values = {double(kPad), -100.0}});
  o.sampler = std::make_shared<MixSampler>(r.train_set->size(), uint64_t(r.f.seed), r.f.batch);
  o.pin_memory = Device(r.f.device).is_cuda();  // staged for the copy to the GPU
  return std::make_unique<data::DataLoader>(r.train_set, o);
}

int64_t labelled(const data::Batch& b) {
  return raw::reduce(ReduceOp::sum, raw::to_dtype(raw::compare_scalar(CompareOp::ne, b[1], -100.0), DType::i64), {},
                     false)
      .item<int64_t>();
}

// Mean masked-LM loss over every labelled token of the validation lines.
double validate(Bert& m, const Run& r) {
  autograd::NoGradGuard ng;
  const bool was = m.is_training();
  m.eval();
  data::DataLoaderOptions o;
  o.batch_size = 64;
  o.collate = data::pad_collate({.pad_values = {double(kPad), -100.0}});
  data::DataLoader dl(r.val_set, o);
  const Device dev = m.parameters().front().device();  // the model's: the int8 stage runs on the CPU
  double sum = 0;
  int64_t n = 0;
  for (data::Batch& hb : dl) {
    const data::Batch b = hb.to(dev);
    const Tensor logits = m.mlm_logits(m.encode(b[0], Tensor(), b.padding_mask));
    sum += nn::functional::cross_entropy(logits.view({-1, r.cfg.vocab}), b[1].reshape({-1}), -100, 0.0,
                                         nn::functional::Reduction::sum)
               .item();
    n += labelled(b);
  }
  m.train(was);
  return sum / double(std::max<int64_t>(n, 1));
}

nn::optim::AdamW make_optimizer(Bert& m, const Flags& f) {
  return nn::optim::AdamW(m.parameters(), {.lr = f.lr, .weight_decay = f.weight_decay});
}

// Trains `steps` steps of batch f.batch made of `accum` micro-batches, under `amp`.
Stage train(const std::string& name, Bert& m, nn::optim::AdamW& opt, const Run& r, int64_t steps, int64_t accum,
            Amp amp) {
  const Flags& f = r.f;
  Stage s;
  s.name = name;
  s.steps = steps;
  m.train();
  auto dl = loader(r, f.batch / accum);
  nn::amp::GradScaler scaler({.enabled = amp == Amp::f16});
  std::vector<double> ms;
  const Device dev = m.parameters().front().device();
  memory::reset_peak(dev);
  int64_t step = 0;
  std::vector<data::Batch> micro;
  for (int64_t epoch = 0; step < steps; ++epoch) {
    // Micro-batches reach the device one ahead (data/device_prefetch.h): on a
    // GPU the next one's copy overlaps this one's forward and backward.
    data::DevicePrefetcher prefetch(dev);
    auto it = dl->begin();
    if (it != dl->end()) prefetch.push(*it);
    while (!prefetch.empty()) {
      micro.push_back(prefetch.pop());
      if (++it != dl->end()) prefetch.push(*it);
      if (int64_t(micro.size()) < accum) continue;
      const double t0 = now_ms();
      int64_t total = 0;
      for (const data::Batch& mb : micro) total += labelled(mb);
      nn::GradAccumulator acc(double(std::max<int64_t>(total, 1)));
      double loss = 0;
      {
        // One autocast scope per step: the 16-bit weight casts are made once for all micro-batches.
        AutocastGuard ac(amp == Amp::f16 ? DType::f16 : DType::bf16, amp != Amp::none);
        for (const data::Batch& mb : micro) {
          Tensor l;
          {
            memory::TagScope tag(memory::Tag::activation);  // what the forward keeps for backward
            l = m.mlm_loss(mb[0], mb[1], Tensor(), mb.padding_mask);
          }
          const double w = double(labelled(mb));
          loss += l.item() * w / acc.total_weight();
          acc.backward(scaler.scale(l), w);
        }
      }
      scaler.step(opt);
      scaler.update();
      opt.zero_grad();
      ms.push_back(now_ms() - t0);
      s.loss = loss;
      micro.clear();
      ++step;
      if (f.eval_every > 0 && step % f.eval_every == 0 && !f.json)
        std::fprintf(stderr, "  %s step %lld: loss %.4f, val %.4f\n", name.c_str(), (long long)step, loss,
                     validate(m, r));
      if (step >= steps) break;
    }
  }
  const memory::DeviceStats st = memory::stats(dev);
  s.peak_allocated = st.allocated_bytes.peak;
  for (int t = 0; t < memory::kNumTags; ++t) s.tag_peak[size_t(t)] = st.tag_bytes[size_t(t)].peak;
  std::vector<double> timed(ms.begin() + std::min<size_t>(2, ms.size() / 2), ms.end());  // past the warm-up
  std::sort(timed.begin(), timed.end());
  s.step_ms = timed.empty() ? 0 : timed[timed.size() / 2];
  s.val_loss = validate(m, r);
  s.params = 0;
  for (const Tensor& p : m.parameters()) s.params += p.numel();
  s.model_bytes = int64_t(quant::model_bytes(m));
  return s;
}

// ||g(batch 32) - g(8 x 4)|| / ||g(batch 32)|| on the first batch, from the initial weights.
double accumulation_gradient_difference(Bert& m, const Run& r, int64_t accum) {
  std::vector<Tensor> one, many;
  for (int64_t k : {int64_t(1), accum}) {
    auto dl = loader(r, r.f.batch / k);
    std::vector<data::Batch> micro;
    for (data::Batch& b : *dl) {
      micro.push_back(b.to(m.parameters().front().device()));
      if (int64_t(micro.size()) == k) break;
    }
    int64_t total = 0;
    for (const data::Batch& mb : micro) total += labelled(mb);
    nn::GradAccumulator acc{static_cast<double>(total)};
    for (const data::Batch& mb : micro)
      acc.backward(m.mlm_loss(mb[0], mb[1], Tensor(), mb.padding_mask), double(labelled(mb)));
    for (const Tensor& p : m.parameters()) (k == 1 ? one : many).push_back(p.grad().clone());
    for (const Tensor& p : m.parameters()) p.grad().zero_();
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    const Tensor d = one[i] - many[i];
    num += (d * d).sum().item();
    den += (one[i] * one[i]).sum().item();
  }
  return std::sqrt(num / den);
}

void print_table(const std::vector<Stage>& stages) {
  std::printf("%-8s %6s %9s %9s %9s %9s %9s %9s %9s %8s %8s %10s\n", "stage", "steps", "peak MiB", "act MiB",
              "param", "grad", "optim", "temp", "work", "ms/step", "loss", "val loss");
  using memory::Tag;
  for (const Stage& s : stages)
    std::printf("%-8s %6lld %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %8.2f %8.4f %10.4f\n", s.name.c_str(),
                (long long)s.steps, double(s.peak_allocated) / 1048576.0,
                double(tag_peak(s, Tag::activation)) / 1048576.0, double(tag_peak(s, Tag::parameter)) / 1048576.0,
                double(tag_peak(s, Tag::gradient)) / 1048576.0, double(tag_peak(s, Tag::optimizer_state)) / 1048576.0,
                double(tag_peak(s, Tag::temporary)) / 1048576.0, double(tag_peak(s, Tag::workspace)) / 1048576.0,
                s.step_ms, s.loss, s.val_loss);
}

std::string stage_json(const Stage& s) {
  std::string tags;
  for (int t = 0; t < memory::kNumTags; ++t)
    tags += str(t ? "," : "", "\"", memory::tag_name(memory::Tag(t)), "\":", s.tag_peak[size_t(t)]);
  return str("{\"name\":\"", s.name, "\",\"steps\":", s.steps, ",\"step_ms\":", s.step_ms, ",\"loss\":", s.loss,
             ",\"val_loss\":", s.val_loss, ",\"peak_allocated_bytes\":", s.peak_allocated,
             ",\"activation_peak_bytes\":", tag_peak(s, memory::Tag::activation), ",\"tag_peak_bytes\":{", tags,
             "},\"params\":", s.params, ",\"model_bytes\":", s.model_bytes, "}");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"examples/bert: masked-LM pretraining of a small BERT and its memory stages (docs/bert.md)", "bert"};
  cli::init(app);
  Flags f;
  app.add_option("--data", f.data, "text corpus: one sequence per non-empty line")->capture_default_str();
  app.add_option("--steps", f.steps, "training steps of the batch32 stage (the trained model)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--stage-steps", f.stage_steps, "training steps of the accum, bf16 and f16 stages")
      ->transform(cli::integer(3))
      ->capture_default_str();
  app.add_option("--finetune-steps", f.finetune_steps, "fine-tuning steps after pruning")
      ->transform(cli::integer(0))
      ->capture_default_str();
  app.add_option("--batch", f.batch, "lines per step")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--accum", f.accum, "micro-batches per step in the accumulation stages (divides --batch)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--max-len", f.max_len, "tokens per line at most, [CLS] and [SEP] included")
      ->transform(cli::integer(3, 100000))
      ->capture_default_str();
  app.add_option("--layers", f.layers, "encoder layers")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--heads", f.heads, "attention heads")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--hidden", f.hidden, "hidden size (a multiple of --heads)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--intermediate", f.intermediate, "MLP width (a multiple of --hidden)")
      ->transform(cli::integer(1))
      ->capture_default_str();
  app.add_option("--lr", f.lr, "AdamW learning rate")->transform(cli::number({.lo = 0, .lo_open = true}))->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "AdamW weight decay")
      ->transform(cli::number({.lo = 0}))
      ->capture_default_str();
  app.add_option("--dropout", f.dropout, "hidden dropout (attention dropout stays 0: the fused attention has none)")
      ->transform(cli::number({.lo = 0, .hi = 1, .hi_open = true}))
      ->capture_default_str();
  app.add_option("--prune", f.prune, "fraction of heads and MLP channels pruned in the pruned stage")
      ->transform(cli::number({.lo = 0, .hi = 1, .hi_open = true}))
      ->capture_default_str();
  app.add_option("--threads", f.threads, "compute threads")->transform(cli::integer(1))->capture_default_str();
  app.add_option("--device", f.device,
                 "train on this device: cpu, cuda, cuda:N (or a virtual cpu:N); the int8 stage runs on the CPU")
      ->transform(cli::device())
      ->capture_default_str();
  app.add_option("--workers", f.workers, "DataLoader worker threads")->transform(cli::integer(0))->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the weights, the masks and the order")
      ->transform(cli::integer(0))
      ->capture_default_str();
  app.add_option("--eval-every", f.eval_every, "print the validation loss every N steps (0: never)")
      ->transform(cli::integer(0))
      ->capture_default_str();
  app.add_option("--save-init", f.save_init, "write the initial weights as a Hugging Face BertForMaskedLM here");
  app.add_flag("--json", f.json, "print one JSON line with every figure on stdout");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    SNUG_FLAG_CHECK(f.batch % f.accum == 0, "--accum ", f.accum, " must divide --batch ", f.batch);
    SNUG_FLAG_CHECK(f.hidden % f.heads == 0, "--hidden ", f.hidden, " must be a multiple of --heads ", f.heads);
    SNUG_FLAG_CHECK(f.intermediate % f.hidden == 0, "--intermediate ", f.intermediate, " must be a multiple of --hidden ",
                    f.hidden);
    set_num_threads(int(f.threads));
    Run r{f, read_corpus(f.data, f.max_len), {}, nullptr, nullptr};
    BertConfig& c = r.cfg;
    c.vocab = r.corpus.vocab(), c.hidden = f.hidden, c.layers = f.layers, c.heads = f.heads;
    c.intermediate = f.intermediate, c.max_position = f.max_len, c.dropout = f.dropout, c.attention_dropout = 0.0;
    r.train_set = std::make_shared<MlmDataset>(r.corpus.train, uint64_t(f.seed), 0, c.vocab);
    r.val_set = std::make_shared<MlmDataset>(r.corpus.val, uint64_t(f.seed), 1, c.vocab);
    SNUG_FLAG_CHECK(r.train_set->size() >= f.batch, "--batch ", f.batch, " is more than the ", r.train_set->size(),
                    " training lines");
    if (!f.json)
      std::fprintf(stderr, "corpus %s: %zu training and %zu validation lines, vocabulary %lld\n", f.data.c_str(),
                   r.corpus.train.size(), r.corpus.val.size(), (long long)c.vocab);

    manual_seed(uint64_t(f.seed));
    const Bert init(c);
    const std::map<std::string, Tensor> init_state = [&] {
      std::map<std::string, Tensor> s;
      for (auto& [n, t] : init.named_parameters()) s[n] = t.detach().clone();
      return s;
    }();
    if (!f.save_init.empty()) nn::models::save_hf_bert(init, f.save_init);
    auto fresh = [&] {  // the initial weights, every stage
      memory::TagScope tag(memory::Tag::parameter);
      auto m = std::make_shared<Bert>(c);
      autograd::NoGradGuard ng;
      for (auto& [n, t] : m->named_parameters()) t.copy_(init_state.at(n));
      if (const Device d(f.device); d != kCPU) m->to(d);
      return m;
    };

    std::vector<Stage> stages;
    double grad_diff = 0;
    {
      auto m = fresh();
      grad_diff = accumulation_gradient_difference(*m, r, f.accum);
    }
    // batch32: the recipe, trained --steps (the model the compression stages start from).
    auto trained = fresh();
    nn::optim::AdamW opt = make_optimizer(*trained, f);
    stages.push_back(train("batch32", *trained, opt, r, f.steps, 1, Amp::none));
    const int64_t short_steps = std::min(f.stage_steps, f.steps);
    // The memory stages: the same start, the same batches, --stage-steps each.
    Stage ref32;
    {
      auto m = fresh();
      auto o = make_optimizer(*m, f);
      ref32 = train("batch32", *m, o, r, short_steps, 1, Amp::none);
    }
    for (auto [name, amp] : {std::pair{"accum", Amp::none}, {"bf16", Amp::bf16}, {"f16", Amp::f16}}) {
      auto m = fresh();
      auto o = make_optimizer(*m, f);
      stages.push_back(train(name, *m, o, r, short_steps, f.accum, amp));
    }
    // pruned: half the heads and MLP channels of the trained encoder, compacted, fine-tuned.
    const int64_t params_trained = stages[0].params;
    for (size_t i = 0; i < trained->encoder->layers->size(); ++i) {
      auto blk = trained->encoder->layers->at<nn::TransformerBlock>(i);
      prune::attention_heads(*blk->attn, f.prune);
      prune::output_channels(*blk->fc, f.prune);
    }
    const double val_pruned = validate(*trained, r);
    const prune::CompactReport rep = prune::compact(*trained, &opt);
    const double val_compacted = validate(*trained, r);
    Stage pruned = train("pruned", *trained, opt, r, std::max<int64_t>(f.finetune_steps, 1), 1, Amp::none);
    stages.push_back(pruned);
    // int8: the pruned encoder's Linears quantized, on the CPU (quant/: int8 kernels are CPU kernels).
    prune::remove_all(*trained);
    trained->to(kCPU);
    quant::quantize_dynamic(*trained);
    Stage q;
    q.name = "int8";
    q.val_loss = validate(*trained, r);
    for (const Tensor& p : trained->parameters()) q.params += p.numel();
    q.model_bytes = int64_t(quant::model_bytes(*trained));
    stages.push_back(q);

    const Stage& accum = stages[1];
    const double act_accum = double(tag_peak(accum, memory::Tag::activation)) /
                             double(std::max<int64_t>(1, tag_peak(ref32, memory::Tag::activation)));
    const double act_bf16 = double(tag_peak(stages[2], memory::Tag::activation)) /
                            double(std::max<int64_t>(1, tag_peak(accum, memory::Tag::activation)));
    const double act_f16 = double(tag_peak(stages[3], memory::Tag::activation)) /
                           double(std::max<int64_t>(1, tag_peak(accum, memory::Tag::activation)));
    if (f.json) {
      std::string st;
      for (const Stage& s : stages) st += (st.empty() ? "" : ",") + stage_json(s);
      std::printf(
          "{\"program\":\"bert\",\"device\":\"%s\",\"cpu_isa\":\"%s\",\"steps\":%lld,\"stage_steps\":%lld,\"batch\":%lld,\"accum\":%lld,"
          "\"vocab\":%lld,\"val_loss\":%.6f,\"accum_grad_rel_diff\":%.3e,\"batch32_stage\":%s,"
          "\"activation_ratio_accum\":%.4f,\"activation_ratio_bf16\":%.4f,\"activation_ratio_f16\":%.4f,"
          "\"params_trained\":%lld,\"params_pruned\":%lld,\"val_loss_pruned_before_compact\":%.6f,"
          "\"val_loss_compacted\":%.6f,\"stages\":[%s]}\n",
          Device(f.device).str().c_str(), cpu_isa().c_str(), (long long)f.steps, (long long)short_steps, (long long)f.batch, (long long)f.accum,
          (long long)c.vocab, stages[0].val_loss, grad_diff, stage_json(ref32).c_str(), act_accum, act_bf16, act_f16,
          (long long)params_trained, (long long)pruned.params, val_pruned, val_compacted, st.c_str());
    } else {
      std::printf("BERT %lld layers, hidden %lld, %lld heads, vocabulary %lld; batch %lld, accumulation %lld x %lld\n",
                  (long long)c.layers, (long long)c.hidden, (long long)c.heads, (long long)c.vocab, (long long)f.batch,
                  (long long)f.accum, (long long)(f.batch / f.accum));
      std::printf("the %lld-step stages against batch32 over the same %lld steps:\n", (long long)short_steps,
                  (long long)short_steps);
      std::vector<Stage> table{ref32};
      table.insert(table.end(), stages.begin() + 1, stages.begin() + 4);
      print_table(table);
      std::printf("training and compression:\n");
      std::vector<Stage> rest{stages[0], stages[4]};
      print_table(rest);
      std::printf("int8: %lld parameters left in float, model %.2f MiB (trained %.2f MiB), val loss %.4f\n",
                  (long long)q.params, double(q.model_bytes) / 1048576.0, double(stages[0].model_bytes) / 1048576.0,
                  q.val_loss);
      std::printf("gradients of 8 x 4 against 32: relative difference %.2e\n", grad_diff);
      std::printf("activation peak: accum / batch32 %.3f, bf16 / f32 %.3f, f16 / f32 %.3f\n", act_accum, act_bf16,
                  act_f16);
      std::printf("pruned: %lld -> %lld parameters (%s), val loss %.4f -> pruned %.4f, compacted %.4f, fine-tuned %.4f\n",
                  (long long)params_trained, (long long)pruned.params, rep.layers.empty() ? "nothing compacted" : "compacted",
                  stages[0].val_loss, val_pruned, val_compacted, pruned.val_loss);
    }
    return 0;
  } catch (const std::exception& e) {
    return cli::exit_status("bert", e);
  }
}

// SPDX-License-Identifier: MIT
// The model's shape, its optimizer, and what charlm does with a trained
// model: the validation loss and a sample of text.
#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/nn/functional.h>
#include <snug/nn/optim/adamw8bit.h>

#include "charlm/charlm.h"

namespace charlm {

// NOTE [ charlm resume ]: the model's shape comes from the --resume file
// when it records one (nn::models::GPTConfig::to_metadata, written by
// --save), so a resumed run needs no shape flags; a shape flag given anyway
// must agree with the file. Without --resume, or for a file that records no
// shape (older charlm files have no gpt.dropout; that reads as 0), the flags
// and their defaults give it.
nn::models::GPTConfig model_config(const Flags& fl, const Corpus& corpus,
                                   const std::map<std::string, std::string>& resume_md) {
  const std::string& data_path = fl.data;
  nn::models::GPTConfig cfg;
  cfg.vocab = static_cast<int64_t>(corpus.itos.size());
  cfg.layers = fl.layers;
  cfg.heads = fl.heads;
  cfg.embd = fl.embd;
  cfg.block = fl.block;
  cfg.dropout = fl.dropout;
  if (fl.has("resume")) {
    const std::string& path = fl.resume;
    if (auto saved = nn::models::GPTConfig::from_metadata(resume_md, path)) {
      auto agree = [&](const char* flag, const char* field, auto given, auto in_file) {
        SNUG_FLAG_CHECK(!fl.has(flag) || given == in_file, "--", flag, " ", given, " contradicts the checkpoint's ",
                        field, " = ", in_file, " (", path, "); drop the flag to use the file's");
      };
      agree("layers", "layers", cfg.layers, saved->layers);
      agree("heads", "heads", cfg.heads, saved->heads);
      agree("embd", "embd", cfg.embd, saved->embd);
      agree("block", "block", cfg.block, saved->block);
      agree("dropout", "dropout", cfg.dropout, saved->dropout);
      SNUG_FLAG_CHECK(saved->vocab == cfg.vocab, "--data \"", data_path, "\" has ", cfg.vocab,
                      " distinct characters but the checkpoint's vocab = ", saved->vocab, " (--resume ", path,
                      "); resume with the --data it was trained on");
      return *saved;
    }
  }
  SNUG_FLAG_CHECK(cfg.embd % cfg.heads == 0, "--embd ", cfg.embd, " must be a multiple of --heads ", cfg.heads);
  try {
    cfg.validate();
  } catch (const ValueError& e) {  // what the flags above did not catch is still a bad flag
    cli::fail("the model flags (--layers, --heads, --embd, --block, --dropout): ", e.what());
  }
  return cfg;
}

Optimizer make_optimizer(nn::models::GPT& model, const Flags& fl, const std::map<std::string, std::string>& resume_md) {
  const double lr = fl.lr;
  // Weight decay on matrices only (embeddings, Linear weights), as nanoGPT does.
  nn::optim::ParamGroup decay, no_decay;
  for (auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  decay.lr = no_decay.lr = lr;
  decay.weight_decay = 0.1;
  // --optim adamw8bit keeps the moments of tensors >= 4096 elements in 8 bits (nn/optim/adamw8bit.h).
  // NOTE [ charlm resume ]: a resumed run keeps the file's optimizer.
  const auto saved_optim = resume_md.find("charlm.optim");
  const std::string optim_name = fl.has("optim") || saved_optim == resume_md.end() ? fl.optim : saved_optim->second;
  SNUG_CHECK(optim_name == "adamw" || optim_name == "adamw8bit", ValueError,
             "charlm: the checkpoint's optim = ", optim_name, " is not adamw or adamw8bit (", fl.resume, ")");
  SNUG_FLAG_CHECK(saved_optim == resume_md.end() || saved_optim->second == optim_name, "--optim ", optim_name,
                  " contradicts the checkpoint's optim = ", saved_optim->second, " (", fl.resume,
                  "); drop the flag to use the file's");
  Optimizer o;
  o.name = optim_name;
  if (optim_name == "adamw8bit")
    o.opt = std::make_unique<nn::optim::AdamW8bit>(std::vector<nn::optim::ParamGroup>{decay, no_decay},
                                                   nn::optim::AdamW8bitOptions{lr, 0.9, 0.99, 1e-8, 0.1});
  else
    o.opt = std::make_unique<nn::optim::AdamW>(std::vector<nn::optim::ParamGroup>{decay, no_decay},
                                               nn::optim::AdamWOptions{lr, 0.9, 0.99, 1e-8, 0.1});
  return o;
}

double evaluate(nn::models::GPT& model, const LogitsFn& logits_of, const std::vector<int64_t>& data, int64_t B,
                int64_t T, int64_t batches, uint64_t seed, Amp amp, int64_t chunk) {
  NoGradGuard ng;
  AutocastGuard ac(amp.value_or(DType::bf16), amp.has_value());
  model.eval();
  Generator gen(seed);  // the same batches at every evaluation
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    auto [x, y] = get_batch(data, B, T, gen);
    if (chunk >= B) {  // the whole batch at once (the mean over its B * T tokens)
      Tensor logits = logits_of(x);
      total +=
          nn::functional::cross_entropy(logits.view({-1, model.cfg.vocab}), y.to(logits.device()).reshape({-1})).item();
      continue;
    }
    double sum = 0;  // the batch's summed loss, chunk by chunk
    for (int64_t s = 0; s < B; s += chunk) {
      const int64_t n = std::min(chunk, B - s);
      Tensor logits = logits_of(x.narrow(0, s, n).contiguous());
      sum += nn::functional::cross_entropy(logits.view({-1, model.cfg.vocab}),
                                           y.narrow(0, s, n).contiguous().to(logits.device()).reshape({-1}))
                 .item() *
             static_cast<double>(n);
    }
    total += sum / static_cast<double>(B);
  }
  model.train();
  return total / static_cast<double>(batches);
}

std::string generate(nn::models::GPT& model, const LogitsFn& logits_of, const Corpus& c, int64_t n, uint64_t seed,
                     Amp amp) {
  NoGradGuard ng;
  AutocastGuard ac(amp.value_or(DType::bf16), amp.has_value());
  model.eval();
  Generator gen(seed);
  std::vector<int64_t> ctx = {c.stoi.count('\n') ? c.stoi.at('\n') : 0};
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ctx.size()) - model.cfg.block);
    std::vector<int64_t> window(ctx.begin() + start, ctx.end());
    Tensor x = from_vector(window, {1, static_cast<int64_t>(window.size())});
    Tensor logits = logits_of(x).select(1, -1).select(0, 0).to(kCPU).to(DType::f32);  // (V)
    std::vector<float> p = softmax(logits, 0).to_vector<float>();
    double u = rand({1}, DType::f64, &gen).item(), acc = 0;
    int64_t pick = static_cast<int64_t>(p.size()) - 1;
    for (size_t k = 0; k < p.size(); ++k) {
      acc += p[k];
      if (u < acc) {
        pick = static_cast<int64_t>(k);
        break;
      }
    }
    ctx.push_back(pick);
    out.push_back(c.itos[pick]);
  }
  model.train();
  return out;
}

}  // namespace charlm

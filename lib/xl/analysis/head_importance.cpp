#include "xl/analysis/head_importance.h"

#include "xl/train/batcher.h"
#include "xl/util/error.h"
#include "xl/util/signals.h"

namespace xl::analysis {
namespace {

// Each batch's |dL/d mask| averaged over the batches, 0 beyond a layer's heads; undefined when a
// stop signal ended the pass.
torch::Tensor raw_scores(model::TransformerXL& model, const std::vector<int32_t>& ids, const ImportanceSettings& s,
                         int& stopped_by) {
  const auto& cfg = model->config;
  const bool was_training = model->is_training();
  model->eval();  // dropout off
  auto opts = model->parameters().front().options();
  torch::Tensor base = s.head_mask.defined() ? s.head_mask.to(opts).detach().clone() : torch::ones({cfg.n_layer, cfg.n_head}, opts);
  const int64_t streams = std::max<int64_t>(1, std::min<int64_t>(s.batch_size, static_cast<int64_t>(ids.size()) / 2));
  train::StreamBatcher batcher(ids, streams, s.tgt_len);
  train::Cursor cursor;
  model::Memory memory = model->new_memory();
  model::ForwardOptions fo;
  fo.mem_len = s.mem_len;
  fo.cmem_len = s.cmem_len;
  torch::Tensor total = torch::zeros({cfg.n_layer, cfg.n_head}, opts);
  int64_t batches = 0, tokens = 0;
  do {
    auto seg = batcher.next(&cursor);
    torch::Tensor mask = base.clone().requires_grad_(true);
    fo.head_mask = mask;
    torch::Tensor loss;
    {
      compute::AutocastScope autocast(s.precision, opts.device());
      loss = model->forward(seg.input.to(opts.device()), seg.target.to(opts.device()), memory, fo).mean();
    }
    auto grad = torch::autograd::grad({loss}, {mask})[0];
    total += grad.abs();
    ++batches;
    tokens += seg.input.numel();
    if (s.stop_on_signal && (stopped_by = signals::pending())) break;
  } while (cursor.epoch == 0 && cursor.offset < batcher.stream_length() - 1 && (s.max_tokens <= 0 || tokens < s.max_tokens));
  if (was_training) model->train();
  if (stopped_by) return {};
  torch::Tensor scores = (total / static_cast<double>(batches)).to(torch::kFloat32).cpu();
  for (int64_t l = 0; l < cfg.n_layer; ++l)
    if (cfg.heads_in_layer(l) < cfg.n_head) scores[l].slice(0, cfg.heads_in_layer(l)).zero_();
  return scores;
}

}  // namespace

Importance head_importance(model::TransformerXL& model, const std::vector<int32_t>& ids, const ImportanceSettings& s,
                           EvalCache* cache) {
  Importance out;
  std::string key;
  if (cache && cache->enabled()) {
    key = EvalCache::key(EvalCache::importance_key(model, ids, s), model->config, s.head_mask);
    if (auto kept = cache->find_scores(key)) {
      out.scores = *kept;
      out.kept = true;
    }
  }
  if (!out.kept) {
    out.scores = raw_scores(model, ids, s, out.stopped_by);
    if (out.stopped_by) return out;
    if (cache) cache->add_scores(key, out.scores);
  }
  if (s.normalize_layers) {
    auto norm = out.scores.pow(2).sum(-1, true).sqrt().clamp_min(1e-20);
    out.scores = out.scores / norm;
  }
  return out;
}

}  // namespace xl::analysis

#include "xl/train/training_run.h"

#include <cmath>
#include <csignal>

#include "xl/model/cross_head.h"
#include "xl/model/skip_retain.h"
#include "xl/util/error.h"
#include "xl/util/log.h"
#include "xl/util/resources.h"

namespace xl::train {

void Trainer::forward_backward(Step* step) {
  Step& out = *step;
  if (phase1_) out.skips = model::draw_skips(gen_.skip, p_skip_);
  const auto perms = model::draw_cross_head(gen_.cross_head, cfg_.sch_beta, model_->heads_per_layer());
  for (const auto& p : perms) out.crossed.push_back(!p.empty());
  const Segment seg = batcher_->next(&cursor_);
  if (seg.new_epoch)
    for (auto& m : memories_) m.reset();
  out.memory_age = memories_[0].mean_gap();
  model_->train();
  model::ForwardOptions opts;
  opts.mem_len = cfg_.mem_len;
  opts.cmem_len = cfg_.cmem_len;
  const bool compression_losses = cfg_.cmem_len > 0 && (cfg_.cmem_ar_weight > 0 || cfg_.cmem_ae_weight > 0);
  double ar_sum = 0, ae_sum = 0;
  int64_t ar_chunks = 0, ae_chunks = 0;
  opts.skip = out.skips;
  opts.perms = perms;
  // This rank's streams, in batch chunks of their own memory each.
  const int64_t chunks = cfg_.batch_chunk, rows = rank_rows() / chunks, t = seg.input.size(1);
  const int64_t first = dist_.rank * rank_rows();
  const torch::Tensor input = seg.input.slice(0, first, first + rank_rows()).to(device_);
  const torch::Tensor target = seg.target.slice(0, first, first + rank_rows()).to(device_);
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  double loss_sum = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    auto in = input.slice(0, c * rows, (c + 1) * rows), tg = target.slice(0, c * rows, (c + 1) * rows);
    torch::Tensor loss;
    model::CompressionLosses losses;
    opts.losses = compression_losses ? &losses : nullptr;
    {
      compute::AutocastScope autocast(precision_, device_);
      loss = model_->forward(in, tg, memories_[static_cast<size_t>(c)], opts).mean();
    }
    // Adaptive span's term and the compression's losses join the objective, not the reported loss.
    torch::Tensor objective = model_->config.adaptive_span ? loss + model_->span_loss(out.skips).to(loss.device()) : loss;
    if (losses.attention_reconstruction.defined() && cfg_.cmem_ar_weight > 0)
      objective = objective + cfg_.cmem_ar_weight * losses.attention_reconstruction.to(loss.scalar_type());
    if (losses.auto_encoding.defined() && cfg_.cmem_ae_weight > 0)
      objective = objective + cfg_.cmem_ae_weight * losses.auto_encoding.to(loss.scalar_type());
    if (c + 1 == chunks) sync_->arm();  // the gradients are final in this backward pass
    (objective * (loss_scale / static_cast<double>(chunks))).backward();
    loss_sum += loss.item<double>();
    if (losses.attention_reconstruction.defined()) ar_sum += losses.attention_reconstruction.item<double>(), ++ar_chunks;
    if (losses.auto_encoding.defined()) ae_sum += losses.auto_encoding.item<double>(), ++ae_chunks;
  }
  sync_->finish();
  out.loss = loss_sum / static_cast<double>(chunks);
  out.cmem_ar = ar_chunks ? ar_sum / static_cast<double>(ar_chunks) : NAN;
  out.cmem_ae = ae_chunks ? ae_sum / static_cast<double>(ae_chunks) : NAN;
  out.tokens = cfg_.batch_size * t;
}

Trainer::Step Trainer::train_step() {
  const auto t0 = Clock::now();
  Step out;
  // What the step changes before its update. A step that fails (runs out of memory) puts them
  // back: the run is then as the last whole step left it, and can be saved.
  const Cursor cursor_before = cursor_;
  const std::vector<model::Memory> memories_before = memories_;
  const Generators::Saved generators_before = gen_.save();
  try {
    forward_backward(&out);
  } catch (...) {
    cursor_ = cursor_before;
    memories_ = memories_before;
    gen_.put_back(generators_before);
    adam_->clear_grads();
    step_undone_ = true;
    throw;
  }
  state_.tokens_seen += out.tokens;
  ++state_.step;
  // fp16: gradients that overflowed skip the update (the data is consumed) and shrink the scale.
  if (scaler_) {
    const bool finite = scaler_->unscale(model_->parameters());
    scaler_->update(finite);
    if (!finite) {
      ++state_.skipped_steps;
      XL_WARN("step " << state_.step << ": fp16 gradients overflowed; update skipped, loss scale now "
                      << scaler_->scale() << " (" << state_.skipped_steps << " skipped so far)");
      adam_->clear_grads();
      out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      return out;
    }
  }
  out.grad_norm = adam_->grad_norm();
  const int64_t done = state_.step - 1 - state_.schedule_origin;
  // Above eta-min 0 only: a cosine down to 0 ends the phase instead (run()).
  if (!warned_schedule_end_ && schedule_.eta_min != 0 && schedule_.end() >= 0 && done >= schedule_.end()) {
    warned_schedule_end_ = true;
    XL_WARN("the " << schedule_.kind << " schedule ended at step " << state_.schedule_origin + schedule_.end()
                   << " (schedule-steps " << schedule_.steps << "): training goes on at eta-min " << schedule_.eta_min);
  }
  state_.last_lr = schedule_.at(done);
  adam_->step(state_.last_lr, clip_factor(out.grad_norm, cfg_.clip));
  model_->clamp_spans();
  adam_->clear_grads();
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

// One all-reduce per step: the mean losses for the logs, and the stop decisions, so that every rank
// validates, saves and stops at the same step (wall clocks and signals differ between processes).
Trainer::Vote Trainer::vote(const Step& st, int signal, bool budget_spent, bool checkpoint, bool metrics_failed) {
  Vote v;
  const double loss = st.loss;
  if (dist_.single()) return {loss, st.cmem_ar, st.cmem_ae, signal != 0 || budget_spent, signal, checkpoint, metrics_failed};
  // The compression's losses are NaN on every rank alike (no compression yet) or on none.
  std::vector<torch::Tensor> t = {torch::tensor({loss, static_cast<double>(signal), budget_spent ? 1.0 : 0.0,
                                                 std::isfinite(loss) ? 0.0 : 1.0, checkpoint ? 1.0 : 0.0,
                                                 metrics_failed ? 1.0 : 0.0, st.cmem_ar, st.cmem_ae},
                                                torch::kDouble)};
  comm_->all_reduce_sum(t, "the step's vote");
  auto a = t[0].accessor<double, 1>();
  v.loss = a[3] > 0 ? NAN : a[0] / dist_.world;
  v.signal = a[1] > 0 ? (signal ? signal : SIGTERM) : 0;
  v.stop = a[1] > 0 || a[2] > 0;
  v.checkpoint = a[4] > 0;
  v.metrics_failed = a[5] > 0;
  v.cmem_ar = a[6] / dist_.world;
  v.cmem_ae = a[7] / dist_.world;
  return v;
}

// Seconds until the budget that binds first is spent, at this process's pace so far; -1 without a budget.
double Trainer::eta() const {
  const double used = budget_used(cfg_, state_, phase_elapsed());
  const double progress = used - used_at_start_, seconds = phase_elapsed() - elapsed_before_;
  return used >= 0 && progress > 0 ? std::max(0.0, 1 - used) * seconds / progress : -1;
}

void Trainer::log_window() {
  if (window_->steps() == 0) return;
  nlohmann::json ev = window_->event(metric_, phase1_, cfg_.sch_beta > 0);
  ev.update({{"step", state_.step}, {"epoch", batcher_->epoch_progress(cursor_)}, {"tokens", state_.tokens_seen},
             {"lr", state_.last_lr}, {"elapsed", phase_elapsed()}, {"rss_mb", rss_mb()}});
  if (scaler_) ev.update({{"loss_scale", scaler_->scale()}, {"skipped_steps", state_.skipped_steps}});
  if (phase1_) ev["expected_context"] = model::expected_context(p_skip_, cfg_.mem_len);
  metrics_.write("train", ev);
  const std::string line = status_line(state_.step, batcher_->epoch_progress(cursor_), window_->mean_loss(), metric_,
                                       state_.last_lr, window_->tokens_per_s(), window_->seconds_per_step(), eta());
  if (progress_.live()) progress_.update(line);
  else progress_.print(line);
  window_->clear();
}

void Trainer::update_live_line() {
  if (!progress_.live() || window_->steps() == 0) return;
  progress_.update(status_line(state_.step, batcher_->epoch_progress(cursor_), window_->mean_loss(), metric_,
                               state_.last_lr, window_->tokens_per_s(), window_->seconds_per_step(), eta()));
}

}  // namespace xl::train

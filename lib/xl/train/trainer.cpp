#include "xl/train/trainer.h"

#include <chrono>
#include <cmath>

#include "xl/checkpoint/checkpoint.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/metric.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/cross_head.h"
#include "xl/model/model_io.h"
#include "xl/model/skip_retain.h"
#include "xl/model/transformer_xl.h"
#include "xl/train/adam.h"
#include "xl/train/batcher.h"
#include "xl/train/generators.h"
#include "xl/train/metrics.h"
#include "xl/train/phase_start.h"
#include "xl/train/train_log.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/progress.h"
#include "xl/util/resources.h"
#include "xl/util/signals.h"

namespace xl::train {

std::string best_path(const std::string& output) {
  const std::string ext = ".h5";
  if (output.size() > ext.size() && output.compare(output.size() - ext.size(), ext.size(), ext) == 0)
    return output.substr(0, output.size() - ext.size()) + ".best.h5";
  return output + ".best";
}

namespace {

using Clock = std::chrono::steady_clock;

// A memory list per batch chunk, named "c<chunk>." in checkpoints.
std::string chunk_prefix(size_t c) { return "c" + std::to_string(c) + "."; }

class Trainer {
 public:
  explicit Trainer(const TrainRequest& req) : req_(req), progress_(req.progress) {}
  int run();

 private:
  void open_data();
  void build(PhaseStart start, const checkpoint::Checkpoint* from, const std::string& file);
  void train_step();
  bool validate();  // true when the stopping rule fires
  void save(bool best);
  checkpoint::Checkpoint snapshot() const;
  void log_window();
  void update_live_line();
  double phase_elapsed() const {
    return elapsed_before_ + std::chrono::duration<double>(Clock::now() - started_).count();
  }
  double eta() const;

  TrainRequest req_;
  Progress progress_;
  MetricsLog metrics_;
  std::unique_ptr<h5::TokensFile> tokens_;
  text::Vocab vocab_;
  eval::Metric metric_{text::VocabType::kByte};
  std::vector<int32_t> train_ids_, valid_ids_;

  TrainConfig cfg_;
  LrSchedule schedule_;
  checkpoint::RunState state_;
  model::TransformerXL model_{nullptr};
  std::unique_ptr<Adam> adam_;
  Generators gen_;
  std::unique_ptr<StreamBatcher> batcher_;
  Cursor cursor_;
  std::vector<model::Memory> memories_;  // one per batch chunk
  std::vector<double> p_skip_;
  bool phase1_ = true;

  Clock::time_point started_ = Clock::now();
  double elapsed_before_ = 0;  // seconds of this phase before this process (a resumed run)
  int64_t start_step_ = 0;
  double used_at_start_ = 0;  // the fraction of the budget spent when this process started
  bool saved_once_ = false, warned_schedule_end_ = false;
  std::unique_ptr<TrainWindow> window_;
};

void Trainer::open_data() {
  const h5::TokensFile& tokens = *tokens_;
  vocab_ = tokens.vocab();
  metric_ = eval::Metric(vocab_.type());
  train_ids_ = tokens.read_split(cfg_.train_split);
  if (cfg_.eval_interval > 0 || tokens.has_split(cfg_.valid_split)) {
    if (tokens.has_split(cfg_.valid_split)) valid_ids_ = tokens.read_split(cfg_.valid_split);
    else tokens.read_split(cfg_.valid_split);  // fails with the file's available splits
  }
  XL_INFO(tokens.name() << ": " << train_ids_.size() << " training tokens, " << valid_ids_.size() << " validation tokens, "
                        << text::to_string(vocab_.type()) << " vocab of " << vocab_.size());
}

// The model, optimizer, generators, cursor and memories of the phase: new, or from `from`.
void Trainer::build(PhaseStart start, const checkpoint::Checkpoint* from, const std::string& file) {
  for (const auto& note : start.notes) XL_INFO(note);
  cfg_ = start.config;
  schedule_ = start.schedule;
  state_ = start.state;
  phase1_ = cfg_.phase == "phase1";
  open_data();
  const bool resume = req_.resume;
  if (!from) {
    torch::manual_seed(cfg_.seed);
    model_ = model::TransformerXL(start.model);
    model_->reset_parameters(cfg_.seed);
  } else {
    model_ = model::TransformerXL(start.model);
    model::load_model_tensors(model_, from->model, file);
  }
  AdamOptions o{cfg_.adam_beta1, cfg_.adam_beta2, cfg_.adam_eps, cfg_.skipped_layers_in_adam == "step"};
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : model_->named_parameters(true)) params.emplace_back(p.key(), p.value());
  adam_ = std::make_unique<Adam>(params, o);
  if (from && (resume || !req_.reset_optimizer)) adam_->load_state(from->optimizer, file);
  if (from && !resume && req_.reset_optimizer) XL_INFO("phase 2: fresh optimizer state (--reset-optimizer)");

  // The run's random streams continue across the phase boundary, as they do across a resume.
  gen_ = Generators::seeded(cfg_.seed);
  if (from) gen_.load(from->rng, file);
  if (start.keep_cursor) {
    cursor_.epoch = state_.epoch;
    cursor_.offset = state_.offset;
  }
  memories_.assign(static_cast<size_t>(cfg_.batch_chunk), model_->new_memory());
  if (start.keep_memories)
    for (size_t c = 0; c < memories_.size(); ++c) {
      memories_[c] = model::Memory::from_tensors(from->memory, chunk_prefix(c), model_->config.n_layer, file);
      memories_[c].trim(cfg_.mem_len);
    }
  if (resume) elapsed_before_ = state_.current()->elapsed;
  p_skip_ = model::skip_probabilities(phase1_ ? model::parse_skip_schedule(cfg_.skip_schedule) : model::SkipSchedule::kNone,
                                      model_->config.n_layer, cfg_.skip_p);
  batcher_ = std::make_unique<StreamBatcher>(train_ids_, cfg_.batch_size, cfg_.tgt_len);
  window_ = std::make_unique<TrainWindow>(model_->config.n_layer);
}

checkpoint::Checkpoint Trainer::snapshot() const {
  checkpoint::Checkpoint ck;
  ck.phase = cfg_.phase;
  ck.model_config = model_->config.to_json();
  ck.train_config = cfg_.to_json();
  ck.state = state_;
  ck.state.epoch = cursor_.epoch;
  ck.state.offset = cursor_.offset;
  ck.state.phases.back().elapsed = phase_elapsed();
  ck.state.command_line = req_.command_line;
  ck.vocab = vocab_;
  ck.model = model::model_tensors(model_);
  ck.optimizer = adam_->state();
  gen_.to_tensors(&ck.rng);
  for (size_t c = 0; c < memories_.size(); ++c) memories_[c].to_tensors(chunk_prefix(c), &ck.memory);
  return ck;
}

void Trainer::save(bool best) {
  if (io::is_stdio(req_.output)) return;  // a checkpoint on stdout is written once, at the end
  auto ck = snapshot();
  checkpoint::save(req_.output, ck, true);
  saved_once_ = true;
  nlohmann::json ev = {{"step", state_.step}, {"path", req_.output}};
  if (best) {
    checkpoint::save(best_path(req_.output), ck, true);
    ev["best"] = best_path(req_.output);
  }
  metrics_.write("checkpoint", ev);
}

void Trainer::train_step() {
  const auto t0 = Clock::now();
  std::vector<bool> skips;
  if (phase1_) skips = model::draw_skips(gen_.skip, p_skip_);
  const auto perms = model::draw_cross_head(gen_.cross_head, cfg_.sch_beta, model_->heads_per_layer());
  const Segment seg = batcher_->next(&cursor_);
  if (seg.new_epoch)
    for (auto& m : memories_) m.reset();
  const double memory_age = memories_[0].mean_gap();
  model_->train();
  model::ForwardOptions opts;
  opts.mem_len = cfg_.mem_len;
  opts.skip = skips;
  opts.perms = perms;
  const int64_t chunks = cfg_.batch_chunk, rows = cfg_.batch_size / chunks, t = seg.input.size(1);
  double loss_sum = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    auto in = seg.input.slice(0, c * rows, (c + 1) * rows), tg = seg.target.slice(0, c * rows, (c + 1) * rows);
    torch::Tensor loss = model_->forward(in, tg, memories_[static_cast<size_t>(c)], opts).mean();
    (loss / static_cast<double>(chunks)).backward();
    loss_sum += loss.item<double>();
  }
  const double loss = loss_sum / static_cast<double>(chunks);
  if (!std::isfinite(loss)) {
    std::string keep = saved_once_ ? "; the last good checkpoint is " + req_.output : "";
    XL_FAIL(kExitDataErr, "training diverged at step " << state_.step + 1 << ": the loss is " << loss << keep);
  }
  const double norm = adam_->clip_grad_norm(cfg_.clip);
  const int64_t done = state_.step - state_.schedule_origin;
  if (!warned_schedule_end_ && schedule_.end() >= 0 && done >= schedule_.end()) {
    warned_schedule_end_ = true;
    XL_WARN("the " << schedule_.kind << " schedule ended at step " << state_.schedule_origin + schedule_.end()
                   << " (schedule-steps " << schedule_.steps << "): training goes on at eta-min " << schedule_.eta_min);
  }
  state_.last_lr = schedule_.at(done);
  adam_->step(state_.last_lr);
  adam_->clear_grads();
  ++state_.step;
  state_.tokens_seen += cfg_.batch_size * t;
  window_->add(loss, std::chrono::duration<double>(Clock::now() - t0).count(), cfg_.batch_size * t, norm, memory_age,
               skips);
}

// Seconds until the budget that binds first is spent, at this process's pace so far; -1 without a budget.
double Trainer::eta() const {
  const double used = budget_used(cfg_, state_, phase_elapsed());
  const double progress = used - used_at_start_, seconds = phase_elapsed() - elapsed_before_;
  return used >= 0 && progress > 0 ? std::max(0.0, 1 - used) * seconds / progress : -1;
}

void Trainer::log_window() {
  if (window_->steps() == 0) return;
  nlohmann::json ev = window_->event(metric_, phase1_);
  ev.update({{"step", state_.step}, {"epoch", batcher_->epoch_progress(cursor_)}, {"tokens", state_.tokens_seen},
             {"lr", state_.last_lr}, {"elapsed", phase_elapsed()}});
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

bool Trainer::validate() {
  if (valid_ids_.empty()) return false;
  eval::EvalSettings s;
  s.tgt_len = cfg_.effective_eval_tgt_len();
  s.mem_len = cfg_.effective_eval_mem_len();
  s.batch_size = cfg_.eval_batch_size;
  s.max_tokens = cfg_.eval_max_tokens;
  auto r = eval::evaluate(model_, valid_ids_, s);
  const double loss = r.loss();
  const bool improved = !state_.best_loss || loss < *state_.best_loss;
  if (improved) {
    state_.best_loss = loss;
    state_.best_step = state_.step;
  }
  state_.history.emplace_back(state_.step, loss);
  nlohmann::json ev = {{"step", state_.step}, {"loss", loss}, {metric_.name(), metric_.of(loss)}, {"tokens", r.tokens},
                       {"seconds", r.seconds}, {"new_best", improved}, {"best_step", state_.best_step}};
  metrics_.write("valid", ev);
  char line[160];
  std::snprintf(line, sizeof line, "valid step %lld | loss %.4f | %s %.4f", static_cast<long long>(state_.step), loss,
                metric_.name().c_str(), metric_.of(loss));
  progress_.print(std::string(line) + (improved ? " | new best" : " | best at step " + std::to_string(state_.best_step)));
  save(improved);
  // The paper's rule: stop once validation improves by less than min_delta over stop_window steps.
  if (cfg_.stop_window > 0) {
    double best_before = INFINITY;
    bool have = false;
    for (const auto& [step, l] : state_.history)
      if (step <= state_.step - cfg_.stop_window) {
        best_before = std::min(best_before, l);
        have = true;
      }
    if (have && best_before - *state_.best_loss < cfg_.stop_min_delta) return true;
  }
  return false;
}

int Trainer::run() {
  XL_CHECK(!(io::is_stdio(req_.tokens) && io::is_stdio(req_.init)), kExitUsage,
           "the tokens and --init cannot both come from stdin");
  if (req_.resume) {
    XL_CHECK(!io::is_stdio(req_.output), kExitUsage, "--resume needs -o FILE (the run's latest checkpoint)");
    XL_CHECK(io::exists(req_.output), kExitNoInput, req_.output << ": no checkpoint to resume from");
  } else if (!io::is_stdio(req_.output)) {
    XL_CHECK(req_.force || !io::exists(req_.output), kExitCantCreat,
             req_.output << ": already exists (use -f to overwrite, or --resume to continue that run)");
    io::AtomicOutput probe(req_.output, true, true);  // the directory must be writable now, not in an hour
  }
  tokens_ = std::make_unique<h5::TokensFile>(h5::TokensFile::open(req_.tokens));
  const std::string vocab_sha = tokens_->vocab().sha256();
  if (req_.resume) {
    const auto ckpt = checkpoint::load(req_.output, vocab_sha);
    build(resume_run(req_, ckpt, req_.output), &ckpt, req_.output);
  } else if (!req_.init.empty()) {
    const auto ckpt = checkpoint::load(req_.init, vocab_sha);
    const std::string file = io::display_name(req_.init);
    build(start_phase2(req_, ckpt, file), &ckpt, file);
  } else {
    build(start_new_run(req_, static_cast<int64_t>(tokens_->vocab().size())), nullptr, "");
  }
  if (!req_.metrics.empty()) metrics_ = MetricsLog(req_.metrics, req_.tool, req_.resume, req_.force);
  start_step_ = state_.step;
  used_at_start_ = budget_used(cfg_, state_, elapsed_before_);
  started_ = Clock::now();
  signals::catch_stop();

  nlohmann::json start = {{"step", state_.step}, {"phase", cfg_.phase}, {"parameters", model_->parameter_count()},
                          {"model", model_->config.to_json()}, {"train", cfg_.to_json()}, {"resumed", req_.resume},
                          {"phase_start_step", state_.current()->start_step}, {"schedule", state_.current()->schedule},
                          {"command_line", req_.command_line}};
  if (phase1_) {
    start["p_skip"] = p_skip_;
    start["expected_context"] = model::expected_context(p_skip_, cfg_.mem_len);
  }
  metrics_.write("start", start);
  progress_.print(std::string(req_.resume ? "resuming " : "starting ") + cfg_.phase + " at step " + std::to_string(state_.step) +
                  ": " + std::to_string(model_->parameter_count()) + " parameters" +
                  (phase1_ ? ", skip schedule " + cfg_.skip_schedule : std::string()) +
                  ", SCH beta " + std::to_string(cfg_.sch_beta).substr(0, 4));

  std::string reason;
  bool validated_now = false;
  while ((reason = budget_reached(cfg_, state_, phase_elapsed())).empty()) {
    train_step();
    validated_now = false;
    if (state_.step % cfg_.log_interval == 0) log_window();
    else update_live_line();
    if (cfg_.eval_interval > 0 && state_.step % cfg_.eval_interval == 0) {
      validated_now = true;
      if (validate()) {
        reason = "validation improved by less than " + std::to_string(cfg_.stop_min_delta) + " over " +
                 std::to_string(cfg_.stop_window) + " steps";
        break;
      }
    } else if (cfg_.save_every > 0 && state_.step % cfg_.save_every == 0) {
      save(false);
    }
    if (int sig = signals::pending()) {
      log_window();
      save(false);
      metrics_.write("done", {{"step", state_.step}, {"reason", "signal " + std::to_string(sig)}, {"peak_rss_mb", peak_rss_mb()}});
      progress_.print("stopped by signal " + std::to_string(sig) + " at step " + std::to_string(state_.step) +
                      (io::is_stdio(req_.output) ? "" : "; resume with --resume -o " + req_.output));
      return 128 + sig;
    }
  }
  log_window();
  if (!validated_now && !valid_ids_.empty() && state_.step > start_step_) {
    validated_now = true;
    validate();
  }
  if (!validated_now || valid_ids_.empty()) save(false);
  if (io::is_stdio(req_.output)) checkpoint::save("-", snapshot(), true);
  const double rss = peak_rss_mb();
  metrics_.write("done", {{"step", state_.step}, {"reason", reason}, {"tokens", state_.tokens_seen},
                          {"phase_steps", state_.step - state_.current()->start_step}, {"elapsed", phase_elapsed()},
                          {"best_loss", state_.best_loss ? nlohmann::json(*state_.best_loss) : nlohmann::json()},
                          {"peak_rss_mb", rss}});
  progress_.print("done at step " + std::to_string(state_.step) + ": " + reason + " (peak RSS " +
                  std::to_string(static_cast<int>(rss)) + " MB)");
  return 0;
}

}  // namespace

int run_training(const TrainRequest& request) {
  Trainer t(request);
  return t.run();
}

}  // namespace xl::train

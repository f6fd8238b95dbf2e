#include "xl/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <numeric>
#include <optional>
#include <cmath>
#include <csignal>
#include <filesystem>

#include "xl/checkpoint/checkpoint.h"
#include "xl/compute/device.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/metric.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/cross_head.h"
#include "xl/model/model_io.h"
#include "xl/model/skip_retain.h"
#include "xl/model/transformer_xl.h"
#include "xl/train/adam.h"
#include "xl/train/batcher.h"
#include "xl/train/distributed.h"
#include "xl/train/generators.h"
#include "xl/train/gradient_sync.h"
#include "xl/train/launcher.h"
#include "xl/train/loss_scale.h"
#include "xl/train/metrics.h"
#include "xl/train/phase_start.h"
#include "xl/train/train_log.h"
#include "xl/util/error.h"
#include "xl/util/failure.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"
#include "xl/util/log.h"
#include "xl/util/output_lock.h"
#include "xl/util/parse.h"
#include "xl/util/progress.h"
#include "xl/util/resources.h"
#include "xl/util/signals.h"

namespace xl::train {

std::string best_path(const std::string& output) {
  if (io::is_stream(output)) return "";
  const std::string ext = ".h5";
  if (output.size() > ext.size() && parse::ends_with(output, ext))
    return output.substr(0, output.size() - ext.size()) + ".best.h5";
  return output + ".best";
}

namespace {

// What a training checks of -o before it trains, and the lock it then holds on it (none for a
// stream): one writer per output, a checkpoint to resume from, nothing replaced without -f, a
// directory it can write now rather than in an hour.
std::unique_ptr<io::OutputLock> claim_output(const TrainRequest& req) {
  std::unique_ptr<io::OutputLock> lock;
  if (!io::is_stream(req.output)) lock = std::make_unique<io::OutputLock>(req.output);  // before it is read or replaced
  // The one writer of -o clears what a SIGKILLed writer left: a checkpoint half written (up to its
  // size again on disk for every kill), the best one's link.
  if (lock && lock->held())
    for (const std::string& file : {req.output, best_path(req.output)})
      for (const std::string& left : io::remove_stale_temps(file))
        XL_INFO("removed " << left << ", left unfinished by a training that was killed");
  if (req.resume) {
    XL_CHECK(!io::is_stream(req.output), kExitUsage, "--resume needs -o FILE (the run's latest checkpoint)");
    XL_CHECK(io::exists(req.output), kExitNoInput, req.output << ": no checkpoint to resume from");
    return lock;
  }
  // A device (/dev/null) is written through, never replaced.
  XL_CHECK(req.force || io::is_stream(req.output) || !io::is_file(req.output), kExitCantCreat,
           req.output << ": already exists (use -f to overwrite, or --resume to continue that run)");
  const std::string best = best_path(req.output);
  XL_CHECK(req.force || best.empty() || !io::exists(best), kExitCantCreat,
           best << ": already exists, the best checkpoint of an earlier run with -o " << req.output
                << " (remove it, or use -f to overwrite it)");
  io::AtomicOutput probe(req.output, true, true);  // and stdout is not a terminal
  return lock;
}

using Clock = std::chrono::steady_clock;

class Trainer {
 public:
  Trainer(const TrainRequest& req, const DistConfig& dist)
      : req_(req), dist_(dist), progress_(dist.rank == 0 ? req.progress : "never") {}
  int run();

 private:
  void open_data();
  // Opens the data and builds the model, the optimizer and the run's state (each rank alone).
  void set_up();
  void build(PhaseStart start, const checkpoint::Checkpoint* from, const std::string& file);
  // 78 when the ranks' data or settings differ (collective).
  void check_ranks_agree();
  struct Step {
    double loss = 0, seconds = 0, grad_norm = 0, memory_age = 0;
    int64_t tokens = 0;
    std::vector<bool> skips;
    std::vector<bool> crossed;  // per layer: cross-head attention fired
  };
  Step train_step();  // this rank's mean loss
  void forward_backward(Step* step);  // the step's draws, segment, losses and gradients
  bool validate();  // true when the stopping rule fires
  // A validation that failed on some rank: the step saved, then the run ends, said by the lowest
  // rank that failed (`failure`: its error, else nullopt).
  [[noreturn]] void stop_after_failed_validation(const std::optional<Failure>& failure);
  void save(bool best);
  void save_to_stream();
  // When the run stops early (a signal, metrics that cannot be written): this step saved once, the
  // last save checked, a stream given its checkpoint. Returns where the user finds it.
  std::string save_at_stop();
  // After the run's last save: 74 when it failed (with --on-save-error continue it only warned).
  void check_last_save() const;
  // This step's checkpoint is written (by a validation, --save-every or SIGUSR1). A failed write
  // is tried again in one process; with ranks, rank 0 alone knows of it (check_last_save).
  bool saved_this_step() const { return snapshot_step_ == state_.step && (dist_.single() ? !save_failed_ : true); }
  checkpoint::Checkpoint snapshot();  // collective: every rank takes part
  // --attention-probs resolved for this run (auto: keep while a step's fit the budget); returns
  // keep or recompute, and sets it for the CPU's attention kernel ("" on a GPU, whose kernels
  // keep what they keep).
  std::string choose_attention_probs();
  std::string attention_probs_;  // what choose_attention_probs() chose
  void log_window();
  void update_live_line();
  double phase_elapsed() const {
    return elapsed_before_ + std::chrono::duration<double>(Clock::now() - started_).count();
  }
  double eta() const;
  // Data parallel: this rank's streams of the global batch, and the decisions taken together.
  int64_t rank_rows() const { return cfg_.batch_size / dist_.world; }
  bool leader() const { return dist_.rank == 0; }
  struct Vote {
    double loss = 0;   // mean over the ranks
    bool stop = false; // a signal or a spent budget on any rank
    int signal = 0;
    bool checkpoint = false;  // SIGUSR1 on any rank
    bool metrics_failed = false;  // rank 0's metrics could not be written
  };
  Vote vote(double loss, int signal, bool budget_spent, bool checkpoint, bool metrics_failed);

  TrainRequest req_;
  DistConfig dist_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<io::OutputLock> output_lock_;  // rank 0's, while it writes -o
  std::unique_ptr<GradientSync> sync_;
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
  std::vector<model::Memory> memories_;  // one per batch chunk of this rank
  std::vector<double> p_skip_;
  bool phase1_ = true;
  torch::Device device_ = torch::kCPU;
  compute::Precision precision_ = compute::Precision::kFp32;
  std::unique_ptr<LossScaler> scaler_;  // fp16 only

  Clock::time_point started_ = Clock::now();
  double elapsed_before_ = 0;  // seconds of this phase before this process (a resumed run)
  int64_t start_step_ = 0;
  double used_at_start_ = 0;  // the fraction of the budget spent when this process started
  bool saved_once_ = false, save_failed_ = false, warned_schedule_end_ = false;
  int64_t saved_step_ = 0;  // of the last checkpoint written
  // The step of the last save every rank took part in. Whether to save is decided by each rank
  // (saving gathers from all of them), so it must rest on what all know alike: saved_step_ and
  // save_failed_ are rank 0's alone.
  int64_t snapshot_step_ = -1;
  bool step_undone_ = false;  // a step failed before its update and was put back (train_step)
  std::unique_ptr<TrainWindow> window_;
};

void Trainer::open_data() {
  const h5::TokensFile& tokens = *tokens_;
  vocab_ = tokens.vocab();
  metric_ = eval::Metric(vocab_.type());
  train_ids_ = tokens.read_split(cfg_.train_split, "--train-split picks another");
  if (cfg_.eval_interval > 0 || tokens.has_split(cfg_.valid_split))
    valid_ids_ = tokens.read_split(cfg_.valid_split, "--valid-split picks another, --eval-interval 0 trains without validation",
                                   eval::kMinEvalTokens);
  XL_INFO(tokens.name() << ": " << train_ids_.size() << " training tokens, " << valid_ids_.size() << " validation tokens, "
                        << text::to_string(vocab_.type()) << " vocab of " << vocab_.size());
}

// The model, optimizer, generators, cursor and memories of the phase: new, or from `from`.
void Trainer::build(PhaseStart start, const checkpoint::Checkpoint* from, const std::string& file) {
  check_steps_within_schedule(start);
  for (const auto& note : start.notes) XL_INFO(note);
  cfg_ = start.config;
  schedule_ = start.schedule;
  state_ = start.state;
  phase1_ = cfg_.phase == "phase1";
  open_data();
  const bool resume = req_.resume;
  // The precision is resolved for the device once and kept by the run unless given again.
  if (cfg_.precision == "auto" || req_.given.count("precision"))
    cfg_.precision = compute::to_string(compute::resolve_precision(req_.train.precision, device_));
  precision_ = compute::parse_precision(cfg_.precision);
  if (precision_ == compute::Precision::kFp16)
    scaler_ = std::make_unique<LossScaler>(state_.loss_scale > 0 ? state_.loss_scale : 65536.0, state_.loss_scale_good_steps);
  if (!from) {
    torch::manual_seed(cfg_.seed);
    model_ = model::TransformerXL(start.model, cfg_.seed);
  } else {
    model_ = model::TransformerXL(start.model, std::nullopt);
    model::load_model_tensors(model_, from->model, file);
  }
  model_->to(device_);
  AdamOptions o{cfg_.adam_beta1, cfg_.adam_beta2, cfg_.adam_eps, cfg_.skipped_layers_in_adam == "step"};
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : model_->named_parameters(true)) params.emplace_back(p.key(), p.value());
  adam_ = std::make_unique<Adam>(params, o, start.keep_optimizer ? &from->optimizer : nullptr, file);

  // The run's random streams continue across the phase boundary, as they do across a resume.
  gen_ = Generators::seeded(cfg_.seed, dist_.rank);
  if (start.keep_generators && !gen_.load(from->rng, file, dist_.rank))
    XL_WARN(file << " was written by fewer ranks: rank " << dist_.rank << "'s dropout masks draw afresh");
  if (start.keep_cursor) {
    cursor_.epoch = state_.epoch;
    cursor_.offset = state_.offset;
  }
  XL_CHECK(cfg_.batch_size % dist_.world == 0 && rank_rows() % cfg_.batch_chunk == 0, kExitUsage,
           "--batch-size " << cfg_.batch_size << " does not split into " << dist_.world << " ranks of "
                           << cfg_.batch_chunk << " batch chunks each");
  memories_.assign(static_cast<size_t>(cfg_.batch_chunk), model_->new_memory());
  if (start.keep_memories) {
    // Checkpoints keep the memory of all streams: each rank and chunk takes its rows.
    const model::Memory all = model::Memory::from_tensors(from->memory, model_->config.n_layer, file);
    const int64_t per_chunk = rank_rows() / cfg_.batch_chunk;
    XL_CHECK(all.batch_size() == 0 || all.batch_size() == cfg_.batch_size, kExitDataErr,
             file << ": its memory holds " << all.batch_size() << " streams, the run has " << cfg_.batch_size);
    for (size_t c = 0; c < memories_.size(); ++c) {
      const int64_t begin = dist_.rank * rank_rows() + static_cast<int64_t>(c) * per_chunk;
      memories_[c] = all.batch_size() == 0 ? all : all.rows(begin, begin + per_chunk);
      memories_[c].trim(cfg_.mem_len);
      memories_[c].to(device_);
    }
  }
  if (resume) elapsed_before_ = state_.current()->elapsed;
  p_skip_ = model::skip_probabilities(phase1_ ? model::parse_skip_schedule(cfg_.skip_schedule) : model::SkipSchedule::kNone,
                                      model_->config.n_layer, cfg_.skip_p);
  batcher_ = std::make_unique<StreamBatcher>(train_ids_, cfg_.batch_size, cfg_.tgt_len);
  window_ = std::make_unique<TrainWindow>(model_->config.n_layer);
  sync_ = std::make_unique<GradientSync>(*comm_, model_->parameters());
}

void Trainer::check_ranks_agree() {
  // Every rank must train the same run on the same data. The data first, the vocab foremost:
  // another vocab also changes the training tokens and the model's settings.
  nlohmann::ordered_json data = {{"vocab_sha256", vocab_.sha256()}, {"train_tokens", train_ids_.size()}};
  if (state_.train_data) data["train_sha256"] = state_.train_data->sha256;
  comm_->check_same("tokens", json_line(data));
  comm_->check_same("settings", json_line(nlohmann::json{{"train", cfg_.to_json()}, {"model", model_->config.to_json()}}));
}

checkpoint::Checkpoint Trainer::snapshot() {
  checkpoint::Checkpoint ck;
  ck.phase = cfg_.phase;
  ck.model_config = model_->config.to_json();
  ck.train_config = cfg_.to_json();
  ck.state = state_;
  ck.state.epoch = cursor_.epoch;
  ck.state.offset = cursor_.offset;
  ck.state.phases.back().elapsed = phase_elapsed();
  ck.state.command_line = req_.command_line;
  if (scaler_) {
    ck.state.loss_scale = scaler_->scale();
    ck.state.loss_scale_good_steps = scaler_->good_steps();
  }
  ck.vocab = vocab_;
  ck.model = model::model_tensors(model_);
  ck.optimizer = adam_->state();
  ck.state.world_size = dist_.world;
  // The streams' memories of every rank and chunk, as one; every rank's dropout stream.
  model::Memory mine = model::Memory::concat_rows(memories_);
  for (auto& layer : mine.layers)
    if (layer.hidden.defined()) layer.hidden = torch::cat(comm_->all_gather(layer.hidden.contiguous(), "gathering the memories"), 0);
  mine.to_tensors(&ck.memory);
  checkpoint::TensorList states;
  gen_.to_tensors(&states);
  for (const auto& [name, t] : states) {
    if (name.rfind("dropout_", 0) != 0) {
      ck.rng.emplace_back(name, t);
      continue;
    }
    const auto all = comm_->all_gather(t, "gathering the generator states");
    for (int r = 0; r < dist_.world; ++r) ck.rng.emplace_back(Generators::rank_name(name, r), all[static_cast<size_t>(r)]);
  }
  return ck;
}

// The one checkpoint a stream (stdout, a FIFO) gets: the run's last, at its end or on a stop signal.
// A reader that is gone (a dropped ssh, a failed next stage) does not take the run with it: the
// checkpoint goes to a file of its own, named in the error.
void Trainer::save_to_stream() {
  auto ck = snapshot();
  if (!leader()) return;
  try {
    checkpoint::save(req_.output, ck, true);
  } catch (const Error& e) {
    const std::string name = req_.tool + ".step" + std::to_string(state_.step) + "." + std::to_string(getpid()) + ".h5";
    std::string kept;
    for (const std::string& dir : {std::string("."), std::filesystem::temp_directory_path().string()}) {
      try {
        checkpoint::save(dir + "/" + name, ck, false);
        kept = dir + "/" + name;
        break;
      } catch (const Error&) {
        // an unwritable directory: the next one
      }
    }
    if (kept.empty()) throw;
    XL_FAIL(e.code(), e.what() << "; the checkpoint of step " << state_.step << " is kept in " << kept);
  }
}

std::string Trainer::save_at_stop() {
  if (!saved_this_step()) save(false);  // a stop at a validation step wrote it twice
  check_last_save();
  if (!io::is_stream(req_.output)) return "resume with --resume -o " + req_.output;
  save_to_stream();
  return "its checkpoint went to " + std::string(io::is_stdio(req_.output) ? "<stdout>" : req_.output);
}

void Trainer::save(bool best) {
  if (io::is_stream(req_.output)) return;  // a checkpoint on stdout or a FIFO is written once, at the end
  auto ck = snapshot();
  snapshot_step_ = state_.step;
  if (!leader()) return;
  const std::string best_file = best ? best_path(req_.output) : "";
  try {
    // A failed write leaves the previous file as it was (temp file + rename).
    checkpoint::save(req_.output, ck, true);
    // The best checkpoint is this same file: a second name costs nothing, where a second copy
    // wrote the whole checkpoint again (0.5 GB for base) at every improving validation.
    if (!best_file.empty() && !io::link_as(req_.output, best_file)) checkpoint::save(best_file, ck, true);
  } catch (const Error& e) {
    if (e.code() != kExitIoErr || cfg_.on_save_error != "continue") throw;
    save_failed_ = true;
    XL_WARN(e.what() << "; training goes on (--on-save-error continue)"
                     << (saved_once_ ? ", the last good checkpoint is from step " + std::to_string(saved_step_) : ""));
    metrics_.write("save_failed", {{"step", state_.step}, {"path", req_.output}, {"error", e.what()}});
    return;
  }
  saved_once_ = true;
  save_failed_ = false;
  saved_step_ = state_.step;
  nlohmann::json ev = {{"step", state_.step}, {"path", req_.output}};
  if (!best_file.empty()) ev["best"] = best_file;
  metrics_.write("checkpoint", ev);
}

std::string Trainer::choose_attention_probs() {
  if (!device_.is_cpu()) return "";
  // One forward of a batch chunk keeps, per layer, streams x heads x tgt_len x (persistent + mem_len
  // + tgt_len) floats until its backward (the CPU's blocked attention).
  const auto heads_per_layer = model_->heads_per_layer();
  const int64_t heads = std::accumulate(heads_per_layer.begin(), heads_per_layer.end(), int64_t{0});
  const int64_t kept = rank_rows() / cfg_.batch_chunk * heads * cfg_.tgt_len *
                       (model_->config.persistent_mem + cfg_.mem_len + cfg_.tgt_len) * static_cast<int64_t>(sizeof(float));
  const bool keep = req_.attention_probs == "keep" ||
                    (req_.attention_probs == "auto" && kept <= req_.attention_probs_budget);
  compute::set_attention_probs(keep ? compute::AttentionProbs::kKeep : compute::AttentionProbs::kRecompute);
  XL_DEBUG("attention probabilities: " << (keep ? "kept" : "computed again in backward") << " (--attention-probs "
                                       << req_.attention_probs << "; keeping them takes " << kept / 1000000
                                       << " MB a step, the budget is " << req_.attention_probs_budget / 1000000
                                       << " MB)");
  return keep ? "keep" : "recompute";
}

void Trainer::check_last_save() const {
  XL_CHECK(!save_failed_, kExitIoErr,
           req_.output << ": the checkpoint of step " << state_.step << " could not be written"
                       << (saved_once_ ? "; the last good one is from step " + std::to_string(saved_step_) : ""));
}

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
    {
      compute::AutocastScope autocast(precision_, device_);
      loss = model_->forward(in, tg, memories_[static_cast<size_t>(c)], opts).mean();
    }
    // Adaptive span's term joins the objective, not the reported loss.
    torch::Tensor objective = model_->config.adaptive_span ? loss + model_->span_loss(out.skips).to(loss.device()) : loss;
    if (c + 1 == chunks) sync_->arm();  // the gradients are final in this backward pass
    (objective * (loss_scale / static_cast<double>(chunks))).backward();
    loss_sum += loss.item<double>();
  }
  sync_->finish();
  out.loss = loss_sum / static_cast<double>(chunks);
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

// One all-reduce per step: the mean loss for the logs, and the stop decisions, so that every rank
// validates, saves and stops at the same step (wall clocks and signals differ between processes).
Trainer::Vote Trainer::vote(double loss, int signal, bool budget_spent, bool checkpoint, bool metrics_failed) {
  Vote v;
  if (dist_.single()) return {loss, signal != 0 || budget_spent, signal, checkpoint, metrics_failed};
  std::vector<torch::Tensor> t = {torch::tensor({loss, static_cast<double>(signal), budget_spent ? 1.0 : 0.0,
                                                 std::isfinite(loss) ? 0.0 : 1.0, checkpoint ? 1.0 : 0.0,
                                                 metrics_failed ? 1.0 : 0.0},
                                                torch::kDouble)};
  comm_->all_reduce_sum(t, "the step's vote");
  auto a = t[0].accessor<double, 1>();
  v.loss = a[3] > 0 ? NAN : a[0] / dist_.world;
  v.signal = a[1] > 0 ? (signal ? signal : SIGTERM) : 0;
  v.stop = a[1] > 0 || a[2] > 0;
  v.checkpoint = a[4] > 0;
  v.metrics_failed = a[5] > 0;
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

bool Trainer::validate() {
  if (valid_ids_.empty()) return false;
  eval::EvalSettings s;
  s.tgt_len = cfg_.effective_eval_tgt_len();
  s.mem_len = cfg_.effective_eval_mem_len();
  s.batch_size = cfg_.eval_batch_size;
  s.max_tokens = cfg_.eval_max_tokens;
  s.precision = precision_;
  s.shard = dist_.rank;
  s.shards = dist_.world;
  // Validation may need more memory than training (longer --eval-mem-len, more streams): when it
  // fails, the ranks learn it with the sums and the trained step is saved before the run ends.
  eval::EvalResult r;
  std::optional<Failure> failure;
  try {
    r = eval::evaluate(model_, valid_ids_, s);
  } catch (...) {
    failure = describe_failure(std::current_exception());
  }
  int first_failed = failure ? dist_.rank : -1;
  if (!dist_.single()) {
    // The sums, then one flag per rank: the lowest rank that failed says why, once.
    torch::Tensor t = torch::zeros({2 + dist_.world}, torch::kDouble);
    t[0] = r.loss_sum;
    t[1] = static_cast<double>(r.tokens);
    if (failure) t[2 + dist_.rank] = 1;
    std::vector<torch::Tensor> sums = {t};
    comm_->all_reduce_sum(sums, "the validation sums");
    auto a = sums[0].accessor<double, 1>();
    r.loss_sum = a[0];
    r.tokens = static_cast<int64_t>(a[1]);
    first_failed = -1;
    for (int k = 0; k < dist_.world && first_failed < 0; ++k)
      if (a[2 + k] > 0) first_failed = k;
  }
  if (first_failed >= 0) stop_after_failed_validation(first_failed == dist_.rank ? failure : std::nullopt);
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

void Trainer::stop_after_failed_validation(const std::optional<Failure>& failure) {
  const int64_t step = state_.step;
  const std::string where = save_at_stop();
  metrics_.write("done", {{"step", step}, {"reason", "validation failed"}, {"peak_rss_mb", peak_rss_mb()}});
  if (!failure || failure->line.empty()) throw Error(kExitSoftware, "");  // another rank says why
  const std::string hint =
      failure->out_of_memory ? "; a smaller --eval-batch-size, --eval-tgt-len or --eval-mem-len needs less" : "";
  XL_FAIL(failure->code, "validation at step " << step << " failed: " << failure->line << "; training stopped at step "
                                               << step << ", " << where << hint);
}

void Trainer::set_up() {
  // Ranks that torchrun, srun or mpirun started meet first, so that rank 0 cannot fail alone; an
  // --nproc-per-node launcher claimed the output before it started any, and holds it.
  if (leader() && !started_by_launcher()) output_lock_ = claim_output(req_);
  tokens_ = std::make_unique<h5::TokensFile>(h5::TokensFile::open(req_.tokens));
  const checkpoint::ExpectedVocab vocab{tokens_->vocab().sha256(), tokens_->name()};
  if (req_.resume) {
    // Scripts may pass --init always and --resume once the output exists: the run goes on.
    if (!req_.init.empty())
      XL_INFO((req_.start_or_resume ? "--start-or-resume" : "--resume")
              << " continues " << req_.output << "; --init " << io::display_name(req_.init) << " is not read");
    const auto ckpt = checkpoint::load(req_.output, vocab);
    if (ckpt.state.world_size != dist_.world)
      XL_INFO(req_.output << " was written by " << ckpt.state.world_size << " rank(s), this run has " << dist_.world
                          << ": the streams and memories are re-sharded exactly");
    build(resume_run(req_, ckpt, req_.output, *tokens_), &ckpt, req_.output);
  } else if (!req_.init.empty()) {
    if (const std::string who = io::OutputLock::holder(req_.init); !who.empty())
      XL_WARN("--init " << req_.init << " is still being trained (" << who
                        << "): this run starts from its latest checkpoint, not from its end");
    const auto ckpt = checkpoint::load(req_.init, vocab);
    const std::string file = io::display_name(req_.init);
    build(start_phase2(req_, ckpt, file, *tokens_), &ckpt, file);
  } else {
    build(start_new_run(req_, *tokens_), nullptr, "");
  }
}

int Trainer::run() {
  // A reader that quits never ends a training by SIGPIPE: a checkpoint streamed to it is kept in a
  // file (save_to_stream), metrics stop the run with its step saved, progress lines go unread.
  std::signal(SIGPIPE, SIG_IGN);
  // One GPU per local rank; every rank meets the others before anything can fail alone.
  device_ = compute::parse_device(req_.device, dist_.local_rank);
  // On a GPU a resumed run must compute what the uninterrupted one did. Runs on other GPU models
  // differ in the last bits.
  if (!compute::use_deterministic_kernels(device_))
    log::warn("XL_DETERMINISTIC=0: deterministic GPU kernels off; a resumed run matches this one only to rounding");
  else if (device_.is_cuda() && compute::kernel_set() == compute::KernelSet::kOwn)
    log::warn("XL_KERNELS=own: xl's attention backward needs XL_DETERMINISTIC=0 (its sums are atomic); "
              "training keeps LibTorch's attention kernel");
  comm_ = Communicator::connect(dist_, device_);
  // A problem that every rank finds (a missing split, a refused output) is one line, not one per
  // rank, and a rank that fails alone does not leave the others waiting for it.
  comm_->set_up_together("setting up the run", [&] { set_up(); });
  check_ranks_agree();
  // --start-or-resume appends to the metrics of a run killed before its first checkpoint.
  comm_->set_up_together("opening the metrics", [&] {
    if (!req_.metrics.empty() && leader())
      metrics_ = MetricsLog(req_.metrics, req_.tool, req_.resume || req_.start_or_resume, req_.force);
  });
  start_step_ = state_.step;
  // A resumed run's output already holds the checkpoint of this step.
  saved_once_ = req_.resume;
  saved_step_ = state_.step;
  if (req_.resume) snapshot_step_ = state_.step;
  used_at_start_ = budget_used(cfg_, state_, elapsed_before_);
  started_ = Clock::now();
  signals::catch_stop();
  if (leader() && log::level() != log::Level::kQuiet)
    signals::set_stop_notice("stopping after this step and its checkpoint", progress_.live());

  nlohmann::json start = {{"step", state_.step}, {"phase", cfg_.phase}, {"parameters", model_->parameter_count()},
                          {"device", device_.str()}, {"precision", cfg_.precision}, {"ranks", dist_.world},
                          {"model", model_->config.to_json()}, {"train", cfg_.to_json()}, {"resumed", req_.resume},
                          {"phase_start_step", state_.current()->start_step}, {"schedule", state_.current()->schedule},
                          {"command_line", req_.command_line}};
  if (phase1_) {
    start["p_skip"] = p_skip_;
    start["expected_context"] = model::expected_context(p_skip_, cfg_.mem_len);
  }
  attention_probs_ = choose_attention_probs();
  if (!attention_probs_.empty()) start["attention_probs"] = attention_probs_;
  metrics_.write("start", start);
  XL_CHECK(metrics_.failure().empty(), kExitIoErr, metrics_.failure());
  progress_.print(std::string(req_.resume ? "resuming " : "starting ") + cfg_.phase + " at step " + std::to_string(state_.step) +
                  ": " + std::to_string(model_->parameter_count()) + " parameters" +
                  (phase1_ ? ", skip schedule " + cfg_.skip_schedule : std::string()) +
                  ", SCH beta " + parse::format_number(cfg_.sch_beta) + ", on " + device_.str() + " in " +
                  cfg_.precision + (dist_.single() ? "" : ", " + std::to_string(dist_.world) + " ranks"));

  // A cosine down to 0 ends the phase with it: later steps would not change the weights.
  auto schedule_over = [&]() -> std::string {
    if (!schedule_.over(state_.step - state_.schedule_origin)) return "";
    return "the cosine schedule ended at step " + std::to_string(state_.schedule_origin + schedule_.steps) +
           " at eta-min 0 (schedule-steps " + std::to_string(schedule_.steps) + ")";
  };
  std::string reason = budget_reached(cfg_, state_, phase_elapsed());
  if (reason.empty()) reason = schedule_over();
  bool validated_now = false;
  while (reason.empty()) {
    Step st;
    try {
      st = train_step();
    } catch (...) {
      // A step that failed before its update was put back: one process saves the run as its last
      // whole step left it, when it stepped since it started. (Ranks cannot: the others wait in the
      // step's all-reduce; the run ends at the last checkpoint. So does a failed update.)
      const Failure f = describe_failure(std::current_exception());
      if (!f.out_of_memory) throw;
      const int64_t failed = state_.step + 1;
      std::string keep = saved_once_ ? "; the last checkpoint is of step " + std::to_string(saved_step_) : "";
      if (dist_.single() && step_undone_ && state_.step > start_step_) {
        keep = "; the run is saved at step " + std::to_string(state_.step) + ", " + save_at_stop();
        metrics_.write("done", {{"step", state_.step}, {"reason", "out of memory"}, {"peak_rss_mb", peak_rss_mb()}});
      }
      XL_FAIL(f.code, "step " << failed << ": " << f.line << keep
                              << "; a larger --batch-chunk (the same step in smaller pieces), a smaller --batch-size, "
                                 "--tgt-len or --mem-len"
                              << (attention_probs_ == "keep" ? ", or --attention-probs recompute" : "") << " needs less");
    }
    const std::string spent = budget_reached(cfg_, state_, phase_elapsed());
    const Vote v = vote(st.loss, signals::pending(), !spent.empty(), signals::take_checkpoint_request(),
                        !metrics_.failure().empty());
    if (!std::isfinite(v.loss)) {
      const std::string keep = saved_once_ ? "; the last good checkpoint is " + req_.output : "";
      XL_FAIL(kExitDataErr, "training diverged at step " << state_.step << ": the loss is " << v.loss << keep);
    }
    if (v.metrics_failed) {
      // Their reader quit (a plotter, `head`) or their disk filled: the run stops as on a signal.
      const std::string where = save_at_stop();
      if (!leader()) throw Error(kExitIoErr, "");
      XL_FAIL(kExitIoErr, metrics_.failure() << "; training stopped at step " << state_.step << ", " << where);
    }
    window_->add(v.loss, st.seconds, st.tokens, st.grad_norm, st.memory_age, st.skips, st.crossed);
    validated_now = false;
    if (state_.step % cfg_.log_interval == 0) log_window();
    else update_live_line();
    if (cfg_.eval_interval > 0 && state_.step % cfg_.eval_interval == 0) {
      validated_now = true;
      if (validate()) {
        reason = "validation improved by less than " + parse::format_number(cfg_.stop_min_delta) + " over " +
                 std::to_string(cfg_.stop_window) + " steps";
        break;
      }
    } else if (cfg_.save_every > 0 && state_.step % cfg_.save_every == 0) {
      save(false);
    }
    if (v.checkpoint && !v.signal) {
      // Said also when this step's validation wrote it: the request is answered either way.
      if (!saved_this_step()) save(false);
      progress_.print(io::is_stream(req_.output)
                          ? std::string("SIGUSR1 asked for a checkpoint, but -o is a stream: it gets the last one alone")
                          : "checkpoint of step " + std::to_string(state_.step) + " written, as SIGUSR1 asked");
    }
    if (const int sig = v.signal) {
      log_window();
      const std::string where = save_at_stop();
      metrics_.write("done", {{"step", state_.step}, {"reason", "signal " + std::to_string(sig)}, {"peak_rss_mb", peak_rss_mb()}});
      progress_.print("stopped by signal " + std::to_string(sig) + " at step " + std::to_string(state_.step) + "; " + where);
      return 128 + sig;
    }
    // A wall-clock budget may run out on one rank a step before another: all stop together.
    if (v.stop) reason = spent.empty() ? "used the --time-budget of " + parse::format_duration(cfg_.time_budget) : spent;
    else reason = schedule_over();
  }
  log_window();
  if (!validated_now && !valid_ids_.empty() && state_.step > start_step_) {
    validated_now = true;
    validate();
  }
  if ((!validated_now || valid_ids_.empty()) && !saved_this_step()) save(false);
  check_last_save();
  if (io::is_stream(req_.output)) save_to_stream();
  const double rss = peak_rss_mb();
  metrics_.write("done", {{"step", state_.step}, {"reason", reason}, {"tokens", state_.tokens_seen},
                          {"phase_steps", state_.step - state_.current()->start_step}, {"elapsed", phase_elapsed()},
                          {"best_loss", state_.best_loss ? nlohmann::json(*state_.best_loss) : nlohmann::json()},
                          {"peak_rss_mb", rss}, {"all_reduce_wait_s", sync_->wait_seconds()}});
  progress_.print("done at step " + std::to_string(state_.step) + ": " + reason + " (peak RSS " +
                  std::to_string(static_cast<int>(rss)) + " MB)");
  XL_CHECK(metrics_.failure().empty(), kExitIoErr, metrics_.failure() << "; the run itself ended and is saved");
  return 0;
}

}  // namespace

int run_training(const TrainRequest& request, char** argv) {
  const DistConfig dist = dist_config_from_env(request.dist_backend, request.dist_timeout);
  const bool piped = io::is_stdio(request.tokens) || io::is_stdio(request.init);
  XL_CHECK(!(io::is_stdio(request.tokens) && io::is_stdio(request.init)), kExitUsage,
           "the tokens and --init cannot both come from stdin");
  // A pipe by name (<(zcat t.h5.gz), a FIFO) is read by the first rank that opens it alone.
  for (const std::string& in : {request.tokens, request.init})
    XL_CHECK((request.nproc_per_node == 1 && dist.single()) || io::is_stdio(in) || !io::is_stream(in),
             kExitUsage, in << " is a pipe, which several ranks cannot each read: give a file, or pipe it to - (stdin)");
  if (request.nproc_per_node > 1 && !started_by_launcher()) {
    XL_CHECK(dist.single(), kExitUsage,
             "--nproc-per-node starts ranks itself, but this process already is rank "
                 << dist.rank << " of " << dist.world << " (started by torchrun, srun or mpirun): drop one of the two");
    // A refused output or input is one line from the launcher, not a line from every rank and the
    // launcher's "rank 0 exited". (The inputs are opened here, not read.)
    const auto lock = claim_output(request);
    if (!io::is_stream(request.tokens)) h5::TokensFile::open(request.tokens);
    if (!request.init.empty() && !io::is_stream(request.init)) h5::File::open(request.init, "an xl checkpoint");
    return launch_local_ranks(argv, request.nproc_per_node, piped);
  }
  stop_with_launcher();
  if (!dist.single()) {  // named "rank N" by start_as_rank()
    if (dist.rank > 0 && log::level() == log::Level::kInfo) log::set_level(log::Level::kQuiet);  // rank 0 speaks
    // Ranks cannot share one pipe; --nproc-per-node (above) hands each its own copy of it.
    XL_CHECK(!piped || stdin_spooled_by_launcher(), kExitUsage,
             "ranks started by torchrun, srun or mpirun read files, not pipes (give TOKENS and --init as files, "
             "or start the ranks with --nproc-per-node)");
  }
  Trainer t(request, dist);
  return t.run();
}

}  // namespace xl::train

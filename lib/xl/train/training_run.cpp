#include "xl/train/training_run.h"

#include <csignal>
#include <cmath>
#include <numeric>

#include "xl/compute/device.h"
#include "xl/compute/kernel_choice.h"
#include "xl/eval/evaluator.h"
#include "xl/model/model_io.h"
#include "xl/model/skip_retain.h"
#include "xl/train/launcher.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"
#include "xl/util/log.h"
#include "xl/util/parse.h"
#include "xl/util/resources.h"
#include "xl/util/signals.h"

namespace xl::train {

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
  if (model_->config.compressive() && cfg_.cmem_lr > 0)
    adam_->scale_lr([](const std::string& name) { return name.rfind("compress.", 0) == 0; }, cfg_.cmem_lr / cfg_.lr);

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
      // A compressed memory's remainder (fewer inputs than a group) waits in the memory.
      memories_[c].trim(cfg_.mem_len + std::max<int64_t>(model_->config.cmem_rate - 1, 0), cfg_.cmem_len);
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

// Everything before the first step: the device, the ranks and the run set up together, the
// metrics' start record and the first progress line.
void Trainer::start() {
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
    if (!leader()) return;
    if (!req_.metrics.empty())
      metrics_ = MetricsLog(req_.metrics, req_.tool, req_.resume || req_.start_or_resume, req_.force);
    if (!req_.tensorboard.empty())
      metrics_.add_tensorboard(req_.tensorboard, tensorboard_purge_step(req_.tensorboard, state_.step, req_.resume,
                                                                        req_.force || req_.start_or_resume));
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

  nlohmann::json record = {{"step", state_.step}, {"phase", cfg_.phase}, {"parameters", model_->parameter_count()},
                          {"device", device_.str()}, {"precision", cfg_.precision}, {"ranks", dist_.world},
                          {"model", model_->config.to_json()}, {"train", cfg_.to_json()}, {"resumed", req_.resume},
                          {"phase_start_step", state_.current()->start_step}, {"schedule", state_.current()->schedule},
                          {"command_line", req_.command_line}};
  if (phase1_) {
    record["p_skip"] = p_skip_;
    record["expected_context"] = model::expected_context(p_skip_, cfg_.mem_len);
  }
  attention_probs_ = choose_attention_probs();
  if (!attention_probs_.empty()) record["attention_probs"] = attention_probs_;
  metrics_.write("start", record);
  XL_CHECK(metrics_.failure().empty(), kExitIoErr, metrics_.failure());
  progress_.print(std::string(req_.resume ? "resuming " : "starting ") + cfg_.phase + " at step " + std::to_string(state_.step) +
                  ": " + std::to_string(model_->parameter_count()) + " parameters" +
                  (phase1_ ? ", skip schedule " + cfg_.skip_schedule : std::string()) +
                  ", SCH beta " + parse::format_number(cfg_.sch_beta) + ", on " + device_.str() + " in " +
                  cfg_.precision + (dist_.single() ? "" : ", " + std::to_string(dist_.world) + " ranks"));
}

// A cosine down to 0 ends the phase with it: later steps would not change the weights.
std::string Trainer::schedule_over() const {
  if (!schedule_.over(state_.step - state_.schedule_origin)) return "";
  return "the cosine schedule ended at step " + std::to_string(state_.schedule_origin + schedule_.steps) +
         " at eta-min 0 (schedule-steps " + std::to_string(schedule_.steps) + ")";
}

Trainer::Step Trainer::guarded_step() {
  try {
    return train_step();
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
}

// What the vote ends the run for at once: a diverged loss, metrics that cannot be written.
void Trainer::check_vote(const Vote& v) {
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
}

void Trainer::answer_checkpoint_request() {
  // Said also when this step's validation wrote it: the request is answered either way.
  if (!saved_this_step()) save(false);
  progress_.print(io::is_stream(req_.output)
                      ? std::string("SIGUSR1 asked for a checkpoint, but -o is a stream: it gets the last one alone")
                      : "checkpoint of step " + std::to_string(state_.step) + " written, as SIGUSR1 asked");
}

int Trainer::stop_by_signal(int sig) {
  log_window();
  const std::string where = save_at_stop();
  metrics_.write("done", {{"step", state_.step}, {"reason", "signal " + std::to_string(sig)}, {"peak_rss_mb", peak_rss_mb()}});
  progress_.print("stopped by signal " + std::to_string(sig) + " at step " + std::to_string(state_.step) + "; " + where);
  return 128 + sig;
}

// The end of a run that was not stopped: a last validation and checkpoint, the done record.
int Trainer::finish(const std::string& reason, bool validated_now) {
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

int Trainer::run() {
  start();
  std::string reason = budget_reached(cfg_, state_, phase_elapsed());
  if (reason.empty()) reason = schedule_over();
  bool validated_now = false;
  while (reason.empty()) {
    const Step st = guarded_step();
    const std::string spent = budget_reached(cfg_, state_, phase_elapsed());
    const Vote v = vote(st, signals::pending(), !spent.empty(), signals::take_checkpoint_request(),
                        !metrics_.failure().empty());
    check_vote(v);
    window_->add(v.loss, st.seconds, st.tokens, st.grad_norm, st.memory_age, st.skips, st.crossed);
    window_->add_compression_losses(v.cmem_ar, v.cmem_ae);
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
    if (v.checkpoint && !v.signal) answer_checkpoint_request();
    if (v.signal) return stop_by_signal(v.signal);
    // A wall-clock budget may run out on one rank a step before another: all stop together.
    if (v.stop) reason = spent.empty() ? "used the --time-budget of " + parse::format_duration(cfg_.time_budget) : spent;
    else reason = schedule_over();
  }
  return finish(reason, validated_now);
}

}  // namespace xl::train

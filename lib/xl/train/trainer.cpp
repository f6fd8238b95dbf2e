#include "xl/train/trainer.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "xl/cli/tool_main.h"
#include "xl/eval/evaluator.h"
#include "xl/h5/checkpoint.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/cross_head.h"
#include "xl/model/model_io.h"
#include "xl/model/skip_retain.h"
#include "xl/model/transformer_xl.h"
#include "xl/train/adam.h"
#include "xl/train/batcher.h"
#include "xl/train/lr_schedule.h"
#include "xl/train/metrics.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/progress.h"
#include "xl/util/rng.h"

namespace xl::train {

std::string best_path(const std::string& output) {
  const std::string ext = ".h5";
  if (output.size() > ext.size() && output.compare(output.size() - ext.size(), ext.size(), ext) == 0)
    return output.substr(0, output.size() - ext.size()) + ".best.h5";
  return output + ".best";
}

namespace {

using Clock = std::chrono::steady_clock;

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

std::string format_duration(double s) {
  std::ostringstream os;
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600) os << t / 3600 << "h" << std::setw(2) << std::setfill('0') << (t % 3600) / 60 << "m";
  else if (t >= 60) os << t / 60 << "m" << std::setw(2) << std::setfill('0') << t % 60 << "s";
  else os << t << "s";
  return os.str();
}

torch::Tensor string_tensor(const std::string& s) {
  return torch::from_blob(const_cast<char*>(s.data()), {static_cast<int64_t>(s.size())}, torch::kUInt8).clone();
}

std::string tensor_string(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::string(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()), static_cast<size_t>(c.numel()));
}

// Fields that fix the shape of the data stream and memories: a resumed run may not change them.
const char* kFrozenOnResume[] = {"tgt_len", "mem_len", "batch_size", "batch_chunk", "train_split", "seed",
                                 "skip_schedule", "skip_p", "sch_beta"};

TrainConfig merge_given(const TrainConfig& base, const TrainConfig& cli, const std::set<std::string>& given) {
  nlohmann::json j = base.to_json(), c = cli.to_json();
  for (const auto& f : given)
    if (c.contains(f)) j[f] = c[f];
  return TrainConfig::from_json(j, "settings");
}

class Trainer {
 public:
  explicit Trainer(const TrainRequest& req) : req_(req), progress_(req.progress) {}
  int run();

 private:
  void open_data();
  void start_fresh();
  void start_from(const h5::Checkpoint& ckpt, bool resume);
  void make_optimizer();
  void train_step();
  bool validate();  // returns true when the stopping rule fires
  void save(bool best);
  h5::Checkpoint checkpoint() const;
  void log_train();
  std::string status_line(double loss, double tok_s, double per_step) const;
  std::string stop_reason() const;
  double elapsed() const { return elapsed_before_ + std::chrono::duration<double>(Clock::now() - started_).count(); }
  bool char_level() const { return vocab_.type() != text::VocabType::kWord; }
  nlohmann::json metric(double loss) const {
    return char_level() ? nlohmann::json{{"bpc", loss / std::log(2.0)}} : nlohmann::json{{"ppl", std::exp(loss)}};
  }

  TrainRequest req_;
  TrainConfig cfg_;
  Progress progress_;
  MetricsLog metrics_;
  std::unique_ptr<h5::TokensFile> tokens_;
  text::Vocab vocab_;
  std::vector<int32_t> train_ids_, valid_ids_;
  model::TransformerXL model_{nullptr};
  std::unique_ptr<Adam> adam_;
  std::unique_ptr<StreamBatcher> batcher_;
  Cursor cursor_;
  std::vector<model::Memory> memories_;  // one per batch chunk
  Rng rng_;
  std::vector<double> p_skip_;
  bool phase1_ = true;
  // Run state carried by checkpoints.
  int64_t step_ = 0, tokens_seen_ = 0, schedule_origin_ = 0;
  double elapsed_before_ = 0;
  double best_loss_ = INFINITY;
  int64_t best_step_ = -1;
  std::vector<std::pair<int64_t, double>> history_;  // (step, valid loss)
  Clock::time_point started_ = Clock::now();
  int64_t start_step_ = 0;
  bool saved_once_ = false;
  // Accumulated since the last log line.
  double acc_loss_ = 0, acc_time_ = 0, acc_gap_ = 0, acc_norm_ = 0;
  int64_t acc_steps_ = 0, acc_tokens_ = 0;
  std::vector<int64_t> acc_skips_;
  double last_lr_ = 0;
};

void Trainer::open_data() {
  const h5::TokensFile& tokens = *tokens_;
  vocab_ = tokens.vocab();
  train_ids_ = tokens.read_split(cfg_.train_split);
  if (cfg_.eval_interval > 0 || tokens.has_split(cfg_.valid_split)) {
    if (tokens.has_split(cfg_.valid_split)) valid_ids_ = tokens.read_split(cfg_.valid_split);
    else tokens.read_split(cfg_.valid_split);  // fails with the file's available splits
  }
  XL_INFO(tokens.name() << ": " << train_ids_.size() << " training tokens, " << valid_ids_.size() << " validation tokens, "
                        << text::to_string(vocab_.type()) << " vocab of " << vocab_.size());
}

void Trainer::make_optimizer() {
  AdamOptions o;
  o.beta1 = cfg_.adam_beta1;
  o.beta2 = cfg_.adam_beta2;
  o.eps = cfg_.adam_eps;
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : model_->named_parameters(true)) params.emplace_back(p.key(), p.value());
  adam_ = std::make_unique<Adam>(params, o);
}

void Trainer::start_fresh() {
  cfg_ = req_.train;
  cfg_.phase = "phase1";
  cfg_.validate("settings");
  open_data();
  model::ModelConfig mc = req_.model;
  mc.n_token = static_cast<int64_t>(vocab_.size());
  mc.validate("model settings");
  torch::manual_seed(cfg_.seed);
  model_ = model::TransformerXL(mc);
  model_->reset_parameters(cfg_.seed);
  rng_ = Rng(cfg_.seed ^ 0x5851f42d4c957f2dULL);
  make_optimizer();
}

void Trainer::start_from(const h5::Checkpoint& ckpt, bool resume) {
  const std::string file = resume ? req_.output : req_.init;
  TrainConfig saved = TrainConfig::from_json(ckpt.train_config, file);
  if (resume) {
    for (const char* f : kFrozenOnResume)
      XL_CHECK(!req_.given.count(f) || saved.to_json()[f] == req_.train.to_json()[f], kExitUsage,
               "cannot change " << f << " when resuming (the data cursor and memories depend on it)");
    cfg_ = merge_given(saved, req_.train, req_.given);
    nlohmann::json before = saved.to_json(), after = cfg_.to_json();
    for (const auto& [key, value] : after.items())
      if (before[key] != value) XL_WARN("resuming with " << key << " = " << value.dump() << " (the run had " << before[key].dump() << ")");
  } else {
    XL_CHECK(ckpt.phase == "phase1", kExitDataErr,
             file << ": is a " << (ckpt.phase.empty() ? "non-xl" : ckpt.phase) << " checkpoint; phase 2 starts from a phase-1 checkpoint");
    cfg_ = merge_given(saved, req_.train, req_.given);
    cfg_.phase = "phase2";
    cfg_.skip_schedule = "none";
  }
  cfg_.validate("settings");
  open_data();
  model_ = model::model_from_checkpoint(ckpt, file);
  make_optimizer();
  const auto& st = ckpt.state;
  step_ = st.value("step", int64_t(0));
  tokens_seen_ = st.value("tokens_seen", int64_t(0));
  schedule_origin_ = st.value("schedule_origin", int64_t(0));
  if (!(resume || !req_.reset_optimizer)) XL_INFO("phase 2: fresh optimizer state (--reset-optimizer)");
  if (resume || !req_.reset_optimizer) adam_->load_state(ckpt.optimizer, file);
  auto xl_rng = h5::find_tensor(ckpt.rng, "xl");
  auto torch_rng = h5::find_tensor(ckpt.rng, "torch_cpu");
  XL_CHECK(xl_rng.defined() && torch_rng.defined(), kExitDataErr, file << ": checkpoint lacks generator states");
  rng_.set_state(tensor_string(xl_rng));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(torch_rng);
  }
  const bool same_stream = saved.batch_size == cfg_.batch_size && saved.tgt_len == cfg_.tgt_len;
  if (resume || same_stream) {
    cursor_.epoch = st.value("epoch", int64_t(0));
    cursor_.offset = st.value("offset", int64_t(0));
  } else {
    XL_INFO("phase 2: batch shape changed, reading the training split from its start");
  }
  if (resume) {
    elapsed_before_ = st.value("elapsed", 0.0);
    best_loss_ = st.contains("best_loss") && st["best_loss"].is_number() ? st["best_loss"].get<double>() : INFINITY;
    best_step_ = st.value("best_step", int64_t(-1));
    if (st.contains("history")) history_ = st["history"].get<std::vector<std::pair<int64_t, double>>>();
    // Memories as they were, so the next segment sees exactly what it would have.
    memories_.assign(static_cast<size_t>(cfg_.batch_chunk), model_->new_memory());
    for (size_t c = 0; c < memories_.size(); ++c) {
      const std::string pre = "c" + std::to_string(c) + ".";
      auto pos = h5::find_tensor(ckpt.memory, pre + "position");
      if (pos.defined()) memories_[c].position = pos.item<int64_t>();
      for (int64_t l = 0; l < model_->config.n_layer; ++l) {
        const std::string lp = pre + "l" + std::to_string(l) + ".";
        auto hidden = h5::find_tensor(ckpt.memory, lp + "hidden");
        auto runs = h5::find_tensor(ckpt.memory, lp + "runs");
        if (!hidden.defined()) continue;
        auto& lm = memories_[c].layers[static_cast<size_t>(l)];
        lm.hidden = hidden;
        for (int64_t r = 0; runs.defined() && r < runs.size(0); ++r)
          lm.runs.push_back({runs[r][0].item<int64_t>(), runs[r][1].item<int64_t>()});
      }
    }
  } else if (req_.reset_schedule) {
    schedule_origin_ = step_;
    XL_INFO("phase 2: the learning-rate schedule restarts at step " << step_ << " (--reset-schedule)");
  }
}

h5::Checkpoint Trainer::checkpoint() const {
  h5::Checkpoint ck;
  ck.phase = cfg_.phase;
  ck.model_config = model_->config.to_json();
  ck.train_config = cfg_.to_json();
  nlohmann::json history = history_;
  ck.state = {{"step", step_}, {"tokens_seen", tokens_seen_}, {"epoch", cursor_.epoch}, {"offset", cursor_.offset},
              {"schedule_origin", schedule_origin_}, {"elapsed", elapsed()}, {"best_step", best_step_},
              {"history", history}, {"command_line", req_.command_line}};
  ck.state["best_loss"] = std::isfinite(best_loss_) ? nlohmann::json(best_loss_) : nlohmann::json();
  ck.vocab = vocab_;
  ck.model = model::model_tensors(model_);
  ck.optimizer = adam_->state();
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    ck.rng.emplace_back("torch_cpu", gen.get_state());
  }
  ck.rng.emplace_back("xl", string_tensor(rng_.state()));
  for (size_t c = 0; c < memories_.size(); ++c) {
    const std::string pre = "c" + std::to_string(c) + ".";
    ck.memory.emplace_back(pre + "position", torch::tensor(memories_[c].position, torch::kLong));
    for (size_t l = 0; l < memories_[c].layers.size(); ++l) {
      const auto& lm = memories_[c].layers[l];
      if (!lm.hidden.defined()) continue;
      const std::string lp = pre + "l" + std::to_string(l) + ".";
      auto runs = torch::zeros({static_cast<int64_t>(lm.runs.size()), 2}, torch::kLong);
      for (size_t r = 0; r < lm.runs.size(); ++r) {
        runs[static_cast<int64_t>(r)][0] = lm.runs[r].start;
        runs[static_cast<int64_t>(r)][1] = lm.runs[r].length;
      }
      ck.memory.emplace_back(lp + "hidden", lm.hidden);
      ck.memory.emplace_back(lp + "runs", runs);
    }
  }
  return ck;
}

void Trainer::save(bool best) {
  if (io::is_stdio(req_.output)) return;  // a checkpoint on stdout is written once, at the end
  auto ck = checkpoint();
  h5::save_checkpoint(req_.output, ck, true);
  saved_once_ = true;
  nlohmann::json ev = {{"step", step_}, {"path", req_.output}};
  if (best) {
    h5::save_checkpoint(best_path(req_.output), ck, true);
    ev["best"] = best_path(req_.output);
  }
  metrics_.write("checkpoint", ev);
}

void Trainer::train_step() {
  auto t0 = Clock::now();
  std::vector<bool> skips;
  if (phase1_) skips = model::draw_skips(rng_, p_skip_);
  auto perms = model::draw_cross_head(rng_, cfg_.sch_beta, model_->heads_per_layer());
  Segment seg = batcher_->next(&cursor_);
  if (seg.new_epoch)
    for (auto& m : memories_) m.reset();
  acc_gap_ += memories_[0].mean_gap();
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
  double loss = loss_sum / static_cast<double>(chunks);
  if (!std::isfinite(loss)) {
    std::string keep = saved_once_ ? "; the last good checkpoint is " + req_.output : "";
    XL_FAIL(kExitDataErr, "training diverged at step " << step_ + 1 << ": the loss is " << loss << keep);
  }
  acc_norm_ += adam_->clip_grad_norm(cfg_.clip);
  last_lr_ = learning_rate(cfg_.lr_schedule, cfg_.lr, cfg_.eta_min, cfg_.warmup_steps, cfg_.effective_schedule_steps(),
                           step_ - schedule_origin_);
  adam_->step(last_lr_);
  adam_->clear_grads();
  ++step_;
  tokens_seen_ += cfg_.batch_size * t;
  acc_loss_ += loss;
  acc_tokens_ += cfg_.batch_size * t;
  ++acc_steps_;
  acc_time_ += std::chrono::duration<double>(Clock::now() - t0).count();
  for (size_t l = 0; l < skips.size(); ++l) acc_skips_[l] += skips[l];
}

std::string Trainer::stop_reason() const {
  if (cfg_.max_steps > 0 && step_ >= cfg_.max_steps) return "reached --max-steps " + std::to_string(cfg_.max_steps);
  if (cfg_.max_tokens > 0 && tokens_seen_ >= cfg_.max_tokens) return "reached --max-tokens " + std::to_string(cfg_.max_tokens);
  if (cfg_.time_budget > 0 && elapsed() >= cfg_.time_budget) return "used the --time-budget of " + format_duration(cfg_.time_budget);
  return "";
}

std::string Trainer::status_line(double loss, double tok_s, double per_step) const {
  // ETA from whichever budget binds first.
  double eta = -1;
  if (cfg_.max_steps > 0) eta = per_step * static_cast<double>(cfg_.max_steps - step_);
  if (cfg_.time_budget > 0) eta = eta < 0 ? cfg_.time_budget - elapsed() : std::min(eta, cfg_.time_budget - elapsed());
  std::ostringstream line;
  line << "step " << step_ << " | ep " << std::fixed << std::setprecision(2) << batcher_->epoch_progress(cursor_)
       << " | loss " << std::setprecision(3) << loss << " | " << (char_level() ? "bpc " : "ppl ") << std::setprecision(3)
       << (char_level() ? loss / std::log(2.0) : std::exp(loss)) << " | lr " << std::scientific << std::setprecision(2)
       << last_lr_ << std::fixed << " | " << std::setprecision(0) << tok_s << " tok/s | " << std::setprecision(0)
       << 1000 * per_step << " ms/batch";
  if (eta >= 0) line << " | ETA " << format_duration(std::max(0.0, eta));
  return line.str();
}

void Trainer::log_train() {
  if (acc_steps_ == 0) return;
  double loss = acc_loss_ / static_cast<double>(acc_steps_);
  double tok_s = static_cast<double>(acc_tokens_) / acc_time_;
  nlohmann::json ev = {{"step", step_}, {"epoch", batcher_->epoch_progress(cursor_)}, {"tokens", tokens_seen_},
                       {"loss", loss}, {"lr", last_lr_}, {"grad_norm", acc_norm_ / static_cast<double>(acc_steps_)},
                       {"tok_per_s", tok_s}, {"ms_per_batch", 1000.0 * acc_time_ / static_cast<double>(acc_steps_)},
                       {"elapsed", elapsed()}};
  ev.update(metric(loss));
  if (phase1_) {
    std::vector<double> rates;
    for (auto c : acc_skips_) rates.push_back(static_cast<double>(c) / static_cast<double>(acc_steps_));
    ev["skip_rate"] = rates;
    ev["mean_memory_age"] = acc_gap_ / static_cast<double>(acc_steps_);
    ev["expected_context"] = model::expected_context(p_skip_, cfg_.mem_len);
  }
  metrics_.write("train", ev);
  std::string line = status_line(loss, tok_s, acc_time_ / static_cast<double>(acc_steps_));
  if (progress_.live()) progress_.update(line);
  else progress_.print(line);
  acc_loss_ = acc_time_ = acc_gap_ = acc_norm_ = 0;
  acc_steps_ = acc_tokens_ = 0;
  std::fill(acc_skips_.begin(), acc_skips_.end(), 0);
}

bool Trainer::validate() {
  if (valid_ids_.empty()) return false;
  eval::EvalSettings s;
  s.tgt_len = cfg_.effective_eval_tgt_len();
  s.mem_len = cfg_.effective_eval_mem_len();
  s.batch_size = cfg_.eval_batch_size;
  s.max_tokens = cfg_.eval_max_tokens;
  auto r = eval::evaluate(model_, valid_ids_, s);
  double loss = r.loss();
  bool improved = loss < best_loss_;
  if (improved) {
    best_loss_ = loss;
    best_step_ = step_;
  }
  history_.emplace_back(step_, loss);
  nlohmann::json ev = {{"step", step_}, {"loss", loss}, {"tokens", r.tokens}, {"seconds", r.seconds},
                       {"new_best", improved}, {"best_step", best_step_}};
  ev.update(metric(loss));
  metrics_.write("valid", ev);
  std::ostringstream line;
  line << "valid step " << step_ << " | loss " << std::fixed << std::setprecision(4) << loss << " | "
       << (char_level() ? "bpc " : "ppl ") << (char_level() ? loss / std::log(2.0) : std::exp(loss))
       << (improved ? " | new best" : " | best at step " + std::to_string(best_step_));
  progress_.print(line.str());
  save(improved);
  // The paper's rule: stop once validation improves by less than min_delta over stop_window steps.
  if (cfg_.stop_window > 0) {
    double best_before = INFINITY;
    bool have = false;
    for (const auto& [s2, l2] : history_)
      if (s2 <= step_ - cfg_.stop_window) {
        best_before = std::min(best_before, l2);
        have = true;
      }
    if (have && best_before - best_loss_ < cfg_.stop_min_delta) return true;
  }
  return false;
}

int Trainer::run() {
  XL_CHECK(!(io::is_stdio(req_.tokens) && io::is_stdio(req_.init)), kExitUsage,
           "the tokens and --init cannot both come from stdin");
  if (req_.resume) {
    XL_CHECK(!io::is_stdio(req_.output), kExitUsage, "--resume needs -o FILE (the run's latest checkpoint)");
    XL_CHECK(file_exists(req_.output), kExitNoInput, req_.output << ": no checkpoint to resume from");
  } else if (!io::is_stdio(req_.output)) {
    XL_CHECK(req_.force || !file_exists(req_.output), kExitCantCreat,
             req_.output << ": already exists (use -f to overwrite, or --resume to continue that run)");
    io::AtomicOutput probe(req_.output, true, true);  // the directory must be writable now, not in an hour
  }
  tokens_ = std::make_unique<h5::TokensFile>(h5::TokensFile::open(req_.tokens));
  if (req_.resume) {
    start_from(h5::load_checkpoint(req_.output, tokens_->vocab().sha256()), true);
  } else if (!req_.init.empty()) {
    start_from(h5::load_checkpoint(req_.init, tokens_->vocab().sha256()), false);
  } else {
    start_fresh();
  }
  phase1_ = cfg_.phase == "phase1";
  p_skip_ = model::skip_probabilities(phase1_ ? model::parse_skip_schedule(cfg_.skip_schedule) : model::SkipSchedule::kNone,
                                      model_->config.n_layer, cfg_.skip_p);
  acc_skips_.assign(static_cast<size_t>(model_->config.n_layer), 0);
  batcher_ = std::make_unique<StreamBatcher>(train_ids_, cfg_.batch_size, cfg_.tgt_len);
  if (memories_.empty()) memories_.assign(static_cast<size_t>(cfg_.batch_chunk), model_->new_memory());
  if (!req_.metrics.empty()) metrics_ = MetricsLog(req_.metrics, req_.tool, req_.resume, req_.force);
  start_step_ = step_;
  started_ = Clock::now();
  cli::catch_stop_signals();

  nlohmann::json start = {{"step", step_}, {"phase", cfg_.phase}, {"parameters", model_->parameter_count()},
                          {"model", model_->config.to_json()}, {"train", cfg_.to_json()}, {"resumed", req_.resume},
                          {"command_line", req_.command_line}};
  if (phase1_) {
    start["p_skip"] = p_skip_;
    start["expected_context"] = model::expected_context(p_skip_, cfg_.mem_len);
  }
  metrics_.write("start", start);
  progress_.print(std::string(req_.resume ? "resuming " : "starting ") + cfg_.phase + " at step " + std::to_string(step_) +
                  ": " + std::to_string(model_->parameter_count()) + " parameters" +
                  (phase1_ ? ", skip schedule " + cfg_.skip_schedule : std::string()) +
                  ", SCH beta " + std::to_string(cfg_.sch_beta).substr(0, 4));

  std::string reason;
  bool validated_now = false;
  while ((reason = stop_reason()).empty()) {
    train_step();
    validated_now = false;
    if (step_ % cfg_.log_interval == 0) log_train();
    else if (progress_.live())  // a terminal gets a live line every step
      progress_.update(status_line(acc_loss_ / static_cast<double>(acc_steps_),
                                   static_cast<double>(acc_tokens_) / acc_time_, acc_time_ / static_cast<double>(acc_steps_)));
    if (cfg_.eval_interval > 0 && step_ % cfg_.eval_interval == 0) {
      validated_now = true;
      if (validate()) {
        reason = "validation improved by less than " + std::to_string(cfg_.stop_min_delta) + " over " +
                 std::to_string(cfg_.stop_window) + " steps";
        break;
      }
    } else if (cfg_.save_every > 0 && step_ % cfg_.save_every == 0) {
      save(false);
    }
    if (int sig = cli::pending_signal()) {
      log_train();
      save(false);
      metrics_.write("done", {{"step", step_}, {"reason", "signal " + std::to_string(sig)}, {"peak_rss_mb", peak_rss_mb()}});
      progress_.print("stopped by signal " + std::to_string(sig) + " at step " + std::to_string(step_) +
                      (io::is_stdio(req_.output) ? "" : "; resume with --resume -o " + req_.output));
      return 128 + sig;
    }
  }
  log_train();
  if (!validated_now && !valid_ids_.empty() && step_ > start_step_) {
    validated_now = true;
    validate();
  }
  if (!validated_now || valid_ids_.empty()) save(false);
  if (io::is_stdio(req_.output)) h5::save_checkpoint("-", checkpoint(), true);
  double rss = peak_rss_mb();
  metrics_.write("done", {{"step", step_}, {"reason", reason}, {"tokens", tokens_seen_}, {"elapsed", elapsed()},
                          {"best_loss", std::isfinite(best_loss_) ? nlohmann::json(best_loss_) : nlohmann::json()},
                          {"peak_rss_mb", rss}});
  progress_.print("done at step " + std::to_string(step_) + ": " + reason + " (peak RSS " +
                  std::to_string(static_cast<int>(rss)) + " MB)");
  return 0;
}

}  // namespace

int run_training(const TrainRequest& request) {
  Trainer t(request);
  return t.run();
}

}  // namespace xl::train

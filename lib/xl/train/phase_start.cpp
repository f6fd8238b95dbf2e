#include "xl/train/phase_start.h"

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "xl/util/error.h"
#include "xl/util/json_io.h"
#include "xl/util/parse.h"

namespace xl::train {
namespace {

// Settings that fix the data stream and the memories: a resumed run may not change them.
const char* kFrozenOnResume[] = {"tgt_len", "mem_len", "batch_size", "batch_chunk", "train_split", "seed",
                                 "skip_schedule", "skip_p", "sch_beta", "cmem_len"};
// Budgets belong to one invocation of one phase: phase 2 does not inherit phase 1's.
const char* kBudgets[] = {"max_steps", "max_tokens", "time_budget", "budget_from"};
// Model settings phase 2 may change; the others describe the architecture the weights belong to.
const char* kModelBehaviour[] = {"dropout", "dropatt", "clamp_len", "same_length"};
const char* kModelInit[] = {"init_std", "proj_init_std"};

bool listed(const char* const* begin, const char* const* end, const std::string& key) {
  for (auto p = begin; p != end; ++p)
    if (key == *p) return true;
  return false;
}
template <size_t N>
bool listed(const char* const (&list)[N], const std::string& key) {
  return listed(list, list + N, key);
}

// The split `tokens` holds as `split`, when it has one (else reading it fails, naming the file).
std::optional<checkpoint::TrainData> train_data_of(const h5::TokensFile& tokens, const std::string& split) {
  if (!tokens.has_split(split)) return std::nullopt;
  return checkpoint::TrainData{tokens.split_source(split).sha256, tokens.split_length(split)};
}

std::string describe(const checkpoint::TrainData& d) {
  return "text sha256 " + d.sha256.substr(0, 12) + ", " + std::to_string(d.tokens) + " tokens";
}

TrainConfig merge_given(const TrainConfig& base, const TrainConfig& given_values, const std::set<std::string>& given) {
  nlohmann::json j = base.to_json(), g = given_values.to_json();
  for (const auto& f : given)
    if (g.contains(f)) j[f] = g[f];
  return TrainConfig::from_json(j, "settings");
}

// The model options given, checked against a checkpoint's model: behaviour may change (with a
// note), the architecture may not. `resuming`: the run continues, else phase 2 starts.
model::ModelConfig checked_model(const TrainRequest& req, model::ModelConfig saved, const std::string& file, bool resuming,
                                 std::vector<std::string>* notes) {
  model::ModelConfig given = req.model;
  given.fit_to_vocab(saved.n_token);
  const nlohmann::json want = given.to_json(), have = saved.to_json();
  nlohmann::json merged = have;
  for (const auto& field : req.model_given) {
    if (listed(kModelInit, field) || want[field] == have[field]) continue;
    const std::string option = parse::kebab_case(field);
    if (listed(kModelBehaviour, field)) {
      merged[field] = want[field];
      notes->push_back((resuming ? "resuming with " : "phase 2: ") + option + " = " + json_line(want[field]) + " (" + file +
                       " has " + json_line(have[field]) + ")");
      continue;
    }
    req.origins.fail(field, "= " + json_line(want[field]) + " is set for this run, but " + file + " holds a model with " + option +
                                " = " + json_line(have[field]) +
                                (resuming ? " (a resumed run trains the model it made)" : " (phase 2 trains the model phase 1 made)"));
  }
  return model::ModelConfig::from_json(merged, file, req.origins.with_rest(file));
}

// The phase's own length in steps for its schedule: its step budget, or its time budget at
// `steps_per_s`; 0 when neither says.
int64_t budgeted_steps(const TrainConfig& c, const checkpoint::RunState& state, double steps_per_s, std::string* how) {
  if (c.max_steps > 0) {
    const int64_t n = c.budget_from == "run" ? c.max_steps - state.step : c.max_steps;
    *how = "its --max-steps";
    return std::max<int64_t>(n, 0);
  }
  if (c.time_budget > 0 && steps_per_s > 0) {
    const double budget = c.budget_from == "run" ? c.time_budget - state.elapsed() : c.time_budget;  // phase 2's record is new
    *how = "an estimate: its --time-budget of " + parse::format_duration(budget) + " at phase 1's " +
           parse::format_number(steps_per_s) + " steps/s; --schedule-steps or --max-steps sets it exactly";
    return static_cast<int64_t>(std::max(0.0, budget) * steps_per_s);
  }
  return 0;
}

// The phase's record, last in the run state (its schedule is filled in by record_schedule).
void begin_phase(PhaseStart* p) {
  checkpoint::PhaseRecord r;
  r.phase = p->config.phase;
  r.start_step = p->state.step;
  r.start_tokens = p->state.tokens_seen;
  p->state.phases.push_back(r);
  if (p->model.same_length && p->config.mem_len == 0)
    p->notes.push_back("same-length is off: with mem-len 0 there is no memory whose length to keep");
  XL_CHECK(p->config.cmem_len == 0 || p->model.compressive(), kExitUsage,
           "--cmem-len " << p->config.cmem_len << " needs a model with a compression network: give --cmem-rate");
}

// A word vocab without --cutoffs gets one softmax over every word. When its products outweigh the
// layers' twice over (WikiText-103's 267,735 words at d 410: about 3x), say what the user may have
// forgotten; the run goes on as asked.
void note_full_softmax(PhaseStart* p) {
  const model::ModelConfig& m = p->model;
  if (!m.cutoffs.empty()) return;
  double layers = 0;
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const int64_t attention = 4 * m.heads_in_layer(l) * m.d_head * m.d_model;  // q, k, v, o
    layers += static_cast<double>(attention + (m.ff ? 2 * m.d_model * m.d_inner : 0));
  }
  const double softmax = static_cast<double>(m.n_token) * static_cast<double>(m.embed_dim());
  if (softmax <= 2 * layers) return;
  std::ostringstream note;
  note << "one softmax over all " << m.n_token << " entries of the vocab (no --cutoffs below its size) takes "
       << std::fixed << std::setprecision(1) << softmax / layers
       << "x the layers' products per token: an adaptive softmax (--cutoffs; Transformer-XL's WikiText-103 recipe "
          "has 20000,40000,200000) trains and validates faster";
  p->notes.push_back(note.str());
}

void record_schedule(PhaseStart* p) {
  nlohmann::json& j = p->state.phases.back().schedule;
  j = p->schedule.to_json();
  j["origin"] = p->state.schedule_origin;
}

}  // namespace

PhaseStart start_new_run(const TrainRequest& req, const h5::TokensFile& tokens) {
  const auto vocab_size = static_cast<int64_t>(tokens.vocab().size());
  PhaseStart p;
  p.config = req.train;
  p.config.phase = "phase1";
  p.config.validate(req.origins);
  p.state.train_data = train_data_of(tokens, p.config.train_split);
  p.model = req.model;
  const auto dropped = p.model.fit_to_vocab(vocab_size);
  if (!dropped.empty())
    p.notes.push_back("the vocab has " + std::to_string(vocab_size) + " entries: cutoffs " +
                      json_line(nlohmann::json(dropped)) + " dropped, clusters " + json_line(nlohmann::json(p.model.cutoffs)) + " kept");
  note_full_softmax(&p);
  // Adaptive span: by default a head may learn to see everything a training segment can.
  if (p.model.adaptive_span && p.model.span_max == 0) p.model.span_max = p.config.mem_len + p.config.tgt_len;
  p.model.validate(req.origins);
  TrainConfig& c = p.config;
  if (c.schedule_steps == 0) c.schedule_steps = c.max_steps;
  XL_CHECK(c.lr_schedule == "constant" || c.lr_schedule == "cyclic-cosine" || c.schedule_steps > 0, kExitConfig,
           "settings: lr-schedule " << c.lr_schedule << " needs a length: give --max-steps or --schedule-steps "
                                    "(a --time-budget alone does not say how many steps the run will make)");
  p.schedule = c.schedule(c.schedule_steps);
  begin_phase(&p);
  record_schedule(&p);
  return p;
}

PhaseStart start_phase2(const TrainRequest& req, const checkpoint::Checkpoint& from, const std::string& file,
                        const h5::TokensFile& tokens) {
  const bool imported = from.phase == "imported";
  XL_CHECK(from.phase == "phase1" || from.phase == "pruned" || imported, kExitDataErr,
           file << ": is " << (from.phase.empty() ? "not an xl checkpoint" : "a " + from.phase + " checkpoint")
                << "; phase 2 starts from a phase-1 checkpoint, a pruned model or an imported one"
                << (from.phase == "phase2" ? " (--resume continues a phase-2 run)" : ""));
  PhaseStart p;
  // An imported model was trained elsewhere: the settings start from xl's defaults, without the
  // cross-head attention it was not trained with (phase 2 keeps the beta it started from).
  TrainConfig saved;
  if (!from.train_config.is_null()) saved = TrainConfig::from_json(from.train_config, file);
  else saved.sch_beta = 0;
  // Phase 2's own schedule takes lr, warmup-steps and schedule-steps from the command line, or from
  // a config file that sets them otherwise than phase 1 had them; a shared config's copies of
  // phase 1's values are phase 1's schedule, not phase 2's.
  std::set<std::string> schedule_given;
  const nlohmann::json saved_json = saved.to_json(), req_json = req.train.to_json();
  for (const char* f : {"lr", "warmup_steps", "schedule_steps"})
    if (req.origins.on_command_line(f) || (req.given.count(f) && req_json[f] != saved_json[f])) schedule_given.insert(f);
  TrainConfig base = saved;
  const TrainConfig defaults;
  const nlohmann::json d = defaults.to_json();
  nlohmann::json b = base.to_json();
  for (const char* f : kBudgets) b[f] = d[f];
  base = TrainConfig::from_json(b, file);
  TrainConfig& c = p.config = merge_given(base, req.train, req.given);
  c.phase = "phase2";
  c.skip_schedule = "none";
  c.validate(req.origins.with_rest(file));
  p.model = checked_model(req, model::ModelConfig::from_json(from.model_config, file), file, false, &p.notes);
  p.state = from.state;
  p.state.train_data = train_data_of(tokens, c.train_split);
  p.state.best_loss.reset();
  p.state.best_step = -1;
  p.state.history.clear();
  begin_phase(&p);
  // A run-wide budget may already be spent.
  const std::string spent = budget_reached(c, p.state, 0);
  XL_CHECK(spent.empty(), kExitUsage,
           "phase 2: " << spent << " before it starts (at step " << p.state.step
                       << "): give a larger budget, or count it from this phase (--budget-from phase, the default)");

  // What the checkpoint holds of the training state continues; the rest starts afresh.
  p.keep_optimizer = !req.reset_optimizer && !from.optimizer.empty();
  p.keep_generators = !from.rng.empty();
  if (req.reset_optimizer)
    p.notes.push_back("phase 2: fresh optimizer state (--reset-optimizer)");
  else if (!p.keep_optimizer)
    p.notes.push_back("phase 2: fresh optimizer state (" + file + ", " + (imported ? "an imported" : "a pruned") + " model, holds none)");
  if (imported) {
    p.notes.push_back("phase 2: " + file + " was trained elsewhere: reading the training split from its start, with empty memories");
  } else {
    // The data stream and the memories continue when the streams are the same.
    const auto& data = p.state.train_data;  // this phase's, phase 1's in from.state
    const bool same_data = !data || !from.state.train_data || *data == *from.state.train_data;
    p.keep_cursor = same_data && saved.batch_size == c.batch_size && saved.train_split == c.train_split;
    if (!same_data)
      p.notes.push_back("phase 2: other training data than phase 1's (" + describe(*data) + " against " +
                        describe(*from.state.train_data) + "): reading the training split from its start, with empty memories");
    else if (!p.keep_cursor)
      p.notes.push_back("phase 2: other streams than phase 1's (batch-size " + std::to_string(c.batch_size) + " vs " +
                        std::to_string(saved.batch_size) + ", train-split " + c.train_split + " vs " + saved.train_split +
                        "): reading the training split from its start, with empty memories");
    p.keep_memories = p.keep_cursor && saved.batch_chunk == c.batch_chunk && c.mem_len > 0 && !from.memory.empty();
    if (p.keep_memories)
      p.notes.push_back("phase 2: continues phase 1's data cursor and starts from its final memories");
    else if (p.keep_cursor)
      p.notes.push_back(std::string("phase 2: continues phase 1's data cursor with empty memories (") +
                        (c.mem_len == 0 ? "mem-len is 0" : from.memory.empty() ? "the checkpoint holds none"
                                                                                : "--batch-chunk changed") + ")");
  }

  // The learning-rate schedule.
  const checkpoint::PhaseRecord* p1 = from.state.current();
  if (c.schedule_from == "run") {
    if (!schedule_given.count("schedule_steps")) c.schedule_steps = saved.schedule_steps;
    p.schedule = c.schedule(c.schedule_steps);
    const int64_t at = p.state.step - p.state.schedule_origin, end = p.schedule.end();
    XL_CHECK(end < 0 || at < end, kExitUsage,
             "phase 2: phase 1 ended at step " << at << " of its " << p.schedule.kind << " schedule, whose "
                                              << c.schedule_steps << " steps are over: with --schedule-from run phase 2 would train at eta-min ("
                                              << parse::format_number(c.eta_min) << ") throughout; let it have a schedule of its own "
                                                 "(--schedule-from phase, the default) or give --schedule-steps");
    p.notes.push_back("phase 2: phase 1's " + c.lr_schedule + " schedule continues at its step " + std::to_string(at) +
                      " (--schedule-from run)");
  } else {
    const bool have_end_lr = p.state.step > 0 && p.state.last_lr > 0;
    if (!schedule_given.count("lr")) c.lr = have_end_lr ? p.state.last_lr : saved.lr;
    if (!schedule_given.count("warmup_steps")) c.warmup_steps = 0;
    std::string how = "--schedule-steps";
    if (!schedule_given.count("schedule_steps")) {
      const int64_t p1_steps = p1 ? p.state.step - p1->start_step : 0;
      const double rate = p1 && p1->elapsed > 0 ? static_cast<double>(p1_steps) / p1->elapsed : 0;
      c.schedule_steps = budgeted_steps(c, p.state, rate, &how);
    }
    XL_CHECK(c.lr_schedule != "cosine" || c.schedule_steps > 0, kExitUsage,
             "phase 2: its cosine needs a length: give --max-steps, --time-budget or --schedule-steps "
             "(or --schedule-from run to continue phase 1's schedule)");
    // Phase 1 ended annealed when its last rate is within 1% of the way from eta-min to its peak:
    // a schedule from there would train at (nearly) eta-min for the whole phase.
    const bool annealed = c.lr - c.eta_min <= 0.01 * (saved.lr - c.eta_min);
    XL_CHECK(!annealed || schedule_given.count("lr") || c.lr_schedule == "constant", kExitUsage,
             "phase 2: phase 1 ended annealed, at learning rate " << parse::format_number(c.lr) << " (eta-min " << parse::format_number(c.eta_min)
                                                                 << "): a schedule from there would stay at eta-min for the whole phase; give phase 2 a starting --lr (phase 1 started at "
                                                                 << parse::format_number(saved.lr) << ")");
    XL_CHECK(c.lr > 0, kExitUsage, "phase 2: a learning rate of 0 would not train; give --lr");
    p.state.schedule_origin = p.state.step;
    p.schedule = c.schedule(c.schedule_steps);
    p.notes.push_back("phase 2: " + c.lr_schedule + " schedule of its own from lr " + parse::format_number(c.lr) +
                      (schedule_given.count("lr") ? " (--lr)" : have_end_lr ? " (where phase 1 ended)" : "") + " to " +
                      parse::format_number(c.eta_min) + (c.lr_schedule == "cosine" ? " over " + std::to_string(c.schedule_steps) + " steps (" + how + ")" : "") +
                      (c.warmup_steps > 0 ? ", " + std::to_string(c.warmup_steps) + " warm-up steps" : ""));
  }
  record_schedule(&p);
  return p;
}

PhaseStart resume_run(const TrainRequest& req, const checkpoint::Checkpoint& latest, const std::string& file,
                      const h5::TokensFile& tokens) {
  PhaseStart p;
  const TrainConfig saved = TrainConfig::from_json(latest.train_config, file);
  // Each tool resumes its own phase: xl-train-phase2 would otherwise go on skipping layers.
  XL_CHECK(saved.phase == req.train.phase, kExitUsage,
           file << " is a " << saved.phase << " run: resume it with xl-train-" << saved.phase << " --resume"
                << (saved.phase == "phase1" ? ", or start phase 2 from it with xl-train-phase2 --init " + file : std::string()));
  std::set<std::string> given = req.given;
  if (saved.phase == "phase2")  // a shared config's phase-1 keys
    for (const char* f : {"skip_schedule", "skip_p", "skipped_layers_in_adam"}) given.erase(f);
  const nlohmann::json had = saved.to_json(), wants = req.train.to_json();
  for (const char* f : kFrozenOnResume)
    if (given.count(f) && had[f] != wants[f])
      req.origins.fail(f, "= " + json_line(wants[f]) + " is set for this run, but " + file + " was trained with " +
                              parse::kebab_case(f) + " = " + json_line(had[f]) +
                              ": a resumed run keeps it (its data cursor and memories depend on it)");
  p.config = merge_given(saved, req.train, given);
  p.config.validate(req.origins.with_rest(file));
  const nlohmann::json now = p.config.to_json();
  for (const auto& [key, value] : now.items())
    if (had[key] != value)
      p.notes.push_back("resuming with " + parse::kebab_case(key) + " = " + json_line(value) + " (the run had " + json_line(had[key]) + ")");
  p.model = checked_model(req, model::ModelConfig::from_json(latest.model_config, file), file, true, &p.notes);
  p.state = latest.state;
  const auto data = train_data_of(tokens, p.config.train_split);
  XL_CHECK(!data || !p.state.train_data || *data == *p.state.train_data, kExitDataErr,
           tokens.name() << ": its " << p.config.train_split << " split (" << describe(*data) << ") is not the one " << file
                         << " was trained on (" << describe(*p.state.train_data)
                         << "): resume with that tokens file (the run's data cursor and memories are positions in it)");
  if (data) p.state.train_data = data;
  XL_CHECK(p.config.cmem_len == 0 || p.model.compressive(), kExitUsage,
           "--cmem-len " << p.config.cmem_len << " needs a model with a compression network: give --cmem-rate");
  XL_CHECK(p.state.current() && p.state.current()->phase == p.config.phase, kExitDataErr,
           file << ": the run state does not record its " << p.config.phase << " (written by an older xl?)");
  p.schedule = p.config.schedule(p.config.schedule_steps);
  p.keep_cursor = p.keep_memories = p.keep_optimizer = p.keep_generators = true;
  return p;
}

std::string budget_reached(const TrainConfig& c, const checkpoint::RunState& s, double phase_elapsed) {
  const bool run = c.budget_from == "run";
  const std::string of = run ? " (counted from the run's start)" : "";
  const checkpoint::PhaseRecord* cur = s.current();
  const int64_t steps = s.step - (run || !cur ? 0 : cur->start_step);
  const int64_t tokens = s.tokens_seen - (run || !cur ? 0 : cur->start_tokens);
  const double seconds = run ? s.elapsed() - (cur ? cur->elapsed : 0) + phase_elapsed : phase_elapsed;
  if (c.max_steps > 0 && steps >= c.max_steps) return "reached --max-steps " + std::to_string(c.max_steps) + of;
  if (c.max_tokens > 0 && tokens >= c.max_tokens) return "reached --max-tokens " + std::to_string(c.max_tokens) + of;
  if (c.time_budget > 0 && seconds >= c.time_budget) return "used the --time-budget of " + parse::format_duration(c.time_budget) + of;
  return "";
}

void check_steps_within_schedule(const PhaseStart& p) {
  const TrainConfig& c = p.config;
  const bool ends_at_zero = p.schedule.over(p.schedule.steps);  // a cosine down to 0
  if (c.max_steps <= 0 || !ends_at_zero) return;
  const checkpoint::PhaseRecord* cur = p.state.current();
  const int64_t last = (c.budget_from == "run" || !cur ? 0 : cur->start_step) + c.max_steps;
  const int64_t end = p.state.schedule_origin + p.schedule.steps;
  XL_CHECK(last <= end, kExitUsage,
           c.phase << ": --max-steps " << c.max_steps << " runs to step " << last << ", past the end of its cosine at step "
                   << end << " (schedule-steps " << p.schedule.steps << ", eta-min 0), after which the learning rate is 0: "
                   << "give a longer --schedule-steps, an --eta-min above 0, or fewer --max-steps");
}

double budget_used(const TrainConfig& c, const checkpoint::RunState& s, double phase_elapsed) {
  const bool run = c.budget_from == "run";
  const checkpoint::PhaseRecord* cur = s.current();
  double used = -1;
  if (c.max_steps > 0)
    used = std::max(used, static_cast<double>(s.step - (run || !cur ? 0 : cur->start_step)) / static_cast<double>(c.max_steps));
  if (c.max_tokens > 0)
    used = std::max(used, static_cast<double>(s.tokens_seen - (run || !cur ? 0 : cur->start_tokens)) / static_cast<double>(c.max_tokens));
  if (c.time_budget > 0)
    used = std::max(used, (run ? s.elapsed() - (cur ? cur->elapsed : 0) + phase_elapsed : phase_elapsed) / c.time_budget);
  return used;
}

}  // namespace xl::train

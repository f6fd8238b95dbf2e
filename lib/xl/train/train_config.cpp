#include "xl/train/train_config.h"

#include "xl/compute/precision.h"
#include "xl/model/skip_retain.h"
#include "xl/util/error.h"

namespace xl::train {

#define XL_TRAIN_FIELDS(X)                                                                          \
  X(phase) X(train_split) X(valid_split) X(tgt_len) X(mem_len) X(batch_size) X(batch_chunk) X(lr)   \
  X(lr_schedule) X(warmup_steps) X(schedule_steps) X(eta_min) X(lr_step_count) X(schedule_from)     \
  X(clip) X(adam_beta1) X(adam_beta2) X(adam_eps) X(skip_schedule) X(skip_p) X(sch_beta)           \
  X(skipped_layers_in_adam) X(max_steps) X(max_tokens) X(time_budget) X(budget_from)               \
  X(stop_min_delta) X(stop_window) X(log_interval) X(eval_interval) X(eval_tgt_len) X(eval_mem_len) \
  X(eval_batch_size) X(eval_max_tokens) X(save_every) X(on_save_error)      \
  X(seed) X(precision) X(cmem_len) X(cmem_ar_weight) X(cmem_ae_weight) X(cmem_lr)

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j;
#define XL_PUT(f) j[#f] = f;
  XL_TRAIN_FIELDS(XL_PUT)
#undef XL_PUT
  return j;
}

TrainConfig TrainConfig::from_json(const nlohmann::json& j, const std::string& source) {
  TrainConfig c;
  XL_CHECK(j.is_object(), kExitDataErr, source << ": train config is not a JSON object");
#define XL_GET(f)                                                                          \
  if (j.contains(#f)) {                                                                    \
    try {                                                                                  \
      j.at(#f).get_to(c.f);                                                                \
    } catch (const std::exception&) {                                                     \
      XL_FAIL(kExitDataErr, source << ": train config key '" #f "' has a bad value");     \
    }                                                                                      \
  }
  XL_TRAIN_FIELDS(XL_GET)
#undef XL_GET
  return c;
}

LrSchedule TrainConfig::schedule(int64_t steps) const {
  LrSchedule s;
  s.kind = lr_schedule;
  s.lr = lr;
  s.eta_min = eta_min;
  s.warmup = warmup_steps;
  s.steps = steps;
  s.count = lr_step_count;
  return s;
}

void TrainConfig::validate(const SettingOrigins& origins) const {
  auto bad = [&](const std::string& key, const std::string& why) { origins.fail(key, why); };
  if (tgt_len < 1) bad("tgt-len", "must be at least 1");
  if (mem_len < 0) bad("mem-len", "must not be negative");
  if (batch_size < 1) bad("batch-size", "must be at least 1");
  if (batch_chunk < 1 || batch_size % batch_chunk) bad("batch-chunk", "must divide batch-size");
  if (!(lr > 0)) bad("lr", "must be positive");
  if (lr_schedule != "cosine" && lr_schedule != "constant" && lr_schedule != "cyclic-cosine")
    bad("lr-schedule", "must be cosine, constant or cyclic-cosine");
  if (warmup_steps < 0) bad("warmup-steps", "must not be negative");
  if (clip < 0) bad("clip", "must not be negative");
  if (skip_p < 0 || skip_p > 1) bad("skip-p", "must be in [0, 1]");
  if (sch_beta < 0 || sch_beta > 1) bad("sch-beta", "must be in [0, 1]");
  try {
    model::parse_skip_schedule(skip_schedule);
  } catch (const Error&) {
    bad("skip-schedule", "must be none, linear, uniform, no-first, no-last or no-first-last");
  }
  if (lr_step_count != "txl" && lr_step_count != "ahead") bad("lr-step-count", "must be txl or ahead");
  if (schedule_from != "phase" && schedule_from != "run") bad("schedule-from", "must be phase or run");
  if (budget_from != "phase" && budget_from != "run") bad("budget-from", "must be phase or run");
  if (skipped_layers_in_adam != "freeze" && skipped_layers_in_adam != "step")
    bad("skipped-layers-in-adam", "must be freeze or step");
  if (schedule_steps < 0) bad("schedule-steps", "must not be negative");
  if (on_save_error != "stop" && on_save_error != "continue") bad("on-save-error", "must be stop or continue");
  if (!compute::is_precision_name(precision)) bad("precision", "must be auto, fp32, bf16 or fp16");
  if (log_interval < 1) bad("log-interval", "must be at least 1");
  if (eval_interval < 0) bad("eval-interval", "must not be negative");
  if (eval_batch_size < 1) bad("eval-batch-size", "must be at least 1");
  if (max_steps < 0) bad("max-steps", "must not be negative");
  if (max_tokens < 0) bad("max-tokens", "must not be negative");
  if (time_budget < 0) bad("time-budget", "must not be negative");
  if (cmem_len < 0) bad("cmem-len", "must not be negative");
  if (cmem_ar_weight < 0) bad("cmem-ar-weight", "must not be negative");
  if (cmem_ae_weight < 0) bad("cmem-ae-weight", "must not be negative");
  if (cmem_lr < 0) bad("cmem-lr", "must not be negative (0: --lr)");
}

}  // namespace xl::train

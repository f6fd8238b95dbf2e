// Every setting of a training run (phase 1 or 2), with JSON round trip for checkpoints.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "xl/train/lr_schedule.h"
#include "xl/util/setting_origins.h"

namespace xl::train {

struct TrainConfig {
  std::string phase = "phase1";       // phase1 | phase2
  // Data and batching (Transformer-XL style: B parallel streams, tgt_len segments).
  std::string train_split = "train";
  std::string valid_split = "valid";
  int64_t tgt_len = 128;
  int64_t mem_len = 128;
  int64_t batch_size = 16;
  int64_t batch_chunk = 1;            // gradient accumulation over this many chunks of the batch
  // Optimisation.
  double lr = 2.5e-4;
  std::string lr_schedule = "cosine"; // cosine | constant | cyclic-cosine
  int64_t warmup_steps = 0;
  int64_t schedule_steps = 0;         // cosine length; 0: the phase's step budget
  double eta_min = 0.0;
  std::string lr_step_count = "txl";  // txl | ahead (see LrSchedule)
  std::string schedule_from = "phase";  // phase 2: phase (a schedule of its own) | run (phase 1's continues)
  double clip = 0.25;
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8;
  // Phase 1: Skip-Retain and SCH.
  std::string skip_schedule = "linear";
  double skip_p = 0.1;                // p of the uniform/no-first/no-last/no-first-last schedules
  double sch_beta = 0.1;
  std::string skipped_layers_in_adam = "freeze";  // freeze | step (the paper's code: zero gradients)
  // Compressive memory (a model with cmem_rate > 0): its length, the training losses' weights (the
  // attention-reconstruction and auto-encoding losses train the compression network alone) and
  // the compression network's learning rate (0: lr).
  int64_t cmem_len = 0;
  double cmem_ar_weight = 1.0;
  double cmem_ae_weight = 0.0;
  double cmem_lr = 0.0;
  // Budgets and stopping.
  int64_t max_steps = 0;              // 0: no step limit
  int64_t max_tokens = 0;
  double time_budget = 0;             // seconds of wall time; 0: none
  std::string budget_from = "phase";  // phase | run: where the three budgets count from
  double stop_min_delta = 0;          // paper's rule: stop when validation loss improves by
  int64_t stop_window = 0;            //   less than min_delta over stop_window steps (0: off)
  // Validation and logging.
  int64_t log_interval = 50;
  int64_t eval_interval = 500;
  int64_t eval_tgt_len = 0;           // 0: tgt_len
  int64_t eval_mem_len = -1;          // -1: mem_len + tgt_len - eval_tgt_len (Transformer-XL)
  int64_t eval_batch_size = 10;
  int64_t eval_max_tokens = 0;        // 0: whole valid split
  int64_t save_every = 0;             // also checkpoint every N steps (0: at validations only)
  std::string on_save_error = "stop"; // stop | continue: after a checkpoint that could not be written
  uint64_t seed = 1;
  std::string precision = "auto";     // of the matrix products: auto | fp32 | bf16 | fp16 (stored resolved)

  int64_t effective_eval_tgt_len() const { return eval_tgt_len > 0 ? eval_tgt_len : tgt_len; }
  int64_t effective_eval_mem_len() const {
    return eval_mem_len >= 0 ? eval_mem_len : std::max<int64_t>(0, mem_len + tgt_len - effective_eval_tgt_len());
  }
  // The schedule these settings describe, `steps` long.
  LrSchedule schedule(int64_t steps) const;

  nlohmann::json to_json() const;
  static TrainConfig from_json(const nlohmann::json& j, const std::string& source);
  // Fails with one line naming the offending key where its value came from (see SettingOrigins).
  void validate(const SettingOrigins& origins) const;
};

}  // namespace xl::train

// The training run behind run_training (trainer.h): one rank's model, optimizer, data, memories
// and generators, the steps, validations and checkpoints, and the decisions the ranks take
// together. Its parts are in training_run.cpp (set-up and the loop), training_step.cpp (a step
// and its logs), training_validation.cpp and training_saves.cpp.
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xl/checkpoint/checkpoint.h"
#include "xl/compute/precision.h"
#include "xl/eval/metric.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/transformer_xl.h"
#include "xl/train/adam.h"
#include "xl/train/batcher.h"
#include "xl/train/distributed.h"
#include "xl/train/generators.h"
#include "xl/train/gradient_sync.h"
#include "xl/train/loss_scale.h"
#include "xl/train/lr_schedule.h"
#include "xl/train/metrics.h"
#include "xl/train/phase_start.h"
#include "xl/train/train_log.h"
#include "xl/train/train_request.h"
#include "xl/util/failure.h"
#include "xl/util/output_lock.h"
#include "xl/util/progress.h"

namespace xl::train {

// What a training checks of -o before it trains, and the lock it then holds on it (none for a
// stream): one writer per output, a checkpoint to resume from, nothing replaced without -f, a
// directory it can write now rather than in an hour.
std::unique_ptr<io::OutputLock> claim_output(const TrainRequest& req);

using Clock = std::chrono::steady_clock;

class Trainer {
 public:
  Trainer(const TrainRequest& req, const DistConfig& dist)
      : req_(req), dist_(dist), progress_(dist.rank == 0 ? req.progress : "never") {}
  int run();

 private:
  // run()'s parts: before the first step, a step whose running out of memory is said as such, the
  // vote's verdicts, SIGUSR1's checkpoint, a stop by a signal, and the end of an unstopped run.
  void start();
  std::string schedule_over() const;

  void open_data();
  // Opens the data and builds the model, the optimizer and the run's state (each rank alone).
  void set_up();
  void build(PhaseStart start, const checkpoint::Checkpoint* from, const std::string& file);
  // 78 when the ranks' data or settings differ (collective).
  void check_ranks_agree();
  struct Step {
    double loss = 0, seconds = 0, grad_norm = 0, memory_age = 0;
    double cmem_ar = NAN, cmem_ae = NAN;  // the compression's training losses (NaN: none)
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
    double cmem_ar = NAN, cmem_ae = NAN;  // the compression's losses, means over the ranks
    bool stop = false; // a signal or a spent budget on any rank
    int signal = 0;
    bool checkpoint = false;  // SIGUSR1 on any rank
    bool metrics_failed = false;  // rank 0's metrics could not be written
  };
  Vote vote(const Step& st, int signal, bool budget_spent, bool checkpoint, bool metrics_failed);
  Step guarded_step();
  void check_vote(const Vote& v);
  void answer_checkpoint_request();
  int stop_by_signal(int sig);
  int finish(const std::string& reason, bool validated_now);

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

}  // namespace xl::train

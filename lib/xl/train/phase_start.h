// How a phase of training begins: its settings, budget and learning-rate schedule, from the
// command line and config files (a new run), a phase-1 checkpoint (phase 2) or the checkpoint of
// the run it resumes, with the checks that keep an unattended run from wasting itself:
//
//   * Budgets (--max-steps, --max-tokens, --time-budget) are the phase's own and count from its
//     start (--budget-from run counts from the run's start instead). Phase 2 does not inherit
//     phase 1's budgets; a run-wide budget that is already spent is refused.
//   * Phase 2 gets a learning-rate schedule of its own (--schedule-from phase, the default): it
//     starts at the rate phase 1 ended with (or --lr) and anneals to eta-min over phase 2's own
//     budget, with an optional warm-up. Phase 2 continues training rather than restarting it, so
//     jumping back to phase 1's initial rate would undo part of phase 1's annealing; ending
//     annealed is what a single schedule over both phases would give, had their lengths been known
//     in advance. --schedule-from run keeps phase 1's schedule running (xl 0.1's behaviour). A
//     schedule that would hold the rate at eta-min for the whole phase is refused.
//   * One config file serves both phases: phase 2 checks the model options given against its
//     checkpoint and refuses only a real conflict (dropout, dropatt, clamp-len and same-length
//     may change; the init scales no longer matter).
//   * Phase 2 continues phase 1's data cursor and memories when the streams are the same
//     (the same training split, batch size and chunks), and says so either way. A resumed run
//     must read the training split it read (65 otherwise): its cursor is a position in it.
#pragma once
#include <string>
#include <vector>

#include "xl/checkpoint/checkpoint.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/config.h"
#include "xl/train/lr_schedule.h"
#include "xl/train/train_config.h"
#include "xl/train/train_request.h"

namespace xl::train {

struct PhaseStart {
  TrainConfig config;            // resolved: schedule_steps and the schedule's lr are the phase's own
  model::ModelConfig model;      // the model to build, or the checkpoint's with the allowed overrides
  checkpoint::RunState state;    // the run so far, with this phase's record last
  LrSchedule schedule;           // update k of the phase uses schedule.at(step - state.schedule_origin)
  bool keep_cursor = false;      // phase 2: continue phase 1's data cursor
  bool keep_memories = false;    // phase 2: start from phase 1's final memories
  bool keep_optimizer = false;   // Adam's moments and step counts continue from the checkpoint
  bool keep_generators = false;  // the random streams continue from the checkpoint
  std::vector<std::string> notes;  // what was decided, one line each, for the log
};

// Each reads `tokens`, the run's tokens file, for its vocab and its training split.
PhaseStart start_new_run(const TrainRequest& req, const h5::TokensFile& tokens);
// Phase 2 starts from a phase-1 checkpoint, or from a model trained elsewhere (imported) or pruned:
// what such a file lacks (optimizer state, generators, memories, data cursor) starts afresh.
PhaseStart start_phase2(const TrainRequest& req, const checkpoint::Checkpoint& from, const std::string& file,
                        const h5::TokensFile& tokens);
PhaseStart resume_run(const TrainRequest& req, const checkpoint::Checkpoint& latest, const std::string& file,
                      const h5::TokensFile& tokens);

// Why the phase stops now, or "" to go on: its step, token or time budget, counted from the
// phase's start or the run's (config.budget_from). `phase_elapsed`: seconds of this phase so far.
std::string budget_reached(const TrainConfig& config, const checkpoint::RunState& state, double phase_elapsed);

// Fails (64, naming the flags to give) when --max-steps runs past the end of a cosine down to
// eta-min 0: the steps after it would leave the weights as they are. A run bounded by tokens or
// time alone stops at that end instead (the trainer's stopping reasons).
void check_steps_within_schedule(const PhaseStart& start);

// The fraction of the phase's budget used (the largest of steps, tokens and time), or -1 without one.
double budget_used(const TrainConfig& config, const checkpoint::RunState& state, double phase_elapsed);

}  // namespace xl::train

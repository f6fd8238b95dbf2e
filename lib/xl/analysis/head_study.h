// xl-prune-heads' studies of a checkpoint's heads, each a whole run with its output: single-head
// ablation tables (the paper's Table 3, one setting or two side by side, each a checkpoint or the
// seeds of one), Michel et al.'s importance scores, and iterative pruning curves with the pruned
// checkpoint. Stop signals end a study after its segment, keeping finished evaluations in --cache.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "xl/analysis/iterative_pruning.h"
#include "xl/compute/precision.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/report.h"

namespace xl::analysis {

enum class HeadStudyMode { kAblateOne, kImportance, kIterative };

// Checked settings (options/prune_heads_options.h builds them from the flags).
struct HeadStudyRequest {
  HeadStudyMode mode = HeadStudyMode::kAblateOne;
  eval::RowFormat format = eval::RowFormat::kJsonl;
  std::vector<std::string> checkpoints;  // one, or the seeds of one setting (ablate-one)
  std::vector<std::string> compare;      // ablate-one: the second side, or none
  std::string tokens;
  std::string split;                     // evaluated
  eval::EvalSettings eval;               // device-independent; precision below
  std::vector<int64_t> cmem_lens;        // the compressed memory (one at most); empty: as trained
  bool ignore_head_mask = false;
  std::string cache;                     // --cache FILE, or empty
  int jobs = 1;                          // evaluations run in parallel
  std::string importance_split;
  int64_t importance_max_tokens = 50000;  // 0: all
  bool normalize_layers = false;
  PruningSchedule schedule;
  std::string plot;                      // iterative: the curve's PNG, or empty
  std::string output;                    // a pruned checkpoint or the scored one, or empty
  bool force = false;
  torch::Device device = torch::kCPU;
  compute::Precision precision = compute::Precision::kFp32;
};

// Runs the study, writing its rows or tables to stdout; 0, or 128 + N after signal N.
int run_head_study(const HeadStudyRequest& request);

}  // namespace xl::analysis

// xl-eval-longctx's run: a checkpoint evaluated on a token split at each memory length of a sweep,
// one row per length (JSON Lines, Markdown or TSV), optionally each scored token's loss. Finished
// settings are kept on a stop signal or an out-of-memory failure at a longer memory, and in
// --cache across runs.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "xl/compute/precision.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/report.h"

namespace xl::analysis {

// Checked settings (options/eval_longctx_options.h builds them from the flags).
struct MemorySweepRequest {
  std::string checkpoint, tokens;
  std::string split;
  eval::EvalSettings settings;    // mem_len is set per row
  std::vector<int64_t> mem_lens;  // at least one
  std::vector<int64_t> cmem_lens; // each evaluated at every mem_len; empty: the checkpoint's
  bool ignore_head_mask = false;
  std::string cache;              // --cache FILE, or empty
  std::string per_token;          // --per-token FILE, or empty
  eval::RowFormat format = eval::RowFormat::kJsonl;
  std::string output = "-";       // the rows
  bool force = false;
  torch::Device device = torch::kCPU;
};

// 0, or 128 + N after signal N (the settings finished before it kept).
int run_memory_sweep(const MemorySweepRequest& request);

}  // namespace xl::analysis

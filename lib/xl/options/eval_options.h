// How a checkpoint is evaluated on a token split, defined once for xl-eval-longctx and
// xl-prune-heads (whose evaluations are xl-eval-longctx's).
#pragma once
#include <string>
#include <vector>

#include "xl/cli/options.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/report.h"

namespace xl::options {

// Whether --mem-len takes a comma list, one evaluation per value.
enum class MemLens { kOne, kSweep };

// `default_split`: test for reporting, valid for studies that choose something (heads to prune).
void add_eval_options(cli::Options& cli, const std::string& default_split, MemLens mem_lens);

struct EvalRequest {
  std::string split;
  eval::EvalSettings settings;    // mem_len is the first of mem_lens
  std::vector<int64_t> mem_lens;  // one per evaluation (a sweep); at least one
  std::vector<int64_t> cmem_lens; // compressed memory lengths, each evaluated at each mem_len; empty: the checkpoint's
  bool ignore_head_mask = false;
  std::string cache;  // --cache: the file of kept evaluations, or empty
};
// 64 with one line for a bad value (a list for MemLens::kOne among them).
EvalRequest eval_request(const cli::Options& cli, MemLens mem_lens);

// --format of the tools whose rows are results (xl-eval-longctx, xl-prune-heads): jsonl, md or
// tsv; left out, md when the rows go to a terminal (a person reads them), JSON Lines otherwise
// (scripts, pipes, files).
extern const char* const kRowFormatHelp;
eval::RowFormat row_format(const cli::Options& cli, bool rows_to_stdout);

}  // namespace xl::options

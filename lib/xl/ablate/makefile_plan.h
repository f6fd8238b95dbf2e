// How a grid is run: each run becomes a directory of a generated Makefile (phase 1, optional
// phase 2, evaluation on valid and test, with resume and make's own up-to-date logic), described by
// DIR/RUN/run.json and DIR/grid.json.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "xl/ablate/grid.h"

namespace xl::ablate {

// DIR/RUN/run.json and DIR/grid.json (one line each).
nlohmann::json run_json(const Grid& grid, const AblationRun& run);
nlohmann::json grid_json(const Grid& grid);
// True when two run.json objects describe the same training (phases, options, budgets, eval).
bool same_training(const nlohmann::json& a, const nlohmann::json& b);

struct MakefileSettings {
  std::string bin_dir;      // absolute directory of the xl tools
  std::string out_dir;      // absolute DIR
  std::string tokens;       // absolute tokens file (ignored when tokens_text is set)
  std::string tokens_text;  // absolute raw corpus, tokenized by the Makefile into DIR/tokens.h5
  int threads = 1;          // default THREADS per tool
  std::string launch;       // default LAUNCH: what starts each training (e.g. torchrun --nproc_per_node 2 --no-python)
  std::string grid_path;    // for the header comment
};

// The Makefile of a grid: `all` (every run's done.stamp) and, per run, run.json, p1.stamp,
// p2.stamp, dev.jsonl, test.jsonl, done.stamp. 64 for paths make cannot hold.
std::string makefile_text(const Grid& grid, const MakefileSettings& settings);

}  // namespace xl::ablate

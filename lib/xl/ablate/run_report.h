// Reading finished (and unfinished) run directories of an ablation grid back: each run's phases,
// validation curve, evaluations, speed and memory, and where it stands.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace xl::ablate {

struct CurvePoint {
  int64_t step;
  double value;  // bpc or ppl
};

struct RunReport {
  std::string name, label, phases = "p1";
  std::string setting;           // the run's name without its seed (its name when the grid has none)
  std::optional<int64_t> seed;   // the grid's seed of this run
  bool finished = false;
  std::string status;            // "done", "phase 1 at step 120", "evaluating", "not started"
  std::string metric;            // "bpc" or "ppl" ("" when nothing has been measured yet)
  std::optional<double> dev, test;
  std::optional<int64_t> parameters;
  std::vector<std::optional<double>> ms_per_batch;  // one per phase of the run
  std::vector<int64_t> steps;                       // last step reached per phase
  double wall_s = 0;                                // training wall time, all phases
  std::optional<double> peak_rss_mb;                // largest of training and evaluation
  std::vector<CurvePoint> curve;                    // validation during training, both phases
  std::map<std::string, std::string> keys;          // axes, options and phases (for pivots)
  std::string key(const std::string& k) const;
};

struct AblationReport {
  std::string dir, grid_name, table_rows, table_cols, table_cell = "dev";
  std::string baseline;        // the setting the others are compared with ("" for none)
  std::vector<RunReport> runs;
  std::string metric() const;  // "bpc", "ppl", or "bpc" when unknown
  bool seeded() const;         // some run has a seed: tables of means and intervals apply
};

// One run directory (its run.json is optional: name and phases are then guessed).
RunReport read_run(const std::string& run_dir);
// DIR/grid.json's runs in grid order (those without a directory yet as "not started"), or every
// DIR/*/run.json by index. 66 when DIR holds no run.
AblationReport read_report(const std::string& dir);

}  // namespace xl::ablate

// Ablation grids (the paper's Tables 5-10): a grid INI expands to named training runs.
//
// Grid format (see xl-ablate(1)):
//   [grid]       name, base-config, budgets (p1-steps/p2-steps, p1-time/p2-time), phases (default
//                p1), seeds (a list: every run is trained once per seed), baseline (the run the
//                others are compared with, paired by seed), eval-tgt-len, eval-mem-len,
//                eval-max-tokens, eval-batch-size, table-rows, table-cols, table-cell (dev or test)
//   [common]     xl-train-phase1 options given to every run
//   [axes]       xl-train-phase1 options (and phases) with comma-separated values: cartesian product
//   [run NAME]   explicit runs: option overrides, phases, label; each is crossed with the axes it
//                does not set itself
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xl::ablate {

enum class Phases { kP1, kP1P2 };
std::string phases_name(Phases p);  // "p1" or "p1+p2"
// "p1" or "p1+p2"; 78 naming `where` otherwise.
Phases parse_phases(const std::string& text, const std::string& where);

// The grid's budget. The total is the same for every run: a phase-1-only run trains p1 + p2 in
// phase 1, a two-phase run p1 in phase 1 and p2 in phase 2.
struct GridBudget {
  int64_t p1_steps = 0, p2_steps = 0;  // 0: no step budget
  double p1_time = 0, p2_time = 0;     // seconds; 0: no time budget
  bool has_steps() const { return p1_steps > 0 || p2_steps > 0; }
  bool has_time() const { return p1_time > 0 || p2_time > 0; }
};

// What one phase is given: --max-steps and --time-budget, each the phase's own (the trainers count
// a phase's budget from its start). Unset values are left to the base config.
struct PhaseBudget {
  std::optional<int64_t> max_steps;
  std::optional<double> time_budget;  // seconds
};

// One entry per phase of the run.
std::vector<PhaseBudget> split_budget(const GridBudget& budget, Phases phases);

// Settings of the final evaluations (xl-eval-longctx on valid and test).
struct EvalPlan {
  int64_t tgt_len = 0;  // 0: the run's validation segment length
  int64_t mem_len = -1; // -1: the run's validation memory
  int64_t batch_size = 10;
  std::string max_tokens = "0";  // 0: the whole split
};

using OptionList = std::vector<std::pair<std::string, std::string>>;  // ordered key = value

struct AblationRun {
  int index = 0;
  std::string name;     // directory name: [A-Za-z0-9._+,=-], unique in the grid
  std::string setting;  // the name without the seed: runs of one setting differ only in their seed
  int64_t seed = 0;     // the grid's seed of this run (0: the grid has no seeds)
  std::string label;    // optional display name ([run] label = ...)
  std::string section;  // its [run NAME] section's NAME ("" for a grid of axes only)
  Phases phases = Phases::kP1;
  OptionList axes;       // this run's axis values (phases included), in [axes] order
  OptionList overrides;  // xl-train-phase1 options given on its command line ([common], [run], axes, seed)
  std::map<std::string, std::string> options;  // every effective xl-train-phase1 setting
  std::vector<PhaseBudget> budgets;            // one per phase
  EvalPlan eval;                               // resolved: no 0/-1 left
  // The value of a table key: an axis, an option, "phases", or "run" (the [run NAME] section, else
  // the run's setting); "" when unknown.
  std::string value_of(const std::string& key) const;
};

struct Grid {
  std::string path;         // the grid file
  std::string name;
  std::string base_config;  // absolute path of the xl-train-phase1 config
  Phases default_phases = Phases::kP1;
  GridBudget budget;
  EvalPlan eval;
  std::vector<int64_t> seeds;  // empty: one run per setting with the base config's seed
  std::string baseline;        // a setting name ("" for none)
  std::string table_rows, table_cols, table_cell = "dev";
  std::vector<AblationRun> runs;
};

// "sch-beta=0.1,phases=p1+p2" stays; other characters become '_'; never empty, "." or "..".
std::string sanitize_run_name(const std::string& name);

// Finds base-config VALUE: a path (absolute or relative to the grid's directory), or a config name
// ("tiny" or "tiny.ini") looked up in GRID_DIR/../configs, EXE_DIR/../share/xl/configs (installed)
// and EXE_DIR/../../share/xl/configs (a build directory inside the sources). 78 when none exists.
std::string resolve_base_config(const std::string& value, const std::string& grid_dir, const std::string& exe_dir);

// Reads and expands a grid; every run's settings are checked as xl-train-phase1 checks them.
// Any fault is 78 (66 for a missing file) with one line naming the grid file.
Grid load_grid(const std::string& path, const std::string& exe_dir = "");
Grid parse_grid(const std::string& text, const std::string& path, const std::string& exe_dir = "");

}  // namespace xl::ablate

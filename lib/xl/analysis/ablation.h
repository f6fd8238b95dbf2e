// Ablation grids (the paper's Tables 5-10): a grid INI expands to named training runs, each run
// becomes a directory of a generated Makefile (phase 1, optional phase 2, evaluation on valid and
// test, with resume and make's own up-to-date logic), and the finished run directories are read
// back into tables: Markdown, TSV, JSON Lines, a pivot such as Table 10 and a gnuplot PNG of the
// validation curves.
//
// Grid format (see xl-ablate(1)):
//   [grid]       name, base-config, budgets (p1-steps/p2-steps, p1-time/p2-time), phases (default
//                p1), eval-tgt-len, eval-mem-len, eval-max-tokens, eval-batch-size, table-rows,
//                table-cols, table-cell (dev or test)
//   [common]     xl-train-phase1 options given to every run
//   [axes]       xl-train-phase1 options (and phases) with comma-separated values: cartesian product
//   [run NAME]   explicit runs: option overrides, phases, label; each is crossed with the axes it
//                does not set itself
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xl::analysis {

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
  bool any() const { return has_steps() || has_time(); }
};

// What one phase is given: --max-steps (counted from phase 1's start, as the trainers count it)
// and --time-budget (wall time of that phase). Unset values are left to the base config.
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
  std::string name;   // directory name: [A-Za-z0-9._+,=-], unique in the grid
  std::string label;  // optional display name ([run] label = ...)
  std::string section;  // its [run NAME] section's NAME ("" for a grid of axes only)
  Phases phases = Phases::kP1;
  OptionList axes;       // this run's axis values (phases included), in [axes] order
  OptionList overrides;  // xl-train-phase1 options given on its command line ([common], [run], axes)
  std::map<std::string, std::string> options;  // every effective xl-train-phase1 setting
  std::vector<PhaseBudget> budgets;            // one per phase
  EvalPlan eval;                               // resolved: no 0/-1 left
  // The value of a table key: an axis, an option, "phases", or "run" (the [run NAME] section, else
  // the run's name); "" when unknown.
  std::string value_of(const std::string& key) const;
};

struct Grid {
  std::string path;         // the grid file
  std::string name;
  std::string base_config;  // absolute path of the xl-train-phase1 config
  Phases default_phases = Phases::kP1;
  GridBudget budget;
  EvalPlan eval;
  std::string table_rows, table_cols, table_cell = "dev";
  std::vector<AblationRun> runs;
};

// "sch-beta=0.1,phases=p1+p2" stays; other characters become '_'; never empty, "." or "..".
std::string sanitize_run_name(const std::string& name);

// Finds base-config VALUE: a path (absolute or relative to the grid's directory), or a config name
// ("tiny" or "tiny.ini") looked up in GRID_DIR/../configs, EXE_DIR/../share/xl/configs (installed)
// and EXE_DIR/../../share/xl/configs (a build directory inside the sources). 78 when none exists.
std::string resolve_base_config(const std::string& value, const std::string& grid_dir, const std::string& exe_dir);

// Reads and expands a grid; every run's settings are checked with xl-train-phase1's own option
// parser. Any fault is 78 (66 for a missing file) with one line naming the grid file.
Grid load_grid(const std::string& path, const std::string& exe_dir = "");
Grid parse_grid(const std::string& text, const std::string& path, const std::string& exe_dir = "");

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
  std::string grid_path;    // for the header comment
};

// The Makefile of a grid: `all` (every run's done.stamp) and, per run, run.json, p1.stamp,
// p2.stamp, dev.jsonl, test.jsonl, done.stamp. 64 for paths make cannot hold.
std::string makefile_text(const Grid& grid, const MakefileSettings& settings);

// ---- Reading finished (and unfinished) run directories back ----

struct CurvePoint {
  int64_t step;
  double value;  // bpc or ppl
};

struct RunReport {
  std::string name, label, phases = "p1";
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
  std::vector<RunReport> runs;
  std::string metric() const;  // "bpc", "ppl", or "bpc" when unknown
};

// One run directory (its run.json is optional: name and phases are then guessed).
RunReport read_run(const std::string& run_dir);
// DIR/grid.json's runs in grid order (those without a directory yet as "not started"), or every
// DIR/*/run.json by index. 66 when DIR holds no run.
AblationReport read_report(const std::string& dir);

std::string report_markdown(const AblationReport& report);
std::string report_tsv(const AblationReport& report);
std::string report_jsonl(const AblationReport& report);
// Validation curves of every run (step vs bpc/ppl) in one PNG; 69 without gnuplot, 73 when the
// PNG cannot be written.
void plot_validation(const AblationReport& report, const std::string& png);

// "1:02:03" (h:mm:ss).
std::string format_wall_time(double seconds);

}  // namespace xl::analysis

// parse_grid (grid.h): a grid INI's sections read, each checked where it stands (78 with the file
// and line), and expanded into its runs.
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "xl/ablate/grid.h"
#include "xl/options/train_options.h"
#include "xl/util/error.h"
#include "xl/util/parse.h"
#include "xl/util/spelling.h"

namespace xl::ablate {
namespace {

namespace fs = std::filesystem;

// Settings of xl-train-phase1 that belong to the Makefile, not to a grid.
const std::set<std::string> kReservedOptions = {
    "tokens", "output", "force", "metrics", "tensorboard", "resume", "progress", "threads", "device", "config", "seed",
    "help", "version", "dump-config", "quiet", "verbose", "max-steps", "time-budget", "max-tokens", "budget-from"};

// Left out of run.json's options: what does not change what a run computes, and the budget
// (recorded per phase instead).
const std::set<std::string> kNotSettings = {"tokens", "output", "force", "metrics", "tensorboard", "resume", "progress", "threads",
                                            "device", "quiet", "verbose", "max-steps", "time-budget", "max-tokens",
                                            "budget-from"};

const std::set<std::string>& phase1_option_names() {
  static const std::set<std::string> names = [] {
    std::set<std::string> s;
    for (const auto& [key, value] : options::phase1_settings("", {}).settings) s.insert(key);
    return s;
  }();
  return names;
}

// Later settings win; each key keeps its first position.
OptionList overrides_in_order(const OptionList& overrides) {
  OptionList out;
  for (const auto& kv : overrides) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == kv.first; });
    if (it == out.end()) out.push_back(kv);
    else it->second = kv.second;
  }
  return out;
}

struct Section {
  std::string kind, name;
  int line;
  OptionList entries;
  std::vector<int> lines;
};

// The sections of a grid file in order, with their entries; 78 for a line that is neither.
std::vector<Section> read_sections(const std::string& text, const std::string& path) {
  std::vector<Section> sections;
  std::istringstream in(text);
  std::string raw;
  int n = 0;
  while (std::getline(in, raw)) {
    ++n;
    std::string line = raw;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = parse::trim(line);
    if (line.empty() || line[0] == ';') continue;
    if (line[0] == '[') {
      XL_CHECK(line.back() == ']', kExitConfig, path << ":" << n << ": bad section header '" << line << "'");
      std::string inner = parse::trim(line.substr(1, line.size() - 2));
      Section s;
      s.line = n;
      auto sp = inner.find_first_of(" \t");
      s.kind = sp == std::string::npos ? inner : inner.substr(0, sp);
      s.name = sp == std::string::npos ? "" : parse::trim(inner.substr(sp));
      XL_CHECK(s.kind == "grid" || s.kind == "common" || s.kind == "axes" || s.kind == "run", kExitConfig,
               path << ":" << n << ": unknown section [" << inner << "] (use [grid], [common], [axes] or [run NAME])");
      XL_CHECK(s.kind == "run" || s.name.empty(), kExitConfig, path << ":" << n << ": [" << s.kind << "] takes no name");
      XL_CHECK(s.kind != "run" || !s.name.empty(), kExitConfig, path << ":" << n << ": a [run NAME] section needs a name");
      for (const auto& o : sections)
        XL_CHECK(!(o.kind == s.kind && o.name == s.name), kExitConfig,
                 path << ":" << n << ": section [" << inner << "] is given twice (also line " << o.line << ")");
      sections.push_back(s);
      continue;
    }
    auto eq = line.find('=');
    XL_CHECK(eq != std::string::npos, kExitConfig, path << ":" << n << ": expected KEY = VALUE, got '" << line << "'");
    XL_CHECK(!sections.empty(), kExitConfig, path << ":" << n << ": '" << line << "' is outside any section");
    std::string key = parse::trim(line.substr(0, eq)), value = parse::trim(line.substr(eq + 1));
    XL_CHECK(!key.empty(), kExitConfig, path << ":" << n << ": empty key");
    auto& s = sections.back();
    for (size_t i = 0; i < s.entries.size(); ++i)
      XL_CHECK(s.entries[i].first != key, kExitConfig,
               path << ":" << n << ": '" << key << "' is given twice (also line " << s.lines[i] << ")");
    s.entries.emplace_back(key, value);
    s.lines.push_back(n);
  }
  return sections;
}

using Axes = std::vector<std::pair<std::string, std::vector<std::string>>>;

// A [run NAME] section (or the one unnamed run that the axes alone expand).
struct ExplicitRun {
  std::string name, label;
  std::optional<Phases> phases;
  OptionList overrides;
  std::string where;
};

class GridParser {
 public:
  GridParser(const std::string& text, const std::string& path, const std::string& exe_dir)
      : path_(path), exe_dir_(exe_dir),
        grid_dir_(fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : "."),
        sections_(read_sections(text, path)) {
    g_.path = path;
  }

  Grid parse() {
    read_grid_section();
    const OptionList common = read_common();
    const Axes axes = read_axes();
    std::vector<ExplicitRun> runs = read_runs();
    XL_CHECK(!runs.empty() || !axes.empty(), kExitConfig, path_ << ": no runs: give an [axes] section or [run NAME] sections");
    if (runs.empty()) runs.push_back(ExplicitRun{"", "", std::nullopt, {}, path_ + ": [axes]"});
    for (const auto& e : runs) expand(e, common, axes);
    resolve_baseline();
    for (const std::string& key : {g_.table_rows, g_.table_cols})
      XL_CHECK(key.empty() || key == "phases" || key == "run" || phase1_option_names().count(key), kExitConfig,
               path_ << ": [grid]: table key '" << key << "' is not an xl-train-phase1 option, phases or run");
    return g_;
  }

 private:
  std::string where(const Section& s, size_t i) const { return path_ + ":" + std::to_string(s.lines[i]); }
  void check_option(const Section& s, size_t i) const;
  void read_grid_section();
  void grid_key(const Section& grid, size_t i, bool* have_base);
  OptionList read_common() const;
  Axes read_axes() const;
  std::vector<ExplicitRun> read_runs() const;
  void expand(const ExplicitRun& e, const OptionList& common, const Axes& axes);
  void add_seeded_runs(const AblationRun& r, const std::string& raw, const std::string& setting, const ExplicitRun& e);
  void resolve_baseline();

  std::string path_, exe_dir_, grid_dir_;
  std::vector<Section> sections_;
  Grid g_;
  std::map<std::string, std::string> taken_;  // directory name -> raw name
};

// An option key of [common], [axes] or [run]: an xl-train-phase1 option the grid may set.
void GridParser::check_option(const Section& s, size_t i) const {
  const std::string& key = s.entries[i].first;
  if (!phase1_option_names().count(key)) {
    const std::string meant =
        spelling::nearest(key, std::vector<std::string>(phase1_option_names().begin(), phase1_option_names().end()));
    XL_FAIL(kExitConfig, where(s, i) << ": [" << s.kind << "]: '" << key << "' is not an xl-train-phase1 option"
                                     << (meant.empty() ? "" : "; did you mean '" + meant + "'?"));
  }
  XL_CHECK(!kReservedOptions.count(key), kExitConfig,
           where(s, i) << ": [" << s.kind << "]: '" << key << "' is set by xl-ablate itself"
                       << (key == "max-steps" || key == "time-budget" || key == "max-tokens"
                               ? " (give p1-steps/p2-steps or p1-time/p2-time in [grid])"
                               : key == "seed" ? " (give seeds = 1,2,3 in [grid])" : ""));
}

void GridParser::read_grid_section() {
  const Section* grid = nullptr;
  for (const auto& s : sections_)
    if (s.kind == "grid") grid = &s;
  XL_CHECK(grid, kExitConfig, path_ << ": no [grid] section (it names the grid and its base-config)");
  bool have_base = false;
  g_.name = fs::path(path_).stem().string();
  for (size_t i = 0; i < grid->entries.size(); ++i) grid_key(*grid, i, &have_base);
  XL_CHECK(have_base, kExitConfig, path_ << ": [grid] needs base-config (a config name such as tiny, or a path)");
  XL_CHECK(g_.budget.p1_steps > 0 || g_.budget.p2_steps == 0, kExitConfig, path_ << ": [grid]: p2-steps needs p1-steps");
  XL_CHECK(g_.budget.p1_time > 0 || g_.budget.p2_time == 0, kExitConfig, path_ << ": [grid]: p2-time needs p1-time");
  XL_CHECK(g_.table_rows.empty() == g_.table_cols.empty(), kExitConfig,
           path_ << ": [grid]: table-rows and table-cols go together");
}

void GridParser::grid_key(const Section& grid, size_t i, bool* have_base) {
  // Named references, not a structured binding: lambdas below capture `key` (C++17 clang).
  const std::string& key = grid.entries[i].first;
  const std::string& value = grid.entries[i].second;
  const std::string at = where(grid, i) + ": " + key;
  auto count = [&](const std::string& v) -> int64_t {
    try {
      return static_cast<int64_t>(parse::count(v, key));
    } catch (const Error& e) {
      XL_FAIL(kExitConfig, where(grid, i) << ": " << e.what());
    }
  };
  auto duration = [&](const std::string& v) {
    try {
      return parse::duration(v, key);
    } catch (const Error& e) {
      XL_FAIL(kExitConfig, where(grid, i) << ": " << e.what());
    }
  };
  auto integer = [&](const std::string& v) -> int64_t {
    try {
      size_t pos;
      int64_t x = std::stoll(v, &pos);
      if (pos == v.size()) return x;
    } catch (...) {
    }
    XL_FAIL(kExitConfig, at << ": not an integer: '" << v << "'");
  };
  if (key == "name") {
    XL_CHECK(!value.empty(), kExitConfig, at << ": empty");
    g_.name = value;
  } else if (key == "base-config") {
    try {
      g_.base_config = resolve_base_config(value, grid_dir_, exe_dir_);
    } catch (const Error& e) {
      XL_FAIL(kExitConfig, where(grid, i) << ": " << e.what());
    }
    *have_base = true;
  } else if (key == "p1-steps") {
    g_.budget.p1_steps = count(value);
  } else if (key == "p2-steps") {
    g_.budget.p2_steps = count(value);
  } else if (key == "p1-time") {
    g_.budget.p1_time = duration(value);
  } else if (key == "p2-time") {
    g_.budget.p2_time = duration(value);
  } else if (key == "phases") {
    g_.default_phases = parse_phases(value, at);
  } else if (key == "eval-tgt-len") {
    g_.eval.tgt_len = integer(value);
    XL_CHECK(g_.eval.tgt_len >= 1, kExitConfig, at << ": must be at least 1");
  } else if (key == "eval-mem-len") {
    g_.eval.mem_len = integer(value);
    XL_CHECK(g_.eval.mem_len >= 0, kExitConfig, at << ": must not be negative");
  } else if (key == "eval-batch-size") {
    g_.eval.batch_size = integer(value);
    XL_CHECK(g_.eval.batch_size >= 1, kExitConfig, at << ": must be at least 1");
  } else if (key == "eval-max-tokens") {
    count(value);
    g_.eval.max_tokens = value;
  } else if (key == "seeds") {
    for (const auto& v : parse::split_list(value)) {
      const int64_t seed = integer(v);
      XL_CHECK(seed >= 0, kExitConfig, at << ": seeds must not be negative");
      XL_CHECK(std::find(g_.seeds.begin(), g_.seeds.end(), seed) == g_.seeds.end(), kExitConfig, at << ": seed " << seed << " is listed twice");
      g_.seeds.push_back(seed);
    }
    XL_CHECK(!g_.seeds.empty(), kExitConfig, at << ": no seed listed");
  } else if (key == "baseline") {
    XL_CHECK(!value.empty(), kExitConfig, at << ": empty");
    g_.baseline = value;
  } else if (key == "table-rows") {
    g_.table_rows = value;
  } else if (key == "table-cols") {
    g_.table_cols = value;
  } else if (key == "table-cell") {
    XL_CHECK(value == "dev" || value == "test", kExitConfig, at << ": must be dev or test");
    g_.table_cell = value;
  } else {
    XL_FAIL(kExitConfig, where(grid, i) << ": [grid]: unknown key '" << key
                                         << "' (name, base-config, p1-steps, p2-steps, p1-time, p2-time, phases, "
                                            "seeds, baseline, eval-tgt-len, eval-mem-len, eval-max-tokens, "
                                            "eval-batch-size, table-rows, table-cols, table-cell)");
  }
}

OptionList GridParser::read_common() const {
  OptionList common;
  for (const auto& s : sections_)
    if (s.kind == "common")
      for (size_t i = 0; i < s.entries.size(); ++i) {
        check_option(s, i);
        common.push_back(s.entries[i]);
      }
  return common;
}

Axes GridParser::read_axes() const {
  Axes axes;
  for (const auto& s : sections_) {
    if (s.kind != "axes") continue;
    for (size_t i = 0; i < s.entries.size(); ++i) {
      const auto& [key, value] = s.entries[i];
      if (key != "phases") check_option(s, i);
      auto values = parse::split_list(value);
      std::set<std::string> seen;
      for (const auto& v : values) {
        XL_CHECK(!v.empty(), kExitConfig, where(s, i) << ": [axes]: " << key << " has an empty value in '" << value << "'");
        XL_CHECK(seen.insert(v).second, kExitConfig, where(s, i) << ": [axes]: " << key << " lists '" << v << "' twice");
        if (key == "phases") parse_phases(v, where(s, i) + ": [axes]: phases");
      }
      axes.emplace_back(key, values);
    }
  }
  return axes;
}

std::vector<ExplicitRun> GridParser::read_runs() const {
  std::vector<ExplicitRun> runs;
  for (const auto& s : sections_) {
    if (s.kind != "run") continue;
    ExplicitRun e;
    e.name = s.name;
    e.where = path_ + ":" + std::to_string(s.line) + ": [run " + s.name + "]";
    for (size_t i = 0; i < s.entries.size(); ++i) {
      const auto& [key, value] = s.entries[i];
      if (key == "phases") {
        e.phases = parse_phases(value, where(s, i) + ": [run " + s.name + "]: phases");
      } else if (key == "label") {
        e.label = value;
      } else {
        check_option(s, i);
        e.overrides.emplace_back(key, value);
      }
    }
    runs.push_back(e);
  }
  return runs;
}

// The runs of one explicit run: the axes it does not set itself, crossed (the last axis varies
// fastest), each checked as xl-train-phase1 would take its settings, then one run per seed.
void GridParser::expand(const ExplicitRun& e, const OptionList& common, const Axes& axes) {
  // The axes this run does not set itself.
  std::vector<const std::pair<std::string, std::vector<std::string>>*> free;
  for (const auto& a : axes) {
    bool pinned = a.first == "phases" ? e.phases.has_value() : false;
    for (const auto& o : e.overrides) pinned = pinned || o.first == a.first;
    if (!pinned) free.push_back(&a);
  }
  size_t total = 1;
  for (const auto* a : free) total *= a->second.size();
  for (size_t c = 0; c < total; ++c) {
    // Mixed radix: the last axis varies fastest.
    std::vector<size_t> idx(free.size());
    for (size_t k = free.size(), rest = c; k-- > 0;) {
      idx[k] = rest % free[k]->second.size();
      rest /= free[k]->second.size();
    }
    AblationRun r;
    r.label = e.label;
    r.section = e.name;
    r.phases = e.phases.value_or(g_.default_phases);
    std::string raw = e.name;
    OptionList overrides = common;
    for (const auto& o : e.overrides) overrides.push_back(o);
    for (size_t k = 0; k < free.size(); ++k) {
      const std::string& key = free[k]->first;
      const std::string& value = free[k]->second[idx[k]];
      r.axes.emplace_back(key, value);
      raw += (raw.empty() ? "" : ",") + key + "=" + value;
      if (key == "phases") r.phases = parse_phases(value, e.where);
      else overrides.emplace_back(key, value);
    }
    const std::string setting = sanitize_run_name(raw);
    const std::string at = e.where + (raw == e.name ? "" : " (" + raw + ")");
    options::Phase1Settings parsed;
    try {
      parsed = options::phase1_settings(g_.base_config, overrides_in_order(overrides), at);
    } catch (const Error& err) {
      const std::string why = err.what();
      if (why.rfind(at, 0) == 0) throw Error(kExitConfig, why);  // names the grid's setting itself
      XL_FAIL(kExitConfig, at << ": " << why);
    }
    XL_CHECK(!(r.phases == Phases::kP1P2 && !(g_.budget.p2_steps > 0 || g_.budget.p2_time > 0)), kExitConfig,
             at << ": a p1+p2 run needs a phase-2 budget: give p2-steps or p2-time in [grid]");
    r.overrides = overrides_in_order(overrides);
    for (const auto& [k, v] : parsed.settings)
      if (!kNotSettings.count(k)) r.options[k] = v;
    r.budgets = split_budget(g_.budget, r.phases);
    // The final evaluation: the grid's settings, else the run's own validation settings.
    r.eval = g_.eval;
    train::TrainConfig t = parsed.train;
    if (r.eval.tgt_len <= 0) r.eval.tgt_len = t.effective_eval_tgt_len();
    t.eval_tgt_len = r.eval.tgt_len;
    if (r.eval.mem_len < 0) r.eval.mem_len = t.effective_eval_mem_len();
    add_seeded_runs(r, raw, setting, e);
  }
}

void GridParser::add_seeded_runs(const AblationRun& r, const std::string& raw, const std::string& setting,
                                 const ExplicitRun& e) {
  // One run per seed, or one run with the base config's seed.
  const std::vector<int64_t> seeds = g_.seeds.empty() ? std::vector<int64_t>{0} : g_.seeds;
  for (int64_t seed : seeds) {
    AblationRun run = r;
    run.index = static_cast<int>(g_.runs.size());
    run.setting = setting;
    run.seed = seed;
    run.name = g_.seeds.empty() ? setting : sanitize_run_name(raw + (raw.empty() ? "" : ",") + "seed=" + std::to_string(seed));
    if (!g_.seeds.empty()) {
      run.overrides.emplace_back("seed", std::to_string(seed));
      run.options["seed"] = std::to_string(seed);
    }
    auto [pos, fresh] = taken_.emplace(run.name, raw);
    XL_CHECK(fresh, kExitConfig, e.where << ": runs '" << pos->second << "' and '" << raw << "' get the same directory name '"
                                         << run.name << "'");
    g_.runs.push_back(run);
  }
}

void GridParser::resolve_baseline() {
  if (g_.baseline.empty()) return;
  std::set<std::string> matches;
  for (const auto& r : g_.runs)
    if (r.setting == g_.baseline || r.section == g_.baseline) matches.insert(r.setting);
  XL_CHECK(matches.size() == 1, kExitConfig,
           path_ << ": [grid]: baseline '" << g_.baseline << "' "
                 << (matches.empty() ? "names no run" : "names several settings (give one of them: " + *matches.begin() + ", ...)"));
  g_.baseline = *matches.begin();
}

}  // namespace

Grid parse_grid(const std::string& text, const std::string& path, const std::string& exe_dir) {
  return GridParser(text, path, exe_dir).parse();
}

}  // namespace xl::ablate

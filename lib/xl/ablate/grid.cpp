#include "xl/ablate/grid.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "xl/options/train_options.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/parse.h"
#include "xl/util/spelling.h"

namespace xl::ablate {

namespace fs = std::filesystem;

namespace {

// Settings of xl-train-phase1 that belong to the Makefile, not to a grid.
const std::set<std::string> kReservedOptions = {
    "tokens", "output", "force", "metrics", "resume", "progress", "threads", "device", "config", "seed",
    "help", "version", "dump-config", "quiet", "verbose", "max-steps", "time-budget", "max-tokens", "budget-from"};

// Left out of run.json's options: what does not change what a run computes, and the budget
// (recorded per phase instead).
const std::set<std::string> kNotSettings = {"tokens", "output", "force", "metrics", "resume", "progress", "threads",
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

}  // namespace

std::string phases_name(Phases p) { return p == Phases::kP1 ? "p1" : "p1+p2"; }

Phases parse_phases(const std::string& text, const std::string& where) {
  if (text == "p1") return Phases::kP1;
  if (text == "p1+p2") return Phases::kP1P2;
  XL_FAIL(kExitConfig, where << ": phases must be p1 or p1+p2, not '" << text << "'");
}

std::vector<PhaseBudget> split_budget(const GridBudget& b, Phases phases) {
  if (phases == Phases::kP1) {
    PhaseBudget p1;
    if (b.has_steps()) p1.max_steps = b.p1_steps + b.p2_steps;
    if (b.has_time()) p1.time_budget = b.p1_time + b.p2_time;
    return {p1};
  }
  PhaseBudget p1, p2;
  if (b.has_steps()) {
    p1.max_steps = b.p1_steps;
    p2.max_steps = b.p2_steps;
  }
  if (b.has_time()) {
    p1.time_budget = b.p1_time;
    p2.time_budget = b.p2_time;
  }
  return {p1, p2};
}

std::string AblationRun::value_of(const std::string& key) const {
  if (key == "phases") return phases_name(phases);
  if (key == "name") return name;
  if (key == "run") return section.empty() ? setting : section;
  for (const auto& [k, v] : axes)
    if (k == key) return v;
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)
    if (it->first == key) return it->second;
  auto it = options.find(key);
  return it == options.end() ? "" : it->second;
}

std::string sanitize_run_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || std::string("._+,=-").find(c) != std::string::npos;
    out += ok ? c : '_';
  }
  if (out.empty() || out == "." || out == "..") out = "run" + out;
  if (out[0] == '.' || out[0] == '-') out = "_" + out.substr(1);
  return out;
}

std::string resolve_base_config(const std::string& value, const std::string& grid_dir, const std::string& exe_dir) {
  std::vector<std::string> tried;
  auto found = [&](const fs::path& p) {
    tried.push_back(p.string());
    return io::is_file(p.string());
  };
  const bool is_path = value.find('/') != std::string::npos || (value.size() > 4 && value.substr(value.size() - 4) == ".ini");
  if (is_path) {
    fs::path p = fs::path(value).is_absolute() ? fs::path(value) : fs::path(grid_dir) / value;
    if (found(p)) return fs::absolute(p).lexically_normal().string();
  }
  if (value.find('/') == std::string::npos) {
    std::string file = value.size() > 4 && value.substr(value.size() - 4) == ".ini" ? value : value + ".ini";
    std::vector<fs::path> dirs = {fs::path(grid_dir) / ".." / "configs"};
    if (!exe_dir.empty()) {
      dirs.push_back(fs::path(exe_dir) / ".." / "share" / "xl" / "configs");         // installed
      dirs.push_back(fs::path(exe_dir) / ".." / ".." / "share" / "xl" / "configs");  // a build tree in the sources
    }
    for (const auto& d : dirs)
      if (found(d / file)) return fs::absolute(d / file).lexically_normal().string();
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  XL_FAIL(kExitConfig, "base-config '" << value << "' not found (looked for " << list << ")");
}

Grid load_grid(const std::string& path, const std::string& exe_dir) {
  std::ifstream in(path);
  XL_CHECK(in, kExitNoInput, path << ": cannot open grid file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_grid(text.str(), path, exe_dir);
}

Grid parse_grid(const std::string& text, const std::string& path, const std::string& exe_dir) {
  Grid g;
  g.path = path;
  const std::string grid_dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : ".";
  struct Section {
    std::string kind, name;
    int line;
    OptionList entries;
    std::vector<int> lines;
  };
  std::vector<Section> sections;
  {
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
  }

  auto where = [&](const Section& s, size_t i) {
    return path + ":" + std::to_string(s.lines[i]);
  };
  // An option key of [common], [axes] or [run]: an xl-train-phase1 option the grid may set.
  auto check_option = [&](const Section& s, size_t i) {
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
  };

  // [grid]
  const Section* grid = nullptr;
  for (const auto& s : sections)
    if (s.kind == "grid") grid = &s;
  XL_CHECK(grid, kExitConfig, path << ": no [grid] section (it names the grid and its base-config)");
  bool have_base = false;
  g.name = fs::path(path).stem().string();
  for (size_t i = 0; i < grid->entries.size(); ++i) {
    // Named references, not a structured binding: lambdas below capture `key` (C++17 clang).
    const std::string& key = grid->entries[i].first;
    const std::string& value = grid->entries[i].second;
    const std::string at = where(*grid, i) + ": " + key;
    auto count = [&](const std::string& v) -> int64_t {
      try {
        return static_cast<int64_t>(parse::count(v, key));
      } catch (const Error& e) {
        XL_FAIL(kExitConfig, where(*grid, i) << ": " << e.what());
      }
    };
    auto duration = [&](const std::string& v) {
      try {
        return parse::duration(v, key);
      } catch (const Error& e) {
        XL_FAIL(kExitConfig, where(*grid, i) << ": " << e.what());
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
      g.name = value;
    } else if (key == "base-config") {
      try {
        g.base_config = resolve_base_config(value, grid_dir, exe_dir);
      } catch (const Error& e) {
        XL_FAIL(kExitConfig, where(*grid, i) << ": " << e.what());
      }
      have_base = true;
    } else if (key == "p1-steps") {
      g.budget.p1_steps = count(value);
    } else if (key == "p2-steps") {
      g.budget.p2_steps = count(value);
    } else if (key == "p1-time") {
      g.budget.p1_time = duration(value);
    } else if (key == "p2-time") {
      g.budget.p2_time = duration(value);
    } else if (key == "phases") {
      g.default_phases = parse_phases(value, at);
    } else if (key == "eval-tgt-len") {
      g.eval.tgt_len = integer(value);
      XL_CHECK(g.eval.tgt_len >= 1, kExitConfig, at << ": must be at least 1");
    } else if (key == "eval-mem-len") {
      g.eval.mem_len = integer(value);
      XL_CHECK(g.eval.mem_len >= 0, kExitConfig, at << ": must not be negative");
    } else if (key == "eval-batch-size") {
      g.eval.batch_size = integer(value);
      XL_CHECK(g.eval.batch_size >= 1, kExitConfig, at << ": must be at least 1");
    } else if (key == "eval-max-tokens") {
      count(value);
      g.eval.max_tokens = value;
    } else if (key == "seeds") {
      for (const auto& v : parse::split_list(value)) {
        const int64_t seed = integer(v);
        XL_CHECK(seed >= 0, kExitConfig, at << ": seeds must not be negative");
        XL_CHECK(std::find(g.seeds.begin(), g.seeds.end(), seed) == g.seeds.end(), kExitConfig, at << ": seed " << seed << " is listed twice");
        g.seeds.push_back(seed);
      }
      XL_CHECK(!g.seeds.empty(), kExitConfig, at << ": no seed listed");
    } else if (key == "baseline") {
      XL_CHECK(!value.empty(), kExitConfig, at << ": empty");
      g.baseline = value;
    } else if (key == "table-rows") {
      g.table_rows = value;
    } else if (key == "table-cols") {
      g.table_cols = value;
    } else if (key == "table-cell") {
      XL_CHECK(value == "dev" || value == "test", kExitConfig, at << ": must be dev or test");
      g.table_cell = value;
    } else {
      XL_FAIL(kExitConfig, where(*grid, i) << ": [grid]: unknown key '" << key
                                           << "' (name, base-config, p1-steps, p2-steps, p1-time, p2-time, phases, "
                                              "seeds, baseline, eval-tgt-len, eval-mem-len, eval-max-tokens, "
                                              "eval-batch-size, table-rows, table-cols, table-cell)");
    }
  }
  XL_CHECK(have_base, kExitConfig, path << ": [grid] needs base-config (a config name such as tiny, or a path)");
  XL_CHECK(g.budget.p1_steps > 0 || g.budget.p2_steps == 0, kExitConfig, path << ": [grid]: p2-steps needs p1-steps");
  XL_CHECK(g.budget.p1_time > 0 || g.budget.p2_time == 0, kExitConfig, path << ": [grid]: p2-time needs p1-time");
  XL_CHECK(g.table_rows.empty() == g.table_cols.empty(), kExitConfig,
           path << ": [grid]: table-rows and table-cols go together");

  // [common]
  OptionList common;
  for (const auto& s : sections)
    if (s.kind == "common")
      for (size_t i = 0; i < s.entries.size(); ++i) {
        check_option(s, i);
        common.push_back(s.entries[i]);
      }

  // [axes]
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  for (const auto& s : sections) {
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

  // Explicit runs (or one unnamed run that the axes alone expand).
  struct Explicit {
    std::string name, label;
    std::optional<Phases> phases;
    OptionList overrides;
    std::string where;
  };
  std::vector<Explicit> explicit_runs;
  for (const auto& s : sections) {
    if (s.kind != "run") continue;
    Explicit e;
    e.name = s.name;
    e.where = path + ":" + std::to_string(s.line) + ": [run " + s.name + "]";
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
    explicit_runs.push_back(e);
  }
  XL_CHECK(!explicit_runs.empty() || !axes.empty(), kExitConfig, path << ": no runs: give an [axes] section or [run NAME] sections");
  const bool named = !explicit_runs.empty();
  if (!named) explicit_runs.push_back(Explicit{"", "", std::nullopt, {}, path + ": [axes]"});

  std::map<std::string, std::string> taken;  // directory name -> raw name
  for (const auto& e : explicit_runs) {
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
      r.phases = e.phases.value_or(g.default_phases);
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
        parsed = options::phase1_settings(g.base_config, overrides_in_order(overrides), at);
      } catch (const Error& err) {
        const std::string why = err.what();
        if (why.rfind(at, 0) == 0) throw Error(kExitConfig, why);  // names the grid's setting itself
        XL_FAIL(kExitConfig, at << ": " << why);
      }
      XL_CHECK(!(r.phases == Phases::kP1P2 && !(g.budget.p2_steps > 0 || g.budget.p2_time > 0)), kExitConfig,
               at << ": a p1+p2 run needs a phase-2 budget: give p2-steps or p2-time in [grid]");
      r.overrides = overrides_in_order(overrides);
      for (const auto& [k, v] : parsed.settings)
        if (!kNotSettings.count(k)) r.options[k] = v;
      r.budgets = split_budget(g.budget, r.phases);
      // The final evaluation: the grid's settings, else the run's own validation settings.
      r.eval = g.eval;
      train::TrainConfig t = parsed.train;
      if (r.eval.tgt_len <= 0) r.eval.tgt_len = t.effective_eval_tgt_len();
      t.eval_tgt_len = r.eval.tgt_len;
      if (r.eval.mem_len < 0) r.eval.mem_len = t.effective_eval_mem_len();
      // One run per seed, or one run with the base config's seed.
      const std::vector<int64_t> seeds = g.seeds.empty() ? std::vector<int64_t>{0} : g.seeds;
      for (int64_t seed : seeds) {
        AblationRun run = r;
        run.index = static_cast<int>(g.runs.size());
        run.setting = setting;
        run.seed = seed;
        run.name = g.seeds.empty() ? setting : sanitize_run_name(raw + (raw.empty() ? "" : ",") + "seed=" + std::to_string(seed));
        if (!g.seeds.empty()) {
          run.overrides.emplace_back("seed", std::to_string(seed));
          run.options["seed"] = std::to_string(seed);
        }
        auto [pos, fresh] = taken.emplace(run.name, raw);
        XL_CHECK(fresh, kExitConfig, e.where << ": runs '" << pos->second << "' and '" << raw << "' get the same directory name '"
                                             << run.name << "'");
        g.runs.push_back(run);
      }
    }
  }
  if (!g.baseline.empty()) {
    std::set<std::string> matches;
    for (const auto& r : g.runs)
      if (r.setting == g.baseline || r.section == g.baseline) matches.insert(r.setting);
    XL_CHECK(matches.size() == 1, kExitConfig,
             path << ": [grid]: baseline '" << g.baseline << "' "
                  << (matches.empty() ? "names no run" : "names several settings (give one of them: " + *matches.begin() + ", ...)"));
    g.baseline = *matches.begin();
  }

  for (const std::string& key : {g.table_rows, g.table_cols})
    XL_CHECK(key.empty() || key == "phases" || key == "run" || phase1_option_names().count(key), kExitConfig,
             path << ": [grid]: table key '" << key << "' is not an xl-train-phase1 option, phases or run");
  return g;
}

}  // namespace xl::ablate

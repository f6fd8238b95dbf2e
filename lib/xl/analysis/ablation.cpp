#include "xl/analysis/ablation.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "xl/cli/options.h"
#include "xl/train/train_options.h"
#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl::analysis {

namespace fs = std::filesystem;

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) out.push_back(trim(part));
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool dir_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Settings of xl-train-phase1 that belong to the Makefile, not to a grid.
const std::set<std::string> kReservedOptions = {
    "tokens", "output", "force", "metrics", "resume", "progress", "threads", "device", "config",
    "help", "version", "dump-config", "quiet", "verbose", "max-steps", "time-budget", "max-tokens"};

// Left out of run.json's options: what does not change what a run computes, and the budget
// (recorded per phase instead).
const std::set<std::string> kNotSettings = {"tokens", "output", "force", "metrics", "resume", "progress", "threads",
                                            "device", "quiet", "verbose", "max-steps", "time-budget", "max-tokens"};

// Parses xl-train-phase1's options as the tool would: -c BASE then --key value for each override.
struct ParsedRun {
  std::map<std::string, std::string> options;
  train::TrainConfig train;
};

std::unique_ptr<cli::Options> phase1_options() {
  auto cli = std::make_unique<cli::Options>(cli::ToolInfo{"xl-train-phase1", "", "", "", ""});
  train::add_training_options(*cli, train::Phase::kOne);
  return cli;
}

ParsedRun parse_run_options(const std::string& base_config, const OptionList& overrides) {
  std::vector<std::string> args = {"xl-train-phase1"};
  if (!base_config.empty()) {
    args.push_back("-c");
    args.push_back(base_config);
  }
  for (const auto& [k, v] : overrides) args.push_back("--" + k + "=" + v);  // values may start with a minus sign
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto cli = phase1_options();
  cli->parse(static_cast<int>(args.size()), argv.data());
  auto request = train::training_request(*cli, train::Phase::kOne, static_cast<int>(args.size()), argv.data());
  request.train.validate("settings");
  model::ModelConfig m = request.model;
  m.n_token = 256;
  for (int64_t c : m.cutoffs) m.n_token = std::max(m.n_token, c + 2);
  m.validate("model settings");
  ParsedRun out;
  out.train = request.train;
  std::istringstream text(cli->config_text());
  std::string line;
  while (std::getline(text, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    if (!kNotSettings.count(key)) out.options[key] = line.substr(eq + 3);
  }
  return out;
}

const std::set<std::string>& phase1_option_names() {
  static const std::set<std::string> names = [] {
    std::set<std::string> s;
    auto cli = phase1_options();
    char name[] = "xl-train-phase1";
    char* argv[] = {name, nullptr};
    cli->parse(1, argv);
    for (const auto& kv : cli->vm()) s.insert(kv.first);
    return s;
  }();
  return names;
}

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// Single-quoted for bash, with make's '$' doubled.
std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else if (c == '$') out += "$$";
    else out += c;
  }
  return out + "'";
}

// Paths that make and the shell take as they are.
void check_make_path(const std::string& path, const std::string& what) {
  for (char c : path)
    XL_CHECK(std::isalnum(static_cast<unsigned char>(c)) || std::string("/._+,=@~-").find(c) != std::string::npos,
             kExitUsage, what << ": '" << path << "': make cannot handle the character '" << c
                              << "' in a path (use letters, digits and /._+,=@~-)");
}

std::string json_line(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

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
    p2.max_steps = b.p1_steps + b.p2_steps;  // the trainers count steps from phase 1's start
  }
  if (b.has_time()) {
    p1.time_budget = b.p1_time;
    p2.time_budget = b.p2_time;
  }
  // Phase 2 inherits phase 1's settings: a limit of the other kind must not end it at once.
  if (!p2.max_steps) p2.max_steps = 0;
  if (!p2.time_budget) p2.time_budget = 0;
  return {p1, p2};
}

std::string AblationRun::value_of(const std::string& key) const {
  if (key == "phases") return phases_name(phases);
  if (key == "name") return name;
  if (key == "run") return section.empty() ? name : section;
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
    return file_exists(p.string());
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
      line = trim(line);
      if (line.empty() || line[0] == ';') continue;
      if (line[0] == '[') {
        XL_CHECK(line.back() == ']', kExitConfig, path << ":" << n << ": bad section header '" << line << "'");
        std::string inner = trim(line.substr(1, line.size() - 2));
        Section s;
        s.line = n;
        auto sp = inner.find_first_of(" \t");
        s.kind = sp == std::string::npos ? inner : inner.substr(0, sp);
        s.name = sp == std::string::npos ? "" : trim(inner.substr(sp));
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
      std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
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
    XL_CHECK(phase1_option_names().count(key), kExitConfig,
             where(s, i) << ": [" << s.kind << "]: '" << key << "' is not an xl-train-phase1 option");
    XL_CHECK(!kReservedOptions.count(key), kExitConfig,
             where(s, i) << ": [" << s.kind << "]: '" << key << "' is set by xl-ablate itself"
                         << (key == "max-steps" || key == "time-budget" || key == "max-tokens"
                                 ? " (give p1-steps/p2-steps or p1-time/p2-time in [grid])"
                                 : ""));
  };

  // [grid]
  const Section* grid = nullptr;
  for (const auto& s : sections)
    if (s.kind == "grid") grid = &s;
  XL_CHECK(grid, kExitConfig, path << ": no [grid] section (it names the grid and its base-config)");
  bool have_base = false;
  g.name = fs::path(path).stem().string();
  for (size_t i = 0; i < grid->entries.size(); ++i) {
    const auto& [key, value] = grid->entries[i];
    const std::string at = where(*grid, i) + ": " + key;
    auto count = [&](const std::string& v) -> int64_t {
      try {
        return static_cast<int64_t>(cli::parse_count(v, key));
      } catch (const Error& e) {
        XL_FAIL(kExitConfig, where(*grid, i) << ": " << e.what());
      }
    };
    auto duration = [&](const std::string& v) {
      try {
        return train::parse_duration(v, key);
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
                                              "eval-tgt-len, eval-mem-len, eval-max-tokens, eval-batch-size, "
                                              "table-rows, table-cols, table-cell)");
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
      auto values = split_list(value);
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
      r.index = static_cast<int>(g.runs.size());
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
      // Later settings win; each key keeps its first position.
      for (const auto& [k, v] : overrides) {
        auto it = std::find_if(r.overrides.begin(), r.overrides.end(), [&](const auto& p) { return p.first == k; });
        if (it == r.overrides.end()) r.overrides.emplace_back(k, v);
        else it->second = v;
      }
      r.name = sanitize_run_name(raw);
      auto [pos, fresh] = taken.emplace(r.name, raw);
      XL_CHECK(fresh, kExitConfig, e.where << ": runs '" << pos->second << "' and '" << raw << "' get the same directory name '"
                                           << r.name << "'");
      const std::string at = e.where + (raw == e.name ? "" : " (" + raw + ")");
      ParsedRun parsed;
      try {
        parsed = parse_run_options(g.base_config, r.overrides);
      } catch (const Error& err) {
        XL_FAIL(kExitConfig, at << ": " << err.what());
      }
      r.options = parsed.options;
      XL_CHECK(!(r.phases == Phases::kP1P2 && !(g.budget.p2_steps > 0 || g.budget.p2_time > 0)), kExitConfig,
               at << ": a p1+p2 run needs a phase-2 budget: give p2-steps or p2-time in [grid]");
      r.budgets = split_budget(g.budget, r.phases);
      // The final evaluation: the grid's settings, else the run's own validation settings.
      r.eval = g.eval;
      train::TrainConfig t = parsed.train;
      if (r.eval.tgt_len <= 0) r.eval.tgt_len = t.effective_eval_tgt_len();
      t.eval_tgt_len = r.eval.tgt_len;
      if (r.eval.mem_len < 0) r.eval.mem_len = t.effective_eval_mem_len();
      g.runs.push_back(r);
    }
  }

  for (const std::string& key : {g.table_rows, g.table_cols})
    XL_CHECK(key.empty() || key == "phases" || key == "run" || phase1_option_names().count(key), kExitConfig,
             path << ": [grid]: table key '" << key << "' is not an xl-train-phase1 option, phases or run");
  return g;
}

nlohmann::json run_json(const Grid& grid, const AblationRun& run) {
  nlohmann::json axes = nlohmann::json::array(), overrides = nlohmann::json::array(), budgets = nlohmann::json::array();
  for (const auto& [k, v] : run.axes) axes.push_back({k, v});
  for (const auto& [k, v] : run.overrides) overrides.push_back({k, v});
  for (const auto& b : run.budgets) {
    nlohmann::json j = nlohmann::json::object();
    if (b.max_steps) j["max_steps"] = *b.max_steps;
    if (b.time_budget) j["time_budget"] = *b.time_budget;
    budgets.push_back(j);
  }
  nlohmann::json j = {{"grid", grid.name},
                      {"index", run.index},
                      {"name", run.name},
                      {"phases", phases_name(run.phases)},
                      {"axes", axes},
                      {"overrides", overrides},
                      {"base_config", grid.base_config},
                      {"budget", budgets},
                      {"eval", {{"tgt_len", run.eval.tgt_len}, {"mem_len", run.eval.mem_len},
                                {"batch_size", run.eval.batch_size}, {"max_tokens", run.eval.max_tokens}}},
                      {"options", run.options}};
  if (!run.label.empty()) j["label"] = run.label;
  if (!run.section.empty()) j["section"] = run.section;
  if (!grid.table_rows.empty())
    j["table"] = {{"rows", grid.table_rows}, {"cols", grid.table_cols}, {"cell", grid.table_cell}};
  return j;
}

nlohmann::json grid_json(const Grid& grid) {
  // Each run with what a pivot needs before its directory exists.
  nlohmann::json names = nlohmann::json::array();
  for (const auto& r : grid.runs) {
    nlohmann::json keys = {{"run", r.value_of("run")}};
    for (const auto& k : {grid.table_rows, grid.table_cols})
      if (!k.empty()) keys[k] = r.value_of(k);
    nlohmann::json j = {{"name", r.name}, {"phases", phases_name(r.phases)}, {"keys", keys}};
    if (!r.label.empty()) j["label"] = r.label;
    names.push_back(j);
  }
  nlohmann::json j = {{"name", grid.name}, {"grid_file", fs::absolute(grid.path).lexically_normal().string()},
                      {"base_config", grid.base_config}, {"runs", names}};
  if (!grid.table_rows.empty())
    j["table"] = {{"rows", grid.table_rows}, {"cols", grid.table_cols}, {"cell", grid.table_cell}};
  return j;
}

bool same_training(const nlohmann::json& a, const nlohmann::json& b) {
  for (const char* k : {"phases", "options", "budget", "eval"})
    if (a.value(k, nlohmann::json()) != b.value(k, nlohmann::json())) return false;
  return true;
}

std::string makefile_text(const Grid& grid, const MakefileSettings& s) {
  check_make_path(s.bin_dir, "tool directory");
  check_make_path(s.out_dir, "--out");
  check_make_path(grid.base_config, "base-config");
  if (s.tokens_text.empty()) check_make_path(s.tokens, "--tokens");
  else check_make_path(s.tokens_text, "--tokens-text");
  std::ostringstream mk;
  mk << "# Generated by xl-ablate from " << (s.grid_path.empty() ? grid.path : s.grid_path) << " (grid " << grid.name << ", "
     << grid.runs.size() << " runs); regenerate it rather than edit it.\n"
     << "# make -f THIS -jN trains what is not finished: an interrupted training resumes from its checkpoint,\n"
     << "# finished runs are left alone. Each run is a directory OUT/RUN; `make -f THIS report` prints the tables.\n"
     << "SHELL := bash\n"
     << ".SHELLFLAGS := -euo pipefail -c\n"
     << ".DELETE_ON_ERROR:\n"
     << ".SUFFIXES:\n\n"
     << "BIN := " << s.bin_dir << "\n"
     << "OUT := " << s.out_dir << "\n"
     << "CONFIG := " << grid.base_config << "\n"
     << "TOKENS := " << (s.tokens_text.empty() ? s.tokens : "$(OUT)/tokens.h5") << "\n"
     << "THREADS ?= " << std::max(1, s.threads) << "\n\n";
  for (const auto& r : grid.runs) mk << "R" << r.index << " := $(OUT)/" << r.name << "\n";
  mk << "\n.PHONY: all report\nall:";
  for (const auto& r : grid.runs) mk << " $(R" << r.index << ")/done.stamp";
  mk << "\n\nreport:\n\t@$(BIN)/xl-ablate report $(OUT)\n";
  if (!s.tokens_text.empty()) {
    mk << "\n$(TOKENS): " << s.tokens_text << "\n"
       << "\t@mkdir -p $(@D)\n"
       << "\t@echo \"xl-ablate: tokenizing " << s.tokens_text << "\"\n"
       << "\t@$(BIN)/xl-tokenize --mode byte --split 0.9,0.05,0.05 -q -f -o $@ " << s.tokens_text << "\n";
  }
  // cmd 2>>LOG, and on failure the end of LOG on stderr and the tool's status, kept in RUN/failed
  // unless a signal stopped it (then it resumes next time).
  auto logged = [](const std::string& dir, const std::string& log) {
    return " 2>>" + dir + "/" + log + " || { rc=$$?; tail -n 3 " + dir + "/" + log + " >&2; [ $$rc -ge 128 ] || echo $$rc >" +
           dir + "/failed; exit $$rc; }";
  };
  for (const auto& r : grid.runs) {
    const std::string R = "$(R" + std::to_string(r.index) + ")";
    const std::string who = "xl-ablate: " + r.name + ":";
    std::string label = r.label;  // a comment line must not end in a backslash (make would continue it)
    std::replace(label.begin(), label.end(), '\\', '/');
    mk << "\n# --- " << r.name << (label.empty() ? "" : " (" + label + ")") << ": " << phases_name(r.phases) << "\n";
    mk << R << "/run.json:\n\t@mkdir -p $(@D) && printf '%s\\n' " << sh_quote(json_line(run_json(grid, r))) << " >$@\n";
    auto budget_flags = [](const PhaseBudget& b) {
      std::string f;
      if (b.max_steps) f += " --max-steps " + std::to_string(*b.max_steps);
      if (b.time_budget) f += " --time-budget " + format_number(*b.time_budget) + "s";
      return f;
    };
    std::string overrides;
    for (const auto& [k, v] : r.overrides) overrides += " --" + k + "=" + sh_quote(v);
    mk << R << "/p1.stamp: " << R << "/run.json | $(TOKENS)\n"
       << "\t@rm -f " << R << "/failed; if [ -f " << R << "/p1.h5 ]; then m=--resume; echo \"" << who << " phase 1 (resuming)\"; "
       << "else m=-f; echo \"" << who << " phase 1\"; fi; \\\n"
       << "\t$(BIN)/xl-train-phase1 -c $(CONFIG)" << overrides << budget_flags(r.budgets[0])
       << " --threads $(THREADS) --metrics " << R << "/p1.jsonl -o " << R << "/p1.h5 $$m $(TOKENS)" << logged(R, "p1.log") << "\n"
       << "\t@touch $@\n";
    std::string last = "p1";
    if (r.phases == Phases::kP1P2) {
      mk << R << "/p2.stamp: " << R << "/p1.stamp\n"
         << "\t@rm -f " << R << "/failed; if [ -f " << R << "/p2.h5 ]; then m=--resume; echo \"" << who << " phase 2 (resuming)\"; "
         << "else m=\"-f --init " << R << "/p1.h5\"; echo \"" << who << " phase 2\"; fi; \\\n"
         << "\t$(BIN)/xl-train-phase2" << budget_flags(r.budgets[1]) << " --threads $(THREADS) --metrics " << R
         << "/p2.jsonl -o " << R << "/p2.h5 $$m $(TOKENS)" << logged(R, "p2.log") << "\n"
         << "\t@touch $@\n";
      last = "p2";
    }
    for (const auto& [file, split] : {std::pair<std::string, std::string>{"dev", "valid"}, {"test", "test"}}) {
      mk << R << "/" << file << ".jsonl: " << R << "/" << last << ".stamp\n"
         << "\t@rm -f " << R << "/failed; echo \"" << who << " evaluating on " << split << "\"; ck=" << R << "/" << last << ".best.h5; [ -f $$ck ] || ck="
         << R << "/" << last << ".h5; \\\n"
         << "\t$(BIN)/xl-eval-longctx --split " << split << " --tgt-len " << r.eval.tgt_len << " --mem-len " << r.eval.mem_len
         << " --batch-size " << r.eval.batch_size << " --max-tokens " << sh_quote(r.eval.max_tokens)
         << " --threads $(THREADS) -f -o $@ $$ck $(TOKENS)" << logged(R, "eval.log") << "\n";
    }
    mk << R << "/done.stamp: " << R << "/dev.jsonl " << R << "/test.jsonl\n"
       << "\t@rm -f " << R << "/failed; touch $@; echo \"" << who << " done\"\n";
  }
  return mk.str();
}

// ---------------------------------------------------------------- reports

namespace {

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (trim(line).empty()) continue;
    try {
      auto j = nlohmann::json::parse(line);
      if (j.is_object()) out.push_back(std::move(j));
    } catch (const nlohmann::json::exception&) {
      // a line still being written
    }
  }
  return out;
}

double number_or(const nlohmann::json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

struct PhaseState {
  bool started = false, finished = false, stopped = false;
  int64_t step = 0;
};

PhaseState read_phase(const std::string& file, RunReport& r) {
  PhaseState st;
  auto events = read_jsonl(file);
  double ms_sum = 0, elapsed = 0;
  int ms_n = 0;
  for (const auto& e : events) {
    const std::string ev = e.value("event", "");
    if (e.contains("step") && e["step"].is_number_integer()) st.step = e["step"].get<int64_t>();
    if (e.contains("elapsed") && e["elapsed"].is_number()) elapsed = e["elapsed"].get<double>();
    if (ev == "start") {
      st.started = true;
      st.finished = st.stopped = false;
      if (!r.parameters && e.contains("parameters") && e["parameters"].is_number_integer())
        r.parameters = e["parameters"].get<int64_t>();
    } else if (ev == "train") {
      st.finished = st.stopped = false;
      if (e.contains("ms_per_batch") && e["ms_per_batch"].is_number()) {
        ms_sum += e["ms_per_batch"].get<double>();
        ++ms_n;
      }
    } else if (ev == "valid") {
      for (const char* m : {"bpc", "ppl"})
        if (e.contains(m) && e[m].is_number()) {
          r.metric = m;
          r.curve.push_back({st.step, e[m].get<double>()});
        }
    } else if (ev == "done") {
      const std::string reason = e.value("reason", "");
      st.stopped = reason.rfind("signal", 0) == 0;
      st.finished = !st.stopped;
      double rss = number_or(e, "peak_rss_mb", -1);
      if (rss >= 0) r.peak_rss_mb = std::max(r.peak_rss_mb.value_or(0.0), rss);
    }
  }
  r.ms_per_batch.push_back(ms_n ? std::optional<double>(ms_sum / ms_n) : std::nullopt);
  r.steps.push_back(st.step);
  r.wall_s += elapsed;
  return st;
}

std::optional<double> read_eval(const std::string& file, RunReport& r) {
  for (const auto& e : read_jsonl(file))
    for (const char* m : {"bpc", "ppl"})
      if (e.contains(m) && e[m].is_number()) {
        if (r.metric.empty()) r.metric = m;
        double rss = number_or(e, "peak_rss_mb", -1);
        if (rss >= 0) r.peak_rss_mb = std::max(r.peak_rss_mb.value_or(0.0), rss);
        return e[m].get<double>();
      }
  return std::nullopt;
}

std::string metric_text(const std::optional<double>& v, const std::string& metric) {
  if (!v) return "-";
  return fixed(*v, metric == "ppl" ? 2 : 3);
}

std::string ms_text(const RunReport& r) {
  std::string s;
  for (size_t i = 0; i < r.ms_per_batch.size(); ++i)
    s += (i ? ", " : "") + (r.ms_per_batch[i] ? std::to_string(static_cast<int64_t>(std::lround(*r.ms_per_batch[i]))) : "-");
  return s.empty() ? "-" : s;
}

struct Column {
  std::string title;
  bool right;
};

std::vector<Column> columns(const AblationReport& rep, bool with_label) {
  const std::string m = rep.metric();
  std::vector<Column> c = {{"run", false}};
  if (with_label) c.push_back({"label", false});
  for (Column x : {Column{"phases", false}, Column{"dev " + m, true}, Column{"test " + m, true}, Column{"parameters", true},
                   Column{"ms/batch", true}, Column{"wall time", true}, Column{"peak RSS MB", true}, Column{"status", false}})
    c.push_back(x);
  return c;
}

std::vector<std::string> cells(const AblationReport& rep, const RunReport& r, bool with_label) {
  const std::string m = rep.metric();
  std::vector<std::string> c = {r.name};
  if (with_label) c.push_back(r.label);
  c.push_back(r.phases);
  c.push_back(metric_text(r.dev, m));
  c.push_back(metric_text(r.test, m));
  c.push_back(r.parameters ? std::to_string(*r.parameters) : "-");
  c.push_back(ms_text(r));
  c.push_back(r.wall_s > 0 ? format_wall_time(r.wall_s) : "-");
  c.push_back(r.peak_rss_mb ? std::to_string(static_cast<int64_t>(std::lround(*r.peak_rss_mb))) : "-");
  c.push_back(r.status);
  return c;
}

bool any_label(const AblationReport& rep) {
  for (const auto& r : rep.runs)
    if (!r.label.empty()) return true;
  return false;
}

// Rows and columns of the pivot in order of first appearance; cell: the first run's value.
struct Pivot {
  std::vector<std::string> rows, cols;
  std::map<std::pair<std::string, std::string>, std::optional<double>> cell;
};

Pivot pivot(const AblationReport& rep) {
  Pivot p;
  for (const auto& r : rep.runs) {
    std::string rv = r.key(rep.table_rows), cv = r.key(rep.table_cols);
    if (std::find(p.rows.begin(), p.rows.end(), rv) == p.rows.end()) p.rows.push_back(rv);
    if (std::find(p.cols.begin(), p.cols.end(), cv) == p.cols.end()) p.cols.push_back(cv);
    auto key = std::make_pair(rv, cv);
    if (!p.cell.count(key) || !p.cell[key]) p.cell[key] = rep.table_cell == "test" ? r.test : r.dev;
  }
  return p;
}

std::string cell_text(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? '/' : c;
  return out;
}

}  // namespace

std::string RunReport::key(const std::string& k) const {
  if (k == "phases") return phases;
  if (k == "name") return name;
  auto it = keys.find(k);
  if (it != keys.end()) return it->second;
  return k == "run" ? name : "?";
}

std::string AblationReport::metric() const {
  for (const auto& r : runs)
    if (!r.metric.empty()) return r.metric;
  return "bpc";
}

RunReport read_run(const std::string& run_dir) {
  RunReport r;
  r.name = fs::path(run_dir).filename().string();
  if (r.name.empty()) r.name = fs::path(run_dir).parent_path().filename().string();
  const std::string json_path = run_dir + "/run.json";
  bool have_json = false;
  if (file_exists(json_path)) {
    std::ifstream in(json_path);
    try {
      nlohmann::json j = nlohmann::json::parse(in);
      have_json = true;
      r.name = j.value("name", r.name);
      r.label = j.value("label", "");
      r.phases = j.value("phases", "p1");
      if (j.contains("section") && j["section"].is_string()) r.keys["run"] = j["section"].get<std::string>();
      if (j.contains("options") && j["options"].is_object())
        for (const auto& [k, v] : j["options"].items())
          if (v.is_string()) r.keys[k] = v.get<std::string>();
      for (const char* list : {"overrides", "axes"})
        if (j.contains(list) && j[list].is_array())
          for (const auto& kv : j[list])
            if (kv.is_array() && kv.size() == 2 && kv[0].is_string() && kv[1].is_string()) r.keys[kv[0]] = kv[1].get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      XL_FAIL(kExitDataErr, json_path << ": not a run description: " << e.what());
    }
  }
  if (!have_json && file_exists(run_dir + "/p2.jsonl")) r.phases = "p1+p2";
  r.keys["phases"] = r.phases;
  const int n_phases = r.phases == "p1+p2" ? 2 : 1;
  bool phases_done = true;
  for (int k = 1; k <= n_phases; ++k) {
    PhaseState st = read_phase(run_dir + "/p" + std::to_string(k) + ".jsonl", r);
    if (!phases_done || st.finished) continue;
    phases_done = false;
    if (!st.started) r.status = k == 1 ? "not started" : "phase 2 not started";
    else r.status = "phase " + std::to_string(k) + (st.stopped ? " stopped" : "") + " at step " + std::to_string(st.step);
  }
  r.dev = read_eval(run_dir + "/dev.jsonl", r);
  r.test = read_eval(run_dir + "/test.jsonl", r);
  r.finished = phases_done && r.dev && r.test;
  if (r.finished) r.status = "done";
  else if (phases_done) r.status = "evaluating";
  if (!r.finished && file_exists(run_dir + "/failed")) {
    std::ifstream in(run_dir + "/failed");
    int code = 0;
    in >> code;
    r.status += " (failed, exit " + std::to_string(code) + ")";
  }
  return r;
}

AblationReport read_report(const std::string& dir) {
  AblationReport rep;
  rep.dir = dir;
  XL_CHECK(dir_exists(dir), kExitNoInput, dir << ": no such directory");
  auto set_table = [&](const nlohmann::json& j) {
    if (!j.contains("table") || !j["table"].is_object()) return;
    rep.table_rows = j["table"].value("rows", "");
    rep.table_cols = j["table"].value("cols", "");
    rep.table_cell = j["table"].value("cell", "dev");
  };
  const std::string grid_path = dir + "/grid.json";
  if (file_exists(grid_path)) {
    nlohmann::json g;
    try {
      std::ifstream in(grid_path);
      g = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      XL_FAIL(kExitDataErr, grid_path << ": not a grid description: " << e.what());
    }
    rep.grid_name = g.value("name", "");
    set_table(g);
    if (g.contains("runs") && g["runs"].is_array())
      for (const auto& n : g["runs"]) {
        const std::string name = n.is_string() ? n.get<std::string>() : n.is_object() ? n.value("name", "") : "";
        if (name.empty()) continue;
        if (dir_exists(dir + "/" + name)) {
          rep.runs.push_back(read_run(dir + "/" + name));
          continue;
        }
        RunReport r;
        r.name = name;
        r.status = "not started";
        if (n.is_object()) {
          r.label = n.value("label", "");
          r.phases = n.value("phases", "p1");
          if (n.contains("keys") && n["keys"].is_object())
            for (const auto& [k, v] : n["keys"].items())
              if (v.is_string()) r.keys[k] = v.get<std::string>();
        }
        r.ms_per_batch.assign(r.phases == "p1+p2" ? 2 : 1, std::nullopt);
        rep.runs.push_back(r);
      }
  } else {
    std::vector<std::pair<int64_t, std::string>> found;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_directory()) continue;
      const std::string p = entry.path().string();
      if (!file_exists(p + "/run.json") && !file_exists(p + "/p1.jsonl")) continue;
      int64_t index = INT64_MAX;
      if (file_exists(p + "/run.json")) {
        try {
          std::ifstream in(p + "/run.json");
          auto j = nlohmann::json::parse(in);
          index = j.value("index", INT64_MAX);
          if (rep.grid_name.empty()) rep.grid_name = j.value("grid", "");
          if (rep.table_rows.empty()) set_table(j);
        } catch (const nlohmann::json::exception&) {
        }
      }
      found.emplace_back(index, p);
    }
    std::sort(found.begin(), found.end());
    for (const auto& [i, p] : found) rep.runs.push_back(read_run(p));
  }
  XL_CHECK(!rep.runs.empty(), kExitNoInput, dir << ": no ablation runs here (no grid.json, no RUN/run.json)");
  if (rep.grid_name.empty()) rep.grid_name = fs::path(dir).filename().string();
  return rep;
}

std::string report_markdown(const AblationReport& rep) {
  std::ostringstream os;
  const bool label = any_label(rep);
  auto cols = columns(rep, label);
  int finished = 0;
  for (const auto& r : rep.runs) finished += r.finished;
  os << "## " << rep.grid_name << "\n\n";
  os << "|";
  for (const auto& c : cols) os << " " << c.title << " |";
  os << "\n|";
  for (const auto& c : cols) os << (c.right ? "---:|" : "---|");
  os << "\n";
  for (const auto& r : rep.runs) {
    os << "|";
    for (const auto& c : cells(rep, r, label)) os << " " << cell_text(c) << " |";
    os << "\n";
  }
  os << "\n" << finished << " of " << rep.runs.size() << " runs finished. ms/batch: mean time per training batch of each phase"
     << " (phase 1, phase 2); wall time: training, all phases.\n";
  if (!rep.table_rows.empty()) {
    Pivot p = pivot(rep);
    const std::string m = rep.metric();
    os << "\n### " << rep.table_cell << " " << m << ": " << rep.table_rows << " (rows) by " << rep.table_cols << " (columns)\n\n";
    os << "| " << rep.table_rows << " \\ " << rep.table_cols << " |";
    for (const auto& c : p.cols) os << " " << cell_text(c) << " |";
    os << "\n|---|";
    for (size_t i = 0; i < p.cols.size(); ++i) os << "---:|";
    os << "\n";
    for (const auto& rv : p.rows) {
      os << "| " << cell_text(rv) << " |";
      for (const auto& cv : p.cols) {
        auto it = p.cell.find({rv, cv});
        os << " " << (it == p.cell.end() ? "" : metric_text(it->second, m)) << " |";
      }
      os << "\n";
    }
  }
  return os.str();
}

std::string report_tsv(const AblationReport& rep) {
  std::ostringstream os;
  const bool label = any_label(rep);
  auto cols = columns(rep, label);
  auto clean = [](std::string s) {
    for (auto& ch : s)
      if (ch == '\t' || ch == '\n') ch = ' ';
    return s;
  };
  for (size_t i = 0; i < cols.size(); ++i) os << (i ? "\t" : "") << cols[i].title;
  os << "\n";
  for (const auto& r : rep.runs) {
    auto c = cells(rep, r, label);
    for (size_t i = 0; i < c.size(); ++i) os << (i ? "\t" : "") << clean(c[i]);
    os << "\n";
  }
  if (!rep.table_rows.empty()) {
    Pivot p = pivot(rep);
    const std::string m = rep.metric();
    os << "\n" << rep.table_rows << "\\" << rep.table_cols;
    for (const auto& c : p.cols) os << "\t" << clean(c);
    os << "\n";
    for (const auto& rv : p.rows) {
      os << clean(rv);
      for (const auto& cv : p.cols) {
        auto it = p.cell.find({rv, cv});
        os << "\t" << (it == p.cell.end() ? "" : metric_text(it->second, m));
      }
      os << "\n";
    }
  }
  return os.str();
}

std::string report_jsonl(const AblationReport& rep) {
  std::ostringstream os;
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  for (const auto& r : rep.runs) {
    nlohmann::json ms = nlohmann::json::array();
    for (const auto& m : r.ms_per_batch) ms.push_back(opt(m));
    nlohmann::json j = {{"grid", rep.grid_name}, {"run", r.name}, {"phases", r.phases}, {"finished", r.finished},
                        {"status", r.status}, {"metric", r.metric.empty() ? rep.metric() : r.metric},
                        {"dev", opt(r.dev)}, {"test", opt(r.test)}, {"parameters", opt(r.parameters)},
                        {"ms_per_batch", ms}, {"steps", r.steps}, {"wall_s", r.wall_s},
                        {"peak_rss_mb", opt(r.peak_rss_mb)}};
    if (!r.label.empty()) j["label"] = r.label;
    if (!rep.table_rows.empty()) j["keys"] = {{rep.table_rows, r.key(rep.table_rows)}, {rep.table_cols, r.key(rep.table_cols)}};
    os << json_line(j) << "\n";
  }
  return os.str();
}

void plot_validation(const AblationReport& rep, const std::string& png) {
  bool any = false;
  for (const auto& r : rep.runs) any = any || !r.curve.empty();
  XL_CHECK(any, kExitDataErr, "--plot: no run in " << rep.dir << " has validation points yet");
  io::AtomicOutput out(png, true, true);
  const std::string data = out.temp_path() + ".dat", script = out.temp_path() + ".gp";
  std::ostringstream plot;
  {
    std::ofstream d(data);
    int block = 0;
    for (const auto& r : rep.runs) {
      if (r.curve.empty()) continue;
      for (const auto& p : r.curve) d << p.step << " " << p.value << "\n";
      d << "\n\n";
      std::string title = r.label.empty() ? r.name : r.label + " (" + r.name + ")";
      std::replace(title.begin(), title.end(), '\'', '"');
      plot << (block ? ", " : "plot ") << "'" << data << "' index " << block << " using 1:2 with linespoints title '" << title << "'";
      ++block;
    }
    XL_CHECK(d.good(), kExitCantCreat, "cannot write " << data);
  }
  {
    std::ofstream gp(script);
    gp << "set terminal pngcairo size 1000,600 noenhanced\n"
       << "set output '" << out.temp_path() << "'\n"
       << "set title '" << rep.grid_name << ": validation during training'\n"
       << "set xlabel 'step'\nset ylabel 'valid " << (rep.metric() == "ppl" ? "perplexity" : "bpc") << "'\n"
       << "set grid\nset key outside right\n"
       << plot.str() << "\n";
  }
  int rc = std::system(("gnuplot '" + script + "' 2>/dev/null").c_str());
  std::remove(data.c_str());
  std::remove(script.c_str());
  XL_CHECK(rc == 0, 69, "--plot: gnuplot failed or is not installed (apt-get install gnuplot-nox)");
  out.commit();
}

std::string format_wall_time(double seconds) {
  auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60),
                static_cast<long long>(s % 60));
  return buf;
}

}  // namespace xl::analysis

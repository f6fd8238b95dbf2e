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

}  // namespace xl::ablate

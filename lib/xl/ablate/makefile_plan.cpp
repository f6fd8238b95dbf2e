#include "xl/ablate/makefile_plan.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

#include "xl/util/error.h"
#include "xl/util/json_io.h"

namespace xl::ablate {

namespace fs = std::filesystem;

namespace {

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
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

}  // namespace

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
                      {"setting", run.setting},
                      {"phases", phases_name(run.phases)},
                      {"axes", axes},
                      {"overrides", overrides},
                      {"base_config", grid.base_config},
                      {"budget", budgets},
                      {"eval", {{"tgt_len", run.eval.tgt_len}, {"mem_len", run.eval.mem_len},
                                {"batch_size", run.eval.batch_size}, {"max_tokens", run.eval.max_tokens}}},
                      {"options", run.options}};
  if (!grid.seeds.empty()) j["seed"] = run.seed;
  if (!grid.baseline.empty()) j["baseline"] = grid.baseline;
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
    nlohmann::json j = {{"name", r.name}, {"setting", r.setting}, {"phases", phases_name(r.phases)}, {"keys", keys}};
    if (!grid.seeds.empty()) j["seed"] = r.seed;
    if (!r.label.empty()) j["label"] = r.label;
    names.push_back(j);
  }
  nlohmann::json j = {{"name", grid.name}, {"grid_file", fs::absolute(grid.path).lexically_normal().string()},
                      {"base_config", grid.base_config}, {"runs", names}};
  if (!grid.seeds.empty()) j["seeds"] = grid.seeds;
  if (!grid.baseline.empty()) j["baseline"] = grid.baseline;
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
  if (!s.tensorboard.empty()) check_make_path(s.tensorboard, "--tensorboard");
  check_make_path(grid.base_config, "base-config");
  if (s.tokens_text.empty()) check_make_path(s.tokens, "--tokens");
  else check_make_path(s.tokens_text, "--tokens-text");
  std::ostringstream mk;
  mk << kMakefileMark << " from " << (s.grid_path.empty() ? grid.path : s.grid_path) << " (grid " << grid.name << ", "
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
     << "THREADS ?= " << std::max(1, s.threads) << "\n"
     << "# What starts each training: empty (one process), or a launcher such as\n"
     << "# torchrun --nproc_per_node 2 --no_python, srun, or mpirun -n 2.\n"
     << "LAUNCH ?= " << s.launch << "\n"
     << "# Each run's TensorBoard curves go to TENSORBOARD/RUN (both phases); empty: none.\n"
     << "TENSORBOARD ?= " << s.tensorboard << "\n"
     << "comma := ,\n\n";
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
    // A run's name holds commas (one per axis), which would split make's $(if ...): $(comma).
    std::string name_in_if;
    for (char ch : r.name) name_in_if += ch == ',' ? std::string("$(comma)") : std::string(1, ch);
    const std::string tensorboard = "$(if $(TENSORBOARD), --tensorboard $(TENSORBOARD)/" + name_in_if + ")";
    mk << R << "/p1.stamp: " << R << "/run.json | $(TOKENS)\n"
       << "\t@rm -f " << R << "/failed; if [ -f " << R << "/p1.h5 ]; then m=--resume; echo \"" << who << " phase 1 (resuming)\"; "
       << "else m=-f; echo \"" << who << " phase 1\"; fi; \\\n"
       << "\t$(LAUNCH) $(BIN)/xl-train-phase1 -c $(CONFIG)" << overrides << budget_flags(r.budgets[0])
       << " --threads $(THREADS) --metrics " << R << "/p1.jsonl" << tensorboard << " -o " << R << "/p1.h5 $$m $(TOKENS)"
       << logged(R, "p1.log") << "\n"
       << "\t@touch $@\n";
    std::string last = "p1";
    if (r.phases == Phases::kP1P2) {
      mk << R << "/p2.stamp: " << R << "/p1.stamp\n"
         << "\t@rm -f " << R << "/failed; if [ -f " << R << "/p2.h5 ]; then m=--resume; echo \"" << who << " phase 2 (resuming)\"; "
         << "else m=\"-f --init " << R << "/p1.h5\"; echo \"" << who << " phase 2\"; fi; \\\n"
         << "\t$(LAUNCH) $(BIN)/xl-train-phase2" << budget_flags(r.budgets[1]) << " --threads $(THREADS) --metrics " << R
         << "/p2.jsonl" << tensorboard << " -o " << R << "/p2.h5 $$m $(TOKENS)" << logged(R, "p2.log") << "\n"
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

}  // namespace xl::ablate

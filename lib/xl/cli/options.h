// The command-line layer every tool shares: --help/--version on stdout, INI config files (-c,
// repeatable, later files win, the command line wins over all), --dump-config, -q/-v and the
// output options. The option groups of the domain (model, training, evaluation, compute) are
// defined once in options/. Usage errors exit 64, config errors 78.
#pragma once
#include <boost/program_options.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "xl/util/error.h"
#include "xl/util/setting_origins.h"

namespace xl::cli {

namespace po = boost::program_options;

struct ToolInfo {
  std::string name;         // "xl-tokenize"
  std::string summary;      // one line for --help, man NAME section and --version
  std::string usage;        // "[OPTIONS] [INPUT]"
  std::string description;  // paragraphs shown after the usage line
  std::string examples;     // lines shown under "Examples:"
};

class Options {
 public:
  explicit Options(ToolInfo info);

  // A titled group of options; groups print in the order they were first asked for.
  po::options_description_easy_init add(const std::string& group);
  // Positional arguments map onto option NAME (max_count -1: unlimited).
  void positional(const std::string& name, int max_count);

  // -o/--output (default "-") and -f/--force.
  void add_output(const std::string& what);
  // Options (or positional names) whose values are files this tool reads, and files it writes
  // beside -o: parse() refuses an output that is one of the inputs, or two outputs that are one
  // file, even with -f (an output replaces its file; a tokens file or text would be lost).
  void files(std::vector<std::string> inputs, std::vector<std::string> outputs = {});
  // An input whose value lists files (a comma list of checkpoints): `split` gives them, and each
  // is checked against the outputs.
  void input_list(const std::string& name, std::function<std::vector<std::string>(const std::string&)> split);
  // A file the tool also writes, named after -o ("run.h5" -> "run.best.h5"; "" when there is
  // none, for stdout or a device): checked as the outputs are, described as `what`.
  void output_beside(std::string what, std::function<std::string(const std::string&)> name_for);

  // Returns false when --help, --version or --dump-config printed what was asked (exit 0).
  bool parse(int argc, char** argv);
  // The same settings as `TOOL -c FILE... --KEY=VALUE...` would give, without a command line:
  // for programs that check settings meant for another tool (xl-ablate's grids). Fails like parse(),
  // except that errors name the key values' `source` ("g.ini: [axes] (lr=-1): lr must be
  // positive", 78) where one is given.
  void parse_settings(const std::vector<std::string>& config_files,
                      const std::vector<std::pair<std::string, std::string>>& key_values, const std::string& source = "");

  bool has(const std::string& name) const { return vm_.count(name) && !vm_[name].empty(); }
  // Given on the command line or in a config file (not just defaulted).
  bool given(const std::string& name) const { return vm_.count(name) && !vm_[name].defaulted(); }
  template <typename T>
  T get(const std::string& name) const { return vm_[name].as<T>(); }
  // For options without a default: the value, or `otherwise` when not given.
  template <typename T>
  T get_or(const std::string& name, T otherwise) const { return has(name) ? get<T>(name) : otherwise; }
  // For options without a default: the value, or nothing when not given (an empty value is given).
  template <typename T>
  std::optional<T> get_optional(const std::string& name) const {
    return has(name) ? std::optional<T>(get<T>(name)) : std::nullopt;
  }
  const po::variables_map& vm() const { return vm_; }

  // Where each option given came from: the command line or a config file.
  SettingOrigins origins() const;
  // Fails naming where option `name`'s value came from: "--tgt-len must be at least 1" (64), or
  // "eval.ini: tgt-len must be at least 1" (78).
  [[noreturn]] void fail(const std::string& name, const std::string& why) const;
  // Option `name`'s value read by `read(what)`, where `what` names where the value came from; a
  // value from a config file fails with 78.
  template <typename Read>
  auto parsed(const std::string& name, Read read) const -> decltype(read(std::string()));
  // Values with K/M/G suffixes ("90M"), durations ("15m"), integer lists ("2000,4000").
  uint64_t count(const std::string& name) const;
  double duration(const std::string& name) const;
  std::vector<int64_t> int_list(const std::string& name) const;

  std::string output() const { return get<std::string>("output"); }
  bool force() const { return get<bool>("force"); }
  const ToolInfo& info() const { return info_; }
  std::string help_text() const;
  std::string version_text() const;
  // The effective settings (defaults, config files, command line) as (key, value) in --help
  // order, without the positional arguments and the meta options (help, config, ...).
  std::vector<std::pair<std::string, std::string>> settings() const;
  // The same as INI (what --dump-config prints).
  std::string config_text() const;

 private:
  ToolInfo info_;
  std::vector<std::pair<std::string, po::options_description>> groups_;
  po::options_description common_{"Common options"};
  po::positional_options_description positional_;
  po::variables_map vm_;
  std::set<std::string> command_line_;
  std::map<std::string, std::string> config_file_;  // option -> the config file its value came from

  std::vector<std::string> input_files_, output_files_;
  std::map<std::string, std::function<std::vector<std::string>(const std::string&)>> input_lists_;
  std::string beside_what_;
  std::function<std::string(const std::string&)> beside_name_;

  void read_config_files(const std::vector<std::string>& files, const po::options_description& all);
  void finish_parse();
  void check_files() const;
  // "INPUT" for a positional argument, "--vocab" for an option.
  std::string shown(const std::string& name) const;
  // The paths an option holds: one, or a repeatable option's list; none when not given.
  std::vector<std::string> paths(const std::string& name) const;
  // An input's paths, a list's files among them.
  std::vector<std::string> input_paths(const std::string& name) const;
  std::string excess_argument_message(int argc, char** argv, const po::options_description& all) const;
};

template <typename Read>
auto Options::parsed(const std::string& name, Read read) const -> decltype(read(std::string())) {
  const SettingOrigins o = origins();
  try {
    return read(o.name(name));
  } catch (const Error& e) {
    throw Error(o.exit_code(name), e.what());
  }
}

// A real-valued option whose default --help shows as written: 0.1, not Boost's 0.10000000000000001.
po::typed_value<double>* real_value(double default_value);

// The command line as one string, for provenance attributes.
std::string command_line(int argc, char** argv);

}  // namespace xl::cli

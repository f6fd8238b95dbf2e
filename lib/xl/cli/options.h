// The command-line layer every tool shares (DESIGN §8): --help/--version on stdout, INI config
// files (-c, repeatable, later files win, the command line wins over all), --dump-config, -q/-v,
// and the common output and compute options. Usage errors exit 64, config errors 78.
#pragma once
#include <boost/program_options.hpp>

#include <cstdint>
#include <string>
#include <vector>

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

  // -o/--output (default "-") and -f/--force. `binary` refuses a terminal for "-".
  void add_output(bool binary, const std::string& what);
  // --threads, --seed, --device.
  void add_compute();

  // Returns false when --help, --version or --dump-config printed what was asked (exit 0).
  bool parse(int argc, char** argv);

  bool has(const std::string& name) const { return vm_.count(name) && !vm_[name].empty(); }
  // Given on the command line or in a config file (not just defaulted).
  bool given(const std::string& name) const { return vm_.count(name) && !vm_[name].defaulted(); }
  template <typename T>
  T get(const std::string& name) const { return vm_[name].as<T>(); }
  const po::variables_map& vm() const { return vm_; }

  std::string output() const { return get<std::string>("output"); }
  bool force() const { return get<bool>("force"); }
  bool binary_output() const { return binary_output_; }
  int threads() const;
  uint64_t seed() const;
  std::string device() const;
  const ToolInfo& info() const { return info_; }
  std::string help_text() const;
  std::string version_text() const;
  // The effective settings as INI (what --dump-config prints).
  std::string config_text() const;

 private:
  ToolInfo info_;
  std::vector<std::pair<std::string, po::options_description>> groups_;
  po::options_description common_{"Common options"};
  po::positional_options_description positional_;
  po::variables_map vm_;
  bool binary_output_ = false;
};

// A real-valued option whose default --help shows as written: 0.1, not Boost's 0.10000000000000001.
po::typed_value<double>* real_value(double default_value);

// The command line as one string, for provenance attributes.
std::string command_line(int argc, char** argv);

// "90M" -> 90000000, "64K" -> 64000, "5" -> 5; throws 64 naming `what` on junk.
uint64_t parse_count(const std::string& text, const std::string& what);

}  // namespace xl::cli

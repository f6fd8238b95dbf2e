#include "xl/cli/options.h"

#include <H5public.h>
#include <torch/version.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <iostream>
#include <thread>

#include "xl/util/error.h"
#include "xl/util/log.h"

namespace xl::cli {

Options::Options(ToolInfo info) : info_(std::move(info)) {
  common_.add_options()
      ("help,h", "print this help and exit")
      ("version,V", "print the version and exit")
      ("config,c", po::value<std::vector<std::string>>()->composing(),
       "read settings from an INI file (repeatable; later files win, the command line wins)")
      ("dump-config", "print the effective settings as INI and exit")
      ("quiet,q", po::bool_switch(), "print only errors on stderr")
      ("verbose,v", po::bool_switch(), "print debugging detail on stderr");
}

po::options_description_easy_init Options::add(const std::string& group) {
  for (auto& g : groups_)
    if (g.first == group) return g.second.add_options();
  groups_.emplace_back(group, po::options_description(group));
  return groups_.back().second.add_options();
}

void Options::positional(const std::string& name, int max_count) { positional_.add(name.c_str(), max_count); }

void Options::add_output(bool binary, const std::string& what) {
  binary_output_ = binary;
  add("Output")
      ("output,o", po::value<std::string>()->default_value("-"), ("write " + what + " to FILE (- is stdout)").c_str())
      ("force,f", po::bool_switch(), "overwrite an existing output file");
}

void Options::add_compute() {
  add("Compute")
      ("threads", po::value<int>()->default_value(0), "CPU threads (0: one per core)")
      ("seed", po::value<uint64_t>()->default_value(1), "seed of every random generator")
      ("device", po::value<std::string>()->default_value("auto"), "auto, cpu, cuda or cuda:N");
}

int Options::threads() const {
  int n = has("threads") ? get<int>("threads") : 0;
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return n;
}
uint64_t Options::seed() const { return has("seed") ? get<uint64_t>("seed") : 1; }
std::string Options::device() const { return has("device") ? get<std::string>("device") : "cpu"; }

namespace {

po::options_description all_options(const po::options_description& common,
                                    const std::vector<std::pair<std::string, po::options_description>>& groups) {
  po::options_description all;
  for (const auto& g : groups) all.add(g.second);
  all.add(common);
  return all;
}

bool is_meta(const std::string& key) {
  return key == "help" || key == "version" || key == "config" || key == "dump-config";
}

}  // namespace

bool Options::parse(int argc, char** argv) {
  po::options_description all = all_options(common_, groups_);
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional_).run(), vm_);
  } catch (const po::error& e) {
    XL_FAIL(kExitUsage, e.what() << " (see " << info_.name << " --help)");
  }
  // Help and version are answered before anything else is checked.
  if (vm_.count("help")) {
    std::cout << help_text();
    return false;
  }
  if (vm_.count("version")) {
    std::cout << version_text();
    return false;
  }
  if (vm_.count("config")) {
    auto files = vm_["config"].as<std::vector<std::string>>();
    // po::store keeps the first value it sees, so later files are stored first.
    for (auto it = files.rbegin(); it != files.rend(); ++it) {
      std::ifstream in(*it);
      XL_CHECK(in, kExitNoInput, *it << ": cannot open config file");
      try {
        po::store(po::parse_config_file(in, all, false), vm_);
      } catch (const po::error& e) {
        XL_FAIL(kExitConfig, *it << ": " << e.what());
      }
    }
  }
  try {
    po::notify(vm_);
  } catch (const po::error& e) {
    XL_FAIL(kExitUsage, e.what() << " (see " << info_.name << " --help)");
  }
  if (vm_["quiet"].as<bool>()) log::set_level(log::Level::kQuiet);
  if (vm_["verbose"].as<bool>()) log::set_level(log::Level::kDebug);
  if (vm_.count("dump-config")) {
    std::cout << config_text();
    return false;
  }
  return true;
}

std::string Options::help_text() const {
  std::ostringstream os;
  os << "Usage: " << info_.name << " " << info_.usage << "\n" << info_.summary << "\n";
  if (!info_.description.empty()) os << "\n" << info_.description << "\n";
  // One description column for all groups, at least two spaces after the longest option (Boost
  // leaves one, and help2man needs two to tell an option from its description).
  unsigned width = common_.get_option_column_width();
  for (const auto& g : groups_) width = std::max(width, g.second.get_option_column_width());
  ++width;
  for (const auto& g : groups_) {
    os << "\n";
    g.second.print(os, width);
  }
  os << "\n";
  common_.print(os, width);
  if (!info_.examples.empty()) os << "\nExamples:\n" << info_.examples << "\n";
  os << "\nExit status: 0 success, 64 usage error, 65 bad input data, 66 missing input,\n"
        "70 internal error, 73 cannot create output, 74 I/O error, 78 bad configuration,\n"
        "128+N after signal N.\n";
  return os.str();
}

std::string Options::version_text() const {
  std::ostringstream os;
  os << info_.name << " (xl-toolkit) " << XL_VERSION << "\n"
     << "Built with LibTorch " << TORCH_VERSION << " and HDF5 " << H5_VERS_MAJOR << "." << H5_VERS_MINOR
     << "." << H5_VERS_RELEASE << ".\n"
     << "This is free software: you are free to change and redistribute it.\n";
  return os.str();
}

namespace {
std::string value_text(const boost::any& v, bool* ok) {
  *ok = true;
  std::ostringstream os;
  if (auto p = boost::any_cast<std::string>(&v)) os << *p;
  else if (auto p = boost::any_cast<int>(&v)) os << *p;
  else if (auto p = boost::any_cast<int64_t>(&v)) os << *p;
  else if (auto p = boost::any_cast<uint64_t>(&v)) os << *p;
  else if (auto p = boost::any_cast<double>(&v)) os << *p;
  else if (auto p = boost::any_cast<float>(&v)) os << *p;
  else if (auto p = boost::any_cast<bool>(&v)) os << (*p ? "true" : "false");
  else *ok = false;
  return os.str();
}
}  // namespace

std::string Options::config_text() const {
  std::ostringstream os;
  os << "# " << info_.name << " effective settings (defaults, config files, command line)\n";
  std::set<std::string> positional_names;
  for (unsigned i = 0; i < positional_.max_total_count() && i < 16; ++i)
    positional_names.insert(positional_.name_for_position(i));
  for (const auto& g : groups_) {
    for (const auto& opt : g.second.options()) {
      const std::string& key = opt->long_name();
      if (is_meta(key) || positional_names.count(key) || !vm_.count(key)) continue;
      const auto& v = vm_[key].value();
      if (auto vec = boost::any_cast<std::vector<std::string>>(&v)) {
        for (const auto& s : *vec) os << key << " = " << s << "\n";
        continue;
      }
      bool ok;
      std::string text = value_text(v, &ok);
      if (ok) os << key << " = " << text << "\n";
    }
  }
  return os.str();
}

po::typed_value<double>* real_value(double default_value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", default_value);
  return po::value<double>()->default_value(default_value, text);
}

std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    std::string a = argv[i];
    bool plain = !a.empty() && a.find_first_of(" \t'\"$") == std::string::npos;
    s += plain ? a : "'" + a + "'";
  }
  return s;
}

uint64_t parse_count(const std::string& text, const std::string& what) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    XL_FAIL(kExitUsage, what << ": not a number: '" << text << "'");
  }
  std::string suffix = text.substr(pos);
  double mult = 1;
  if (suffix == "K" || suffix == "k") mult = 1e3;
  else if (suffix == "M") mult = 1e6;
  else if (suffix == "G") mult = 1e9;
  else XL_CHECK(suffix.empty(), kExitUsage, what << ": bad size suffix in '" << text << "' (use K, M or G)");
  XL_CHECK(value >= 0, kExitUsage, what << ": must not be negative: '" << text << "'");
  return static_cast<uint64_t>(value * mult + 0.5);
}

}  // namespace xl::cli

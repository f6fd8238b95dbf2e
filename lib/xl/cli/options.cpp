#include "xl/cli/options.h"

#include <H5public.h>
#include <torch/version.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <iostream>
#include <set>
#include <vector>

#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/parse.h"
#include "xl/util/spelling.h"

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

void Options::add_output(const std::string& what) {
  add("Output")
      ("output,o", po::value<std::string>()->default_value("-"), ("write " + what + " to FILE (- is stdout)").c_str())
      ("force,f", po::bool_switch(), "overwrite an existing output file");
}

void Options::files(std::vector<std::string> inputs, std::vector<std::string> outputs) {
  input_files_.insert(input_files_.end(), inputs.begin(), inputs.end());
  output_files_.insert(output_files_.end(), outputs.begin(), outputs.end());
}

void Options::input_list(const std::string& name, std::function<std::vector<std::string>(const std::string&)> split) {
  input_lists_[name] = std::move(split);
}

void Options::output_beside(std::string what, std::function<std::string(const std::string&)> name_for) {
  beside_what_ = std::move(what);
  beside_name_ = std::move(name_for);
}

std::string Options::shown(const std::string& name) const {
  // An unlimited positional argument (max_total_count ~0u) repeats its name: the first few tell.
  const unsigned positions = std::min(positional_.max_total_count(), 8u);
  for (unsigned i = 0; i < positions; ++i)
    if (positional_.name_for_position(i) == name) {
      std::string upper = name;
      for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      return upper;
    }
  return "--" + name;
}

std::vector<std::string> Options::paths(const std::string& name) const {
  if (!has(name)) return {};
  const auto& v = vm_[name].value();
  if (v.type() == typeid(std::vector<std::string>)) return boost::any_cast<std::vector<std::string>>(v);
  if (v.type() == typeid(std::string)) return {boost::any_cast<std::string>(v)};
  return {};
}

std::vector<std::string> Options::input_paths(const std::string& name) const {
  std::vector<std::string> all = paths(name);
  const auto list = input_lists_.find(name);
  if (list == input_lists_.end()) return all;
  for (const std::string& value : paths(name))
    for (const std::string& path : list->second(value)) all.push_back(path);
  return all;
}

void Options::check_files() const {
  struct Output {
    std::string option, path;
    std::string beside;  // what the file is when the tool names it after -o, else empty
    std::string shown(const Options& o) const { return o.shown(option) + (beside.empty() ? "" : " (" + beside + ")"); }
  };
  std::vector<Output> outputs;
  std::vector<std::string> names = output_files_;
  if (vm_.count("output")) names.insert(names.begin(), "output");
  for (const std::string& name : names)
    for (const std::string& path : paths(name)) {
      outputs.push_back({name, path, ""});
      if (name == "output" && beside_name_)
        if (std::string beside = beside_name_(path); !beside.empty()) outputs.push_back({name, beside, beside_what_});
    }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Output& out = outputs[i];
    for (const std::string& in_name : input_files_)
      for (const std::string& in : input_paths(in_name))
        if (io::same_file(out.path, in))
          fail(out.option, (out.beside.empty() ? "is " : "writes " + out.beside + " to ") + out.path + ", which is also " +
                               shown(in_name) + ": writing it would replace what is read (write to another file)");
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (io::same_file(out.path, outputs[j].path))
        fail(outputs[j].option, "is " + outputs[j].path + ", which " + out.shown(*this) + " writes too (give each its own file)");
  }
}

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

// Whether `all` has an option called exactly `name` (Boost's lookup throws when a name, the
// empty one say, matches several: a fuzzed settings file found that).
bool declares(const po::options_description& all, const std::string& name) {
  if (name.empty()) return false;
  try {
    return all.find_nothrow(name, false) != nullptr;
  } catch (const po::error&) {
    return false;
  }
}

// Boost's "unrecognised option 'X'", with what was probably meant: the option a typo away
// (n-layers for n-layer), or, in a settings file, a known key under an INI section
// (Boost reads "[model] d-model" as "model.d-model"; xl's files have no sections).
std::string unknown_option_message(const po::unknown_option& e, const po::options_description& all, bool in_file) {
  const std::string given = e.get_option_name();
  const std::string name = given.substr(std::min(given.find_first_not_of('-'), given.size()));
  const size_t dot = name.rfind('.');
  if (in_file && dot != std::string::npos && declares(all, name.substr(dot + 1)))
    return "'" + name.substr(dot + 1) + "' is under a section [" + name.substr(0, dot) +
           "]: settings files have no sections; put it above the first [section] line";
  std::vector<std::string> names;
  for (const auto& option : all.options()) names.push_back(option->long_name());
  const std::string best = spelling::nearest(name, names);
  std::string message = e.what();
  if (!best.empty()) message += "; did you mean " + std::string(in_file ? "'" : "'--") + best + "'?";
  return message;
}

constexpr int kStyle = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

}  // namespace

// Boost says only "too many positional options"; name the first argument too many and what the
// tool takes (a checkpoint given where --init belongs, say).
std::string Options::excess_argument_message(int argc, char** argv, const po::options_description& all) const {
  // Parsed again without names for the positions. (Boost names them after reading every token,
  // so a command line that got this far parses.)
  std::vector<std::string> arguments;
  for (const po::option& o : po::command_line_parser(argc, argv).options(all).style(kStyle).run().options)
    if (o.position_key >= 0 && !o.value.empty()) arguments.push_back(o.value.front());
  const unsigned takes = positional_.max_total_count();
  std::string names;
  for (unsigned i = 0; i < takes; ++i) {
    std::string n = positional_.name_for_position(i);
    for (char& c : n) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    names += (i == 0 ? "" : i + 1 == takes ? " and " : ", ") + n;
  }
  std::ostringstream m;
  m << "unexpected argument";
  if (takes < arguments.size()) m << " '" << arguments[takes] << "'";
  m << ": " << info_.name;
  if (takes == 0) m << " takes no arguments, only options";
  else m << " takes " << (takes == 1 ? "one argument, " : std::to_string(takes) + " arguments, ") << names
         << "; the rest are options";
  m << " (see " << info_.name << " --help)";
  return m.str();
}

bool Options::parse(int argc, char** argv) {
  po::options_description all = all_options(common_, groups_);
  try {
    // Flags are taken by their whole names only: Boost's default also takes any unambiguous prefix,
    // which would change a script's meaning the day a second flag shares that prefix.
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional_).style(kStyle).run(), vm_);
  } catch (const po::too_many_positional_options_error&) {
    XL_FAIL(kExitUsage, excess_argument_message(argc, argv, all));
  } catch (const po::unknown_option& e) {
    XL_FAIL(kExitUsage, unknown_option_message(e, all, false) << " (see " << info_.name << " --help)");
  } catch (const po::error& e) {
    XL_FAIL(kExitUsage, e.what() << " (see " << info_.name << " --help)");
  }
  for (const auto& [key, value] : vm_)
    if (!value.defaulted()) command_line_.insert(key);
  // Help and version are answered before anything else is checked.
  if (vm_.count("help")) {
    std::cout << help_text();
    return false;
  }
  if (vm_.count("version")) {
    std::cout << version_text();
    return false;
  }
  if (vm_.count("config")) read_config_files(vm_["config"].as<std::vector<std::string>>(), all);
  finish_parse();
  if (vm_["quiet"].as<bool>()) log::set_level(log::Level::kQuiet);
  if (vm_["verbose"].as<bool>()) log::set_level(log::Level::kDebug);
  if (vm_.count("dump-config")) {
    std::cout << config_text();
    return false;
  }
  check_files();
  return true;
}

void Options::parse_settings(const std::vector<std::string>& config_files,
                             const std::vector<std::pair<std::string, std::string>>& key_values,
                             const std::string& source) {
  po::options_description all = all_options(common_, groups_);
  po::parsed_options given(&all);
  for (const auto& [key, value] : key_values) {
    po::option o;
    o.string_key = key;
    o.value = {value};
    o.original_tokens = {"--" + key, value};
    given.options.push_back(o);
  }
  try {
    po::store(given, vm_);
  } catch (const po::error& e) {
    if (!source.empty()) XL_FAIL(kExitConfig, source << ": " << e.what());
    XL_FAIL(kExitUsage, e.what() << " (see " << info_.name << " --help)");
  }
  for (const auto& [key, value] : key_values) {
    if (source.empty()) command_line_.insert(key);
    else config_file_[key] = source;  // stored before the files, so it wins as the command line would
  }
  read_config_files(config_files, all);
  finish_parse();
}

void Options::read_config_files(const std::vector<std::string>& files, const po::options_description& all) {
  // po::store keeps the first value it sees, so later files are stored first.
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    std::ifstream file(*it);
    XL_CHECK(file, kExitNoInput, *it << ": cannot open config file");
    std::stringstream in;
    in << file.rdbuf();
    // Boost's error messages substitute placeholders such as %value% into themselves: a setting
    // that contains one never finishes its message (a hang found by fuzzing).
    {
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        line = line.substr(0, line.find('#'));  // comments may say anything
        const size_t open = line.find('%');
        const size_t close = open == std::string::npos ? open : line.find('%', open + 1);
        XL_CHECK(close == std::string::npos, kExitConfig,
                 *it << ":" << n << ": '" << line.substr(open, close - open + 1) << "': % pairs are not allowed in settings");
      }
      in.clear();
      in.seekg(0);
    }
    try {
      const po::parsed_options parsed = po::parse_config_file(in, all, false);
      for (const po::option& o : parsed.options)
        if (!command_line_.count(o.string_key)) config_file_.emplace(o.string_key, *it);  // the first file stored wins
      po::store(parsed, vm_);
    } catch (const po::unknown_option& e) {
      XL_FAIL(kExitConfig, *it << ": " << unknown_option_message(e, all, true));
    } catch (const po::error& e) {
      XL_FAIL(kExitConfig, *it << ": " << e.what());
    }
  }
}

void Options::finish_parse() {
  try {
    po::notify(vm_);
  } catch (const po::error& e) {
    XL_FAIL(kExitUsage, e.what() << " (see " << info_.name << " --help)");
  }
  // Boost reads "nan" and "inf" as numbers: no setting means either, and a NaN passes every range
  // check written as a comparison (a NaN --lr trained to a diverged loss, a NaN --temperature drew
  // noise).
  for (const auto& [key, value] : vm_) {
    if (value.empty() || value.value().type() != typeid(double) || std::isfinite(value.as<double>())) continue;
    std::ostringstream why;
    why << "must be a finite number, not " << value.as<double>();
    fail(key, why.str());
  }
}

SettingOrigins Options::origins() const {
  SettingOrigins out;
  for (const auto& [key, value] : vm_) {
    if (value.defaulted()) continue;
    const auto file = config_file_.find(key);
    out.given(key, command_line_.count(key) || file == config_file_.end() ? "" : file->second);
  }
  return out;
}

void Options::fail(const std::string& name, const std::string& why) const { origins().fail(name, why); }

uint64_t Options::count(const std::string& name) const {
  return parsed(name, [&](const std::string& what) { return parse::count(get<std::string>(name), what); });
}

double Options::duration(const std::string& name) const {
  return parsed(name, [&](const std::string& what) { return parse::duration(get<std::string>(name), what); });
}

std::vector<int64_t> Options::int_list(const std::string& name) const {
  return parsed(name, [&](const std::string& what) { return parse::int_list(get<std::string>(name), what); });
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
        "70 internal error or out of memory, 73 cannot create output, 74 I/O error,\n"
        "78 bad configuration, 128+N after signal N.\n";
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

std::vector<std::pair<std::string, std::string>> Options::settings() const {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> positional_names;
  for (unsigned i = 0; i < positional_.max_total_count() && i < 16; ++i)
    positional_names.insert(positional_.name_for_position(i));
  for (const auto& g : groups_) {
    for (const auto& opt : g.second.options()) {
      const std::string& key = opt->long_name();
      if (is_meta(key) || positional_names.count(key) || !vm_.count(key)) continue;
      const auto& v = vm_[key].value();
      if (auto vec = boost::any_cast<std::vector<std::string>>(&v)) {
        for (const auto& s : *vec) out.emplace_back(key, s);
        continue;
      }
      bool ok;
      std::string text = value_text(v, &ok);
      if (ok) out.emplace_back(key, text);
    }
  }
  return out;
}

std::string Options::config_text() const {
  std::ostringstream os;
  os << "# " << info_.name << " effective settings (defaults, config files, command line)\n";
  for (const auto& [key, value] : settings()) os << key << " = " << value << "\n";
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

}  // namespace xl::cli

// Where each setting's value came from, so that an error about a value names what the user wrote
// and exits with the matching sysexits code: "--lr must be positive" (64) for a flag,
// "tiny.ini: lr must be positive" (78) for a config file, "p1.h5: lr must be positive" (78) for a
// file's stored settings, "settings: ..." (78) for defaults.
#pragma once
#include <map>
#include <string>

namespace xl {

class SettingOrigins {
 public:
  // Settings not given below come from `rest`: a file's stored settings, or "settings" (defaults).
  explicit SettingOrigins(std::string rest = "settings") : rest_(std::move(rest)) {}
  // `key` (as flag or as field: "n-layer", "n_layer") was given in config file `file`, or on the
  // command line when `file` is empty.
  void given(const std::string& key, const std::string& file);
  // The same given settings, the rest from `rest`.
  SettingOrigins with_rest(std::string rest) const;

  // "--lr", "tiny.ini: lr", or for the rest "p1.h5: " and the key as the caller spells it.
  std::string name(const std::string& key) const;
  int exit_code(const std::string& key) const;
  bool on_command_line(const std::string& key) const;
  // Given on the command line or in a config file, where keys are spelt as flags (kebab-case).
  bool typed(const std::string& key) const;
  // Throws Error: "<name(key)> <why>" with exit_code(key).
  [[noreturn]] void fail(const std::string& key, const std::string& why) const;

 private:
  std::string rest_;
  std::map<std::string, std::string> given_;  // kebab-case key -> config file ("": command line)
};

}  // namespace xl

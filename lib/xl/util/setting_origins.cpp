#include "xl/util/setting_origins.h"

#include "xl/util/error.h"
#include "xl/util/parse.h"

namespace xl {

void SettingOrigins::given(const std::string& key, const std::string& file) { given_[parse::kebab_case(key)] = file; }

SettingOrigins SettingOrigins::with_rest(std::string rest) const {
  SettingOrigins out(*this);
  out.rest_ = std::move(rest);
  return out;
}

std::string SettingOrigins::name(const std::string& key) const {
  const std::string flag = parse::kebab_case(key);
  const auto it = given_.find(flag);
  if (it == given_.end()) return rest_ + ": " + key;
  return it->second.empty() ? "--" + flag : it->second + ": " + flag;
}

bool SettingOrigins::typed(const std::string& key) const { return given_.count(parse::kebab_case(key)) > 0; }

bool SettingOrigins::on_command_line(const std::string& key) const {
  const auto it = given_.find(parse::kebab_case(key));
  return it != given_.end() && it->second.empty();
}

int SettingOrigins::exit_code(const std::string& key) const { return on_command_line(key) ? kExitUsage : kExitConfig; }

void SettingOrigins::fail(const std::string& key, const std::string& why) const {
  throw Error(exit_code(key), name(key) + " " + why);
}

}  // namespace xl

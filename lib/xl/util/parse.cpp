#include "xl/util/parse.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "xl/util/error.h"

namespace xl::parse {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  if (trim(text).empty()) return out;
  for (size_t begin = 0;;) {
    const size_t end = text.find(',', begin);
    out.push_back(trim(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin)));
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

std::vector<std::string> list_items(const std::string& text, const std::string& what) {
  auto items = split_list(text);
  for (const auto& item : items) XL_CHECK(!item.empty(), kExitUsage, what << ": empty item in '" << text << "'");
  return items;
}

std::vector<int64_t> int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  for (const auto& item : list_items(text, what)) {
    size_t pos = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &pos);
    } catch (...) {
      pos = 0;
    }
    XL_CHECK(pos == item.size() && pos > 0, kExitUsage, what << ": not a list of integers: '" << text << "'");
    out.push_back(v);
  }
  return out;
}

bool boolean(const std::string& text, const std::string& what) {
  std::string t = trim(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* s : {"1", "true", "yes", "on"})
    if (t == s) return true;
  for (const char* s : {"0", "false", "no", "off"})
    if (t == s) return false;
  XL_FAIL(kExitUsage, what << ": not a boolean: '" << text << "' (use true/false, 1/0, yes/no or on/off)");
}

uint64_t count(const std::string& text, const std::string& what) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    XL_FAIL(kExitUsage, what << ": not a number: '" << text << "'");
  }
  const std::string suffix = text.substr(pos);
  double mult = 1;
  if (suffix == "K" || suffix == "k") mult = 1e3;
  else if (suffix == "M") mult = 1e6;
  else if (suffix == "G") mult = 1e9;
  else XL_CHECK(suffix.empty(), kExitUsage, what << ": bad size suffix in '" << text << "' (use K, M or G)");
  XL_CHECK(std::isfinite(value), kExitUsage, what << ": not a number: '" << text << "'");
  XL_CHECK(value >= 0, kExitUsage, what << ": must not be negative: '" << text << "'");
  XL_CHECK(value * mult < 9.2e18, kExitUsage, what << ": too large: '" << text << "'");
  return static_cast<uint64_t>(value * mult + 0.5);
}

double duration(const std::string& text, const std::string& what) {
  auto bad = [&]() { XL_FAIL(kExitUsage, what << ": not a duration: '" << text << "' (use e.g. 90s, 15m, 2h, 1h30m)"); };
  // Parts of a number and a unit, added up ("1h02m", as progress lines print durations); one
  // number alone is seconds.
  double total = 0;
  size_t at = 0;
  int parts = 0;
  while (at < text.size()) {
    // std::stod would skip blanks and take a sign or "inf": a part starts with a digit or a point.
    if (!std::isdigit(static_cast<unsigned char>(text[at])) && text[at] != '.') bad();
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(text.substr(at), &used);
    } catch (...) {
      bad();
    }
    at += used;
    const char unit = at < text.size() ? text[at++] : '\0';
    const double mult = unit == 'd' ? 86400 : unit == 'h' ? 3600 : unit == 'm' ? 60 : unit == 's' || unit == '\0' ? 1 : -1;
    if (mult < 0 || !std::isfinite(v) || (unit == '\0' && parts > 0)) bad();  // "1h30": 30 of what?
    total += v * mult;
    ++parts;
  }
  if (parts == 0) bad();
  return total;
}

std::string snake_case(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string kebab_case(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

std::string format_duration(double seconds) {
  const long t = static_cast<long>(std::max(0.0, seconds) + 0.5);
  char buf[48];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

std::string format_number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", value);
  return buf;
}

std::string format_hms(double seconds) {
  const long long s = std::llround(std::max(0.0, seconds));
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

}  // namespace xl::parse

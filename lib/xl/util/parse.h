// The small values users type and read: lists, counts with K/M/G suffixes, durations, booleans.
// Every parser fails with 64 (usage) and a message naming `what` (the flag or key).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace xl::parse {

std::string trim(const std::string& text);
// Whether `text` ends with `tail` (names: "x.h5", "mem_transformer.MemTransformerLM").
bool ends_with(const std::string& text, const std::string& tail);
// "a, b,,c," -> {"a", "b", "", "c", ""}: split at commas and trimmed, empty items kept; "" -> {}.
std::vector<std::string> split_list(const std::string& text);
// split_list for a flag's value, where an empty item is a typo ("--mem-len 64,,128"): refused.
std::vector<std::string> list_items(const std::string& text, const std::string& what);

// "20000,40000,200000" -> {20000, 40000, 200000}; "" -> {}.
std::vector<int64_t> int_list(const std::string& text, const std::string& what);
// "1", "true", "yes", "on" / "0", "false", "no", "off" (any case).
bool boolean(const std::string& text, const std::string& what);
// "90M" -> 90000000, "64K" -> 64000, "5" -> 5.
uint64_t count(const std::string& text, const std::string& what);
// "90", "90s", "15m", "2h", "1d", "1h30m" -> seconds.
double duration(const std::string& text, const std::string& what);

// Flag and INI names are kebab-case, config fields snake_case: "n-layer" <-> "n_layer".
std::string snake_case(std::string name);
std::string kebab_case(std::string name);

// 75 -> "1m15s", 3720 -> "1h02m", 42 -> "42s" (progress lines).
std::string format_duration(double seconds);
// 3723 -> "1:02:03" (tables).
std::string format_hms(double seconds);
// A setting's value for a message, in at most 4 significant digits: 0.5, 0.125, 1e-05.
std::string format_number(double value);

}  // namespace xl::parse

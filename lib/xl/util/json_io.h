// JSON files and lines as xl writes and reads them: one line of text (JSON Lines, run
// descriptions), where invalid UTF-8 in a string (a path, a label) is replaced rather than thrown on.
// Every JSON text xl writes, messages included, goes through json_line: a file name is bytes, and
// nlohmann's dump() throws on a Latin-1 one.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <type_traits>

namespace xl {

inline std::string json_line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// An ordered_json keeps its keys in the order they were put (a template, so that a braced list
// still means a json).
template <class Json, std::enable_if_t<std::is_same_v<Json, nlohmann::ordered_json>, int> = 0>
std::string json_line(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// How much of a JSON Lines `text` its whole lines take: through its last newline (0 without one).
// A kill while a line was written leaves the rest, which a writer that appends on cuts off.
inline size_t whole_lines_size(const std::string& text) {
  const size_t last = text.rfind('\n');
  return last == std::string::npos ? 0 : last + 1;
}

// Whether `text` holds only NUL bytes from `from` on: what a machine that stopped while a file grew
// can leave at its end (the new size kept, the data not), cut off as an unfinished line is.
inline bool zero_filled(const std::string& text, size_t from) {
  return text.find_first_not_of('\0', from) == std::string::npos;
}

// The JSON document in PATH; 65 naming PATH and `what` it should be when it is not JSON, 66 when
// it cannot be read.
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace xl

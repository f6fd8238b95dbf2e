// Escaping of vocab pieces for the TSV format: \\ \t \n \r and \xNN for other control bytes,
// spaces, and bytes that are not part of valid UTF-8, so every line is printable UTF-8.
#pragma once
#include <string>
#include <string_view>

namespace xl::text {

std::string escape_piece(std::string_view raw);
// Returns false on a malformed escape.
bool unescape_piece(std::string_view escaped, std::string* raw);

}  // namespace xl::text

#include "xl/util/error.h"

namespace xl {

std::string printable_line(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char c) {
    static const char* hex = "0123456789abcdef";
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A lead byte and its continuation bytes are kept together (names and quotes in any script).
    const size_t len = (c & 0xE0) == 0xC0 && c >= 0xC2 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 && c <= 0xF4 ? 4 : 0;
    bool whole = len > 0 && i + len <= text.size();
    for (size_t k = 1; whole && k < len; ++k) whole = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (whole && len > 2) {  // no overlong forms, surrogates or values past U+10FFFF
      const auto d = static_cast<unsigned char>(text[i + 1]);
      whole = !((c == 0xE0 && d < 0xA0) || (c == 0xED && d >= 0xA0) || (c == 0xF0 && d < 0x90) || (c == 0xF4 && d >= 0x90));
    }
    if (whole) {
      out.append(text, i, len);
      i += len;
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

}  // namespace xl

#include "xl/util/error.h"

#include "xl/util/utf8.h"

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
    uint32_t cp = 0;
    const int len = utf8_decode(text, i, &cp);  // names and quotes in any script stay as they are
    if (len > 0) {
      out.append(text, i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

}  // namespace xl

#include "xl/text/escape.h"

#include "xl/util/utf8.h"

namespace xl::text {

std::string escape_piece(std::string_view raw) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  while (i < raw.size()) {
    unsigned char c = static_cast<unsigned char>(raw[i]);
    uint32_t cp;
    int len = c >= 0x80 ? utf8_decode(raw, i, &cp) : 1;
    if (c >= 0x80 && len > 0) {  // valid multi-byte UTF-8 stays as it is
      out.append(raw.substr(i, static_cast<size_t>(len)));
      i += static_cast<size_t>(len);
      continue;
    }
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x21 || c == 0x7f || c >= 0x80) {
          out += "\\x";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  return out;
}

bool unescape_piece(std::string_view s, std::string* raw) {
  raw->clear();
  auto hexval = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      raw->push_back(s[i]);
      continue;
    }
    if (++i >= s.size()) return false;
    switch (s[i]) {
      case '\\': raw->push_back('\\'); break;
      case 't': raw->push_back('\t'); break;
      case 'n': raw->push_back('\n'); break;
      case 'r': raw->push_back('\r'); break;
      case 'x': {
        if (i + 2 >= s.size()) return false;
        int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
        if (hi < 0 || lo < 0) return false;
        raw->push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        break;
      }
      default: return false;
    }
  }
  return true;
}

}  // namespace xl::text

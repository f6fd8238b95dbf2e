// What the Moses tokenizer (moses.cpp) and detokenizer (moses_detokenize.cpp) share: text as code
// points, Unicode's character classes as sacremoses reads them, and the string helpers both use.
// Internal to text/.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xl::text::moses_detail {

using U32 = std::u32string;
using U32View = std::u32string_view;

enum Class : uint8_t {
  kIsAlnum = 1, kIsAlpha = 2, kIsIndicMark = 4, kIsLower = 8, kIsN = 16, kIsCurrency = 32, kIsDigit = 64, kIsSpace = 128
};
// Whether c is in any of the classes `cls`.
bool is(char32_t c, uint8_t cls);
// CJK characters, which join their neighbours without a space.
bool cjk(char32_t c);
// ( [ { ¿ ¡
bool opening(char32_t c);
bool all_in(const U32& word, U32View set);

// In place: every `from` replaced by `to`.
void replace_all(U32& s, U32View from, U32View to);
// Without leading and trailing white space.
U32 strip(const U32& s);
// The words between white space.
std::vector<U32> split(const U32& s);
// UTF-8 as code points; a byte that is not UTF-8 stands for itself.
U32 code_points(const std::string& utf8);

}  // namespace xl::text::moses_detail

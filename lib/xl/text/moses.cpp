#include "xl/text/moses.h"
#include "xl/text/moses_detail.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <thread>

#include "xl/text/segmenter.h"
#include "xl/util/error.h"
#include "xl/util/resources.h"
#include "xl/util/utf8.h"

namespace xl::text {
namespace moses_detail {

struct CodeRange {
  char32_t first, last;
};
#include "xl/text/moses_tables.inc"

template <size_t N>
bool in_table(const CodeRange (&table)[N], char32_t c) {
  auto it = std::lower_bound(std::begin(table), std::end(table), c,
                             [](const CodeRange& r, char32_t v) { return r.last < v; });
  return it != std::end(table) && it->first <= c;
}

uint8_t classify(char32_t c) {
  return static_cast<uint8_t>((in_table(kAlnum, c) ? kIsAlnum : 0) | (in_table(kAlpha, c) ? kIsAlpha : 0) |
                              (in_table(kIndicMarks, c) ? kIsIndicMark : 0) |
                              (in_table(kLower, c) ? kIsLower : 0) | (in_table(kNumber, c) ? kIsN : 0) |
                              (in_table(kCurrency, c) ? kIsCurrency : 0) | (in_table(kDecimal, c) ? kIsDigit : 0) |
                              (python_space(c) ? kIsSpace : 0));
}

// Every class is tested several times per character: look the common scripts up in one table.
constexpr char32_t kCached = 0x3000;
uint8_t classes(char32_t c) {
  static const std::array<uint8_t, kCached> cache = [] {
    std::array<uint8_t, kCached> t{};
    for (char32_t i = 0; i < kCached; ++i) t[i] = classify(i);
    return t;
  }();
  return c < kCached ? cache[c] : classify(c);
}
bool is(char32_t c, uint8_t cls) { return (classes(c) & cls) != 0; }
// The tokenizer's letters and digits take the Indic marks too; the detokenizer's letters do not.
bool alnum(char32_t c) { return is(c, kIsAlnum | kIsIndicMark); }
bool alpha(char32_t c) { return is(c, kIsAlpha | kIsIndicMark); }
bool number(char32_t c) { return is(c, kIsN); }
bool digit(char32_t c) { return is(c, kIsDigit); }
bool space(char32_t c) { return is(c, kIsSpace); }

// One pass of a regular expression's substitution: `match(s, i, out)` returns how many characters
// a match at i consumes, having written its replacement (0: no match at i, nothing written). As
// re.sub scans, the next match starts after the last one.
template <class Match>
U32 rewrite(const U32& s, Match match) {
  U32 out;
  out.reserve(s.size() + s.size() / 4 + 8);
  for (size_t i = 0; i < s.size();) {
    size_t used = match(s, i, out);
    if (used == 0) out.push_back(s[i++]);
    else i += used;
  }
  return out;
}

// In place: most rules find nothing to replace on most lines.
void replace_all(U32& s, U32View from, U32View to) {
  size_t at = s.find(from.data(), 0, from.size());
  if (at == U32::npos) return;
  U32 out;
  out.reserve(s.size() + 16);
  size_t done = 0;
  for (; at != U32::npos; at = s.find(from.data(), done, from.size())) {
    out.append(s, done, at - done);
    out += to;
    done = at + from.size();
  }
  out.append(s, done, U32::npos);
  s.swap(out);
}

bool contains(const U32& s, U32View what) { return s.find(what) != U32::npos; }

// The character at i, or 0 past the end (no rule looks for a 0 where it looks past the end).
char32_t at(const U32& s, size_t i) { return i < s.size() ? s[i] : 0; }

// `a X b` -> `a` `replacement` `b` wherever the middle character is X and a, b pass their tests.
template <class Left, class Right>
U32 around(const U32& s, char32_t middle, Left left, Right right, U32View replacement) {
  return rewrite(s, [&](const U32& t, size_t i, U32& out) -> size_t {
    if (i + 2 >= t.size() || t[i + 1] != middle || !left(t[i]) || !right(t[i + 2])) return 0;
    out += t[i];
    out += replacement;
    out += t[i + 2];
    return 3;
  });
}

U32 collapse(const U32& s, bool (*is_space)(char32_t)) {
  U32 out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (!is_space(s[i])) {
      out.push_back(s[i++]);
      continue;
    }
    out.push_back(U' ');
    while (i < s.size() && is_space(s[i])) ++i;
  }
  return out;
}
bool ascii_space(char32_t c) { return c == U' '; }

U32 strip(const U32& s) {
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::vector<U32> split(const U32& s) {
  std::vector<U32> words;
  for (size_t i = 0; i < s.size();) {
    while (i < s.size() && space(s[i])) ++i;
    size_t b = i;
    while (i < s.size() && !space(s[i])) ++i;
    if (i > b) words.push_back(s.substr(b, i - b));
  }
  return words;
}

constexpr char32_t kNbsp = 0xA0;

// sacremoses' MosesPunctNormalizer("en").normalize with its defaults (penn, quotes before
// commas, numbers), in its order.
U32 normalize_punctuation(U32 s) {
  s.erase(std::remove(s.begin(), s.end(), U'\r'), s.end());
  replace_all(s, U"(", U" (");
  replace_all(s, U")", U") ");
  s = collapse(s, ascii_space);
  s = rewrite(s, [](const U32& t, size_t i, U32& out) -> size_t {  // ") ." -> ")."
    if (t[i] != U')' || at(t, i + 1) != U' ' || i + 2 >= t.size() || U32View(U".!:?;,").find(t[i + 2]) == U32View::npos)
      return 0;
    out += U')';
    out += t[i + 2];
    return 3;
  });
  replace_all(s, U"( ", U"(");
  replace_all(s, U" )", U")");
  s = around(s, U' ', digit, [](char32_t c) { return c == U'%'; }, U"");
  replace_all(s, U" :", U":");
  replace_all(s, U" ;", U";");
  replace_all(s, U"`", U"'");
  replace_all(s, U"''", U" \" ");
  replace_all(s, U"\u201E", U"\"");  // „
  replace_all(s, U"\u201C", U"\"");  // “
  replace_all(s, U"\u201D", U"\"");  // ”
  replace_all(s, U"\u2013", U"-");   // –
  replace_all(s, U"\u2014", U" - "); // —
  s = collapse(s, ascii_space);
  replace_all(s, U"\u00B4", U"'");  // ´
  // Its rules for ‘ and ’ between two ASCII letters write the ' that the next ones write anyway.
  replace_all(s, U"\u2018", U"'");  // ‘
  replace_all(s, U"\u201A", U"'");  // ‚
  replace_all(s, U"\u2019", U"'");  // ’
  replace_all(s, U"''", U"\"");
  replace_all(s, U"\u2026", U"...");  // … (its ´´ rule never matches: ´ is gone)
  replace_all(s, U"\u00A0\u00AB\u00A0", U"\"");  // « with its spaces
  replace_all(s, U"\u00AB\u00A0", U"\"");
  replace_all(s, U"\u00AB", U"\"");
  replace_all(s, U"\u00A0\u00BB\u00A0", U"\"");  // »
  replace_all(s, U"\u00A0\u00BB", U"\"");
  replace_all(s, U"\u00BB", U"\"");
  replace_all(s, U"\u00A0%", U"%");
  replace_all(s, U"n\u00BA\u00A0", U"n\u00BA ");  // nº
  replace_all(s, U"\u00A0:", U":");
  replace_all(s, U"\u00A0\u00BAC", U" \u00BAC");  // ºC
  replace_all(s, U"\u00A0cm", U" cm");
  replace_all(s, U"\u00A0?", U"?");
  replace_all(s, U"\u00A0!", U"!");
  replace_all(s, U"\u00A0;", U";");
  replace_all(s, U",\u00A0", U", ");
  s = collapse(s, ascii_space);
  s = rewrite(s, [](const U32& t, size_t i, U32& out) -> size_t {  // a quote before , or . goes after them
    size_t j = i + 1;
    if (t[i] != U'"') return 0;
    while (j < t.size() && (t[j] == U',' || t[j] == U'.')) ++j;
    if (j == i + 1) return 0;
    out.append(t, i + 1, j - i - 1);
    out += U'"';
    return j - i;
  });
  s = around(s, kNbsp, digit, digit, U".");
  return strip(s);
}

// <unk>, <eos> and <formula>, in any case, are held out of the rules as sacremoses holds its
// protected patterns: each found spelling is replaced by an alphanumeric stand-in numbered in the
// order found (pattern by pattern), longest first, and the stand-ins are put back at the end. Text
// that spells a stand-in itself comes back as that token, as it does there.
U32 stand_in(size_t k) {
  std::string number = std::to_string(k);
  if (number.size() < 3) number.insert(0, 3 - number.size(), '0');
  U32 s = U"THISISPROTECTED";
  return s.append(number.begin(), number.end());
}

bool same_letter(char32_t text, char32_t pattern) {
  if (text == pattern) return true;
  if (pattern >= U'a' && pattern <= U'z' && text == pattern - 32) return true;
  // Python's IGNORECASE also folds the Kelvin sign into k and the long s into s.
  return (pattern == U'k' && text == 0x212A) || (pattern == U's' && text == 0x17F);
}

U32 protect(U32 s, std::vector<U32>* held) {
  for (U32View p : {U32View(U"<eos>"), U32View(U"<unk>"), U32View(U"<formula>")}) {
    for (size_t i = 0; i + p.size() <= s.size();) {
      bool hit = true;
      for (size_t k = 0; k < p.size() && hit; ++k) hit = same_letter(s[i + k], p[k]);
      if (!hit) {
        ++i;
        continue;
      }
      held->push_back(s.substr(i, p.size()));
      i += p.size();
    }
  }
  std::vector<size_t> order(held->size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return (*held)[a].size() > (*held)[b].size(); });
  // A spelling replaced once is gone: its later copies would find nothing.
  std::vector<U32View> done;
  for (size_t k : order) {
    if (std::find(done.begin(), done.end(), U32View((*held)[k])) != done.end()) continue;
    done.push_back((*held)[k]);
    replace_all(s, (*held)[k], stand_in(k));
  }
  return s;
}

// sacremoses puts each stand-in back in turn; in one pass here, the same where it is defined: the
// stand-ins (of three digits up to 1,000 tokens, where sacremoses stops) cannot overlap.
U32 unprotect(const U32& s, const std::vector<U32>& held) {
  if (held.empty()) return s;
  constexpr U32View kStem = U"THISISPROTECTED";
  const size_t max_digits = held.size() <= 1000 ? 3 : 20;
  return rewrite(s, [&](const U32& t, size_t i, U32& out) -> size_t {
    if (U32View(t).substr(i, kStem.size()) != kStem) return 0;
    size_t end = i + kStem.size(), k = 0;
    while (end < t.size() && end - i - kStem.size() < max_digits && t[end] >= U'0' && t[end] <= U'9')
      k = k * 10 + static_cast<size_t>(t[end++] - U'0');
    if (end - i - kStem.size() < 3 || k >= held.size()) return 0;
    out += held[k];
    return end - i;
  });
}

// Runs of dots stay one word: "...x" is held as " DOTDOTDOTMULTI x" (sacremoses' replace_multidots,
// which adds one DOT per pass: one pass here unless the text spells DOTMULTI itself, where those
// passes are followed as they go).
U32 hold_multidots(U32 s, bool literal) {
  if (!literal) {
    return rewrite(s, [](const U32& t, size_t i, U32& out) -> size_t {
      if (t[i] != U'.' || at(t, i + 1) != U'.') return 0;
      size_t j = i;
      while (j < t.size() && t[j] == U'.') ++j;
      out += U' ';
      for (size_t k = i; k < j; ++k) out += U"DOT";
      out += j < t.size() ? U"MULTI " : U"MULTI";
      return j - i;
    });
  }
  s = rewrite(s, [](const U32& t, size_t i, U32& out) -> size_t {
    if (t[i] != U'.' || at(t, i + 1) != U'.') return 0;
    size_t j = i + 1;
    while (j < t.size() && t[j] == U'.') ++j;
    out += U" DOTMULTI";
    out.append(j - i - 1, U'.');
    return j - i;
  });
  while (contains(s, U"DOTMULTI.")) {
    s = rewrite(s, [](const U32& t, size_t i, U32& out) -> size_t {
      if (U32View(t).substr(i, 9) != U"DOTMULTI." || i + 9 >= t.size() || t[i + 9] == U'.') return 0;
      out += U"DOTDOTMULTI ";
      out += t[i + 9];
      return 10;
    });
    replace_all(s, U"DOTMULTI.", U"DOTDOTMULTI");
  }
  return s;
}

U32 restore_multidots(U32 s, bool literal) {
  if (!literal) {  // every DOT...MULTI is one held run
    return rewrite(s, [](const U32& t, size_t i, U32& out) -> size_t {
      size_t j = i;
      while (U32View(t).substr(j, 3) == U"DOT") j += 3;
      if (j == i || U32View(t).substr(j, 5) != U"MULTI") return 0;
      out.append((j - i) / 3, U'.');
      return j + 5 - i;
    });
  }
  while (contains(s, U"DOTDOTMULTI")) replace_all(s, U"DOTDOTMULTI", U"DOTMULTI.");
  replace_all(s, U"DOTMULTI", U".");
  return s;
}

bool listed(const U32& word, const char* const* begin, const char* const* end) {
  return std::any_of(begin, end, [&](const char* w) {
    return std::equal(word.begin(), word.end(), w, w + std::char_traits<char>::length(w));
  });
}

// A final period becomes its own word unless the word is an abbreviation: one with an inner
// period and a letter (e.g), a listed one (Mr), one before a lowercase word, or a numeric-only one
// before a number (No. 5).
U32 split_final_periods(const U32& s) {
  std::vector<U32> words = split(s);
  U32 out;
  for (size_t i = 0; i < words.size(); ++i) {
    U32& w = words[i];
    if (w.size() >= 2 && w.back() == U'.') {
      U32 prefix = w.substr(0, w.size() - 1);
      bool next = i + 1 < words.size();
      bool dotted = contains(prefix, U".") && std::any_of(prefix.begin(), prefix.end(), alpha);
      bool keep = dotted || listed(prefix, std::begin(kNonbreakingPrefixes), std::end(kNonbreakingPrefixes)) ||
                  (next && is(words[i + 1][0], kIsLower)) ||
                  (listed(prefix, std::begin(kNumericOnlyPrefixes), std::end(kNumericOnlyPrefixes)) && next &&
                   words[i + 1][0] >= U'0' && words[i + 1][0] <= U'9');
      if (!keep) w = prefix + U" .";
    }
    if (i > 0) out += U' ';
    out += w;
  }
  return out;
}

// sacremoses' MosesTokenizer("en").tokenize(aggressive_dash_splits=True, escape=False,
// protected_patterns=[<eos>, <unk>, <formula>]), in its order.
U32 moses_words(U32 s) {
  s = collapse(s, space);
  s.erase(std::remove_if(s.begin(), s.end(), [](char32_t c) { return c < 0x20; }), s.end());
  std::vector<U32> held;
  s = strip(protect(s, &held));
  s = rewrite(s, [](const U32& t, size_t i, U32& out) -> size_t {  // pad what is not a letter or digit
    char32_t c = t[i];
    if (alnum(c) || space(c) || U32View(U".'`,-").find(c) != U32View::npos) return 0;
    out += U' ';
    out += c;
    out += U' ';
    return 1;
  });
  s = rewrite(s, [](const U32& t, size_t i, U32& out) -> size_t {  // side-scrolled -> side @-@ scrolled
    if (!alnum(t[i]) || at(t, i + 1) != U'-' || i + 2 >= t.size() || !alnum(t[i + 2])) return 0;
    out += t[i];
    out += U" @-@ ";
    return 2;
  });
  const bool spelt = contains(s, U"DOTMULTI");
  s = hold_multidots(std::move(s), spelt);
  auto comma = [](char32_t c) { return c == U','; };
  auto not_number = [](char32_t c) { return !number(c); };
  s = rewrite(s, [&](const U32& t, size_t i, U32& out) -> size_t {  // a comma after a non-number
    if (!not_number(t[i]) || !comma(at(t, i + 1)) || i + 1 >= t.size()) return 0;
    out += t[i];
    out += U" , ";
    return 2;
  });
  s = rewrite(s, [&](const U32& t, size_t i, U32& out) -> size_t {  // a comma before a non-number
    if (!comma(t[i]) || i + 1 >= t.size() || !not_number(t[i + 1])) return 0;
    out += U" , ";
    out += t[i + 1];
    return 2;
  });
  if (s.size() >= 2 && s.back() == U',' && number(s[s.size() - 2])) s.insert(s.size() - 1, U" ") += U' ';
  auto not_alpha = [](char32_t c) { return !alpha(c); };
  auto any_s = [](char32_t c) { return c == U's'; };
  s = around(s, U'\'', not_alpha, not_alpha, U" ' ");
  s = around(s, U'\'', [](char32_t c) { return !alpha(c) && !number(c); }, alpha, U" ' ");
  s = around(s, U'\'', alpha, not_alpha, U" ' ");
  s = around(s, U'\'', alpha, alpha, U" '");
  s = around(s, U'\'', number, any_s, U" '");
  s = strip(collapse(split_final_periods(s), space));
  if (s.size() >= 2 && s.compare(s.size() - 2, 2, U".'") == 0) s.replace(s.size() - 2, 2, U" . ' ");
  s = unprotect(s, held);
  return restore_multidots(std::move(s), spelt);
}

// Hugging Face's tokenize_numbers: a , or . between two digits becomes its own word, @,@ or @.@.
void split_numbers(const U32& word, std::vector<std::string>* out) {
  U32 split_word = rewrite(word, [](const U32& t, size_t i, U32& o) -> size_t {
    if ((t[i] != U',' && t[i] != U'.') || i == 0 || !digit(t[i - 1]) || i + 1 >= t.size() || !digit(t[i + 1]))
      return 0;
    o += U" @";
    o += t[i];
    o += U"@ ";
    return 1;
  });
  for (const U32& w : split(split_word)) {
    std::string utf8;
    for (char32_t c : w) utf8_append(c, &utf8);
    out->push_back(std::move(utf8));
  }
}

bool cjk(char32_t c) {
  for (const CodeRange& r : kCjkOpen)
    if (c < r.last) return c > r.first;
  return false;
}

bool opening(char32_t c) { return U32View(U"([{\u00BF\u00A1").find(c) != U32View::npos; }  // ( [ { ¿ ¡

bool all_in(const U32& word, U32View set) {
  return std::all_of(word.begin(), word.end(), [&](char32_t c) { return set.find(c) != U32View::npos; });
}

U32 code_points(const std::string& utf8) {
  U32 out;
  for (size_t at = 0; at < utf8.size();) {
    uint32_t cp;
    int len = utf8_decode(utf8, at, &cp);
    if (len == 0) {  // a vocab's word is UTF-8; a byte that is not stands for itself
      cp = static_cast<unsigned char>(utf8[at]);
      len = 1;
    }
    out.push_back(static_cast<char32_t>(cp));
    at += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace moses_detail

using namespace moses_detail;

std::vector<std::string> moses_tokenize(std::u32string line) {
  std::vector<std::string> words;
  for (const U32& w : split(moses_words(normalize_punctuation(strip(line))))) split_numbers(w, &words);
  return words;
}

namespace {

// Pretokenizes text[begin, end), whole lines; returns the offset of its first invalid UTF-8 byte,
// or npos.
size_t pretokenize_lines(std::string_view text, size_t begin, size_t end, std::string* out) {
  out->reserve((end - begin) * 11 / 10);
  U32 line;
  for (size_t at = begin; at < end;) {
    line.clear();
    size_t line_end = 0;  // Python's: \n, \r\n or a lone \r
    while (at < end && (line_end = line_end_length(text, at)) == 0) {
      uint32_t cp;
      int len = utf8_decode(text, at, &cp);
      if (len == 0) return at;
      line.push_back(static_cast<char32_t>(cp));
      at += static_cast<size_t>(len);
    }
    const std::vector<std::string> words = moses_tokenize(line);
    for (size_t i = 0; i < words.size(); ++i) {
      if (i > 0) out->push_back(' ');
      *out += words[i];
    }
    if (at < end) out->push_back('\n');
    at += line_end;
  }
  return std::string_view::npos;
}

}  // namespace

std::string moses_pretokenize(std::string_view text, const std::string& source, size_t chunks) {
  if (chunks == 0) {
    constexpr size_t kMinChunk = size_t{1} << 20;
    const size_t cores = static_cast<size_t>(usable_cores());
    chunks = std::max<size_t>(1, std::min(cores, text.size() / kMinChunk));
  }
  std::vector<size_t> bounds{0};  // chunks end at line ends
  for (size_t c = 1; c < chunks; ++c) {
    size_t nl = text.find('\n', std::max(bounds.back(), text.size() / chunks * c));
    if (nl == std::string_view::npos) break;
    bounds.push_back(nl + 1);
  }
  bounds.push_back(text.size());
  const size_t n = bounds.size() - 1;
  std::vector<std::string> parts(n);
  std::vector<size_t> invalid(n, std::string_view::npos);
  std::vector<std::thread> workers;
  for (size_t c = 1; c < n; ++c)
    workers.emplace_back([&, c] { invalid[c] = pretokenize_lines(text, bounds[c], bounds[c + 1], &parts[c]); });
  invalid[0] = pretokenize_lines(text, bounds[0], bounds[1], &parts[0]);
  for (auto& w : workers) w.join();
  for (size_t c = 0; c < n; ++c)
    XL_CHECK(invalid[c] == std::string_view::npos, kExitDataErr,
             source << ": invalid UTF-8 at byte " << invalid[c] << " (--pretokenize moses reads UTF-8 text)");
  std::string out;
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  out.reserve(total);
  for (const auto& p : parts) out += p;
  return out;
}

}  // namespace xl::text

// The Moses detokenizer (moses.h): sacremoses' MosesDetokenizer("en") with Hugging Face's number
// joins, a line at a time or word by word as generation writes it.
#include <algorithm>
#include <iterator>

#include "xl/text/moses.h"
#include "xl/text/moses_detail.h"
#include "xl/util/utf8.h"

namespace xl::text {

using namespace moses_detail;

// sacremoses' MosesDetokenizer("en").detokenize, then Hugging Face's detokenize_numbers (its
// convert_tokens_to_string). A part of a line ends between two words that no joiner touches, so
// no merge, entity or number join spans two parts, and no part but the first starts the line.
std::string MosesLineDetokenizer::add(const std::vector<std::string>& words) {
  U32 s = U" ";
  for (const std::string& w : words) s += code_points(w) + U' ';
  replace_all(s, U" @-@ ", U"-");
  static const U32View kEntities[][2] = {{U"&bar;", U"|"}, {U"&#124;", U"|"}, {U"&lt;", U"<"}, {U"&gt;", U">"},
                                         {U"&bra;", U"["}, {U"&ket;", U"]"}, {U"&quot;", U"\""}, {U"&apos;", U"'"},
                                         {U"&#91;", U"["}, {U"&#93;", U"]"}, {U"&amp;", U"&"}};
  for (const auto& e : kEntities) replace_all(s, e[0], e[1]);
  U32 out;
  const bool line_start = !started_;
  for (const U32& t : split(s)) {
    auto shift_right = [&] { out += space_before_; out += t; space_before_ = U""; };
    auto shift_left = [&] { out += t; space_before_ = U" "; };
    if (cjk(t[0])) {
      if (!(started_ && cjk(last_.back()))) out += space_before_;
      out += t;
      space_before_ = U" ";
    } else if (std::all_of(t.begin(), t.end(), [](char32_t c) { return is(c, kIsCurrency) || opening(c); })) {
      shift_right();
    } else if (all_in(t, U",.?!:;\\%}])")) {
      shift_left();
    } else if (started_ && t.size() >= 2 && t[0] == U'\'' && is(t[1], kIsAlpha)) {  // English contractions: 's, 'll
      shift_left();
    } else if (all_in(t, U"'\"\u201E\u201C`")) {  // quotes open and close in turn
      U32 key = all_in(t, U"\u201E\u201C\u201D") ? U32(U"\"") : t;
      auto it = std::find_if(quotes_.begin(), quotes_.end(), [&](const auto& q) { return q.first == key; });
      if (it == quotes_.end()) it = quotes_.insert(quotes_.end(), {key, 0});
      if (it->second % 2 == 1) {
        shift_left();
        ++it->second;
      } else if (t == U"'" && started_ && last_.back() == U's') {  // the Jones' house
        shift_left();
      } else {
        shift_right();
        ++it->second;
      }
    } else {
      out += space_before_;
      out += t;
      space_before_ = U" ";
    }
    last_ = t;
    started_ = true;
  }
  // sacremoses then merges runs of spaces: there are none, as words hold no space and get one at most.
  if (line_start) out = strip(out);  // a part ends with a word: only the line's start has a space to strip
  replace_all(out, U" @,@ ", U",");
  replace_all(out, U" @.@ ", U".");
  std::string utf8;
  for (char32_t c : out) utf8_append(c, &utf8);
  return utf8;
}

std::string moses_detokenize(const std::vector<std::string>& words) { return MosesLineDetokenizer().add(words); }

size_t moses_settled(const std::vector<std::string>& words) {
  auto glue = [](const std::string& w) { return w == "@-@" || w == "@,@" || w == "@.@"; };
  for (size_t m = words.size(); m-- > 1;)
    if (!glue(words[m]) && !glue(words[m - 1])) return m;
  return 0;
}

std::string MosesLineWriter::settle() {
  const size_t m = moses_settled(pending_);
  if (m == 0) return {};
  const auto end = pending_.begin() + static_cast<std::ptrdiff_t>(m);
  std::vector<std::string> part(std::make_move_iterator(pending_.begin()), std::make_move_iterator(end));
  pending_.erase(pending_.begin(), end);
  return write(part);
}

std::string MosesLineWriter::write(const std::vector<std::string>& part) {
  if (hidden_ == 0) return line_.add(part);
  if (part.size() <= hidden_) {
    hidden_ -= part.size();
    line_.add(part);
    return {};
  }
  // The part joins hidden words to new ones ("state @-@ of"): its text less what the hidden words
  // give alone, which is where a reader of the prompt's own text left off.
  MosesLineDetokenizer alone = line_;
  const std::string hidden = alone.add({part.begin(), part.begin() + static_cast<std::ptrdiff_t>(hidden_)});
  hidden_ = 0;
  const std::string text = line_.add(part);
  size_t common = 0;
  while (common < hidden.size() && common < text.size() && hidden[common] == text[common]) ++common;
  return text.substr(common);
}

std::string MosesLineWriter::begin_line(std::vector<std::string> words, bool write_them) {
  line_ = MosesLineDetokenizer();
  pending_ = std::move(words);
  hidden_ = write_them ? 0 : pending_.size();
  return settle();
}

std::string MosesLineWriter::add(std::string word) {
  pending_.push_back(std::move(word));
  return settle();
}

std::string MosesLineWriter::rest() {
  std::string out = write(pending_);
  hidden_ = 0;
  pending_.clear();
  line_ = MosesLineDetokenizer();
  return out;
}

std::string MosesLineWriter::end_line() { return rest() + "\n"; }

}  // namespace xl::text

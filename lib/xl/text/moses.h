// Moses tokenization of raw text, as Hugging Face's TransfoXL tokenizer does it before looking
// words up (its moses_pipeline): sacremoses' English punctuation normaliser, its tokenizer with
// dashes split ("side @-@ scrolled") and no XML escapes, then numbers' separators split
// ("23 @,@ 000", "1 @.@ 80"); <unk>, <eos> and <formula> stay whole. And back: its detokenizer.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xl::text {

// The words of one line (code points, no line end), in UTF-8.
std::vector<std::string> moses_tokenize(std::u32string line);

// The words of every line of UTF-8 `text`, joined by spaces, each line ended as it was (a last
// line without its newline stays so): text that splits at whitespace into the words, which a word
// vocab then reads as it reads pre-tokenized text. Lines are tokenized in `chunks` parts at once
// (0: one per core, of 1 MiB at least), which do not change the result. Fails (65) on invalid
// UTF-8, naming `source` and the first such byte.
std::string moses_pretokenize(std::string_view text, const std::string& source, size_t chunks = 0);

// The text of one line's words as Hugging Face's decode gives it (sacremoses' detokenizer, then
// "@,@" and "@.@" joined): "Henry 's $ 5 @,@ 000 ." is "Henry's $5,000.".
std::string moses_detokenize(const std::vector<std::string>& words);

// How many of a line's first words have their final text: moses_detokenize of them is the start
// of moses_detokenize of the line whatever words follow. "@-@", "@,@" and "@.@" join the words on
// either side, so a word next to one, or the last word, may still change.
size_t moses_settled(const std::vector<std::string>& words);

// moses_detokenize of a line given in parts, each ending where moses_settled does: the text of
// each part as the whole line's text has it, in time linear in the line.
class MosesLineDetokenizer {
 public:
  std::string add(const std::vector<std::string>& words);

 private:
  std::u32string space_before_ = U" ";  // what the next word gets before it
  std::vector<std::pair<std::u32string, int>> quotes_;  // how often each quote has been seen
  std::u32string last_;  // the last word, as the detokenizer split it
  bool started_ = false;
};

// The text of words that come one at a time (xl-generate): each call gives what has become final.
class MosesLineWriter {
 public:
  // Words already on the line: with `write_them`, their final text is returned to be written;
  // without, they were written elsewhere or are context only, and what follows continues the
  // line's text after theirs (a joiner that follows respaces them as the whole line would).
  std::string begin_line(std::vector<std::string> words, bool write_them);
  std::string add(std::string word);
  std::string end_line();  // the rest of the line and a newline
  std::string rest();      // the rest of the line, at the end of the text

 private:
  MosesLineDetokenizer line_;
  std::vector<std::string> pending_;  // words whose text may still change
  size_t hidden_ = 0;                  // how many of them begin_line was given not to write
  std::string settle();
  std::string write(const std::vector<std::string>& part);  // part's text, less the hidden words'

};

}  // namespace xl::text

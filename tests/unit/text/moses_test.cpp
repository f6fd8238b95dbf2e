// Moses pretokenization against Hugging Face's TransfoXL tokenizer: the expected words below and
// in tests/moses/ were written by its moses_pipeline (sacremoses 0.1.1's MosesPunctNormalizer("en")
// and MosesTokenizer("en").tokenize(aggressive_dash_splits=True, escape=False, protected_patterns=
// [<eos>, <unk>, <formula>]), then transformers' tokenize_numbers), one line at a time; the
// expected texts by its decode (MosesDetokenizer("en").detokenize, then detokenize_numbers).
#include <gtest/gtest.h>

#include <algorithm>

#include "xl/text/moses.h"
#include "xl/text/tokenizer.h"
#include "xl/text/vocab.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/utf8.h"
#include "support/test_support.h"

using namespace xl::text;

namespace {

std::u32string code_points(const std::string& utf8) {
  std::u32string out;
  for (size_t at = 0; at < utf8.size();) {
    uint32_t cp;
    int len = xl::utf8_decode(utf8, at, &cp);
    if (len == 0) throw std::runtime_error("test input is not UTF-8");
    out.push_back(static_cast<char32_t>(cp));
    at += static_cast<size_t>(len);
  }
  return out;
}

std::vector<std::string> moses(const std::string& line) { return moses_tokenize(code_points(line)); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

// A recorded case file, tests/moses/NAME.txt.gz, and what Hugging Face made of each of its 800
// lines, NAME.hf.txt.gz.
std::pair<std::vector<std::string>, std::vector<std::string>> recorded(const std::string& name) {
  const std::string dir = std::string(XL_SOURCE_DIR) + "/tests/moses/";
  auto input = lines_of(xl::io::read_text(dir + name + ".txt.gz"));
  auto expected = lines_of(xl::io::read_text(dir + name + ".hf.txt.gz"));
  EXPECT_EQ(input.size(), 800u);
  EXPECT_EQ(expected.size(), input.size());
  expected.resize(input.size());
  return {input, expected};
}

}  // namespace

// One line per rule of the normaliser and the tokenizer, with Hugging Face's own two examples first.
TEST(Moses, EachRuleAsHuggingFacesTokenizerSplitsIt) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"Hello (bracket) and side-scrolled [and] Henry's $5,000 with 3.34 m. What's up!?",
       {"Hello", "(", "bracket", ")", "and", "side", "@-@", "scrolled", "[", "and", "]", "Henry", "'s", "$", "5", "@,@", "000", "with", "3", "@.@", "34", "m", ".", "What", "'s", "up", "!", "?"}},
      {"23,000 people are 1.80 m tall",
       {"23", "@,@", "000", "people", "are", "1", "@.@", "80", "m", "tall"}},
      {"“Quoted” text – with — dashes… and ‘single’ quotes´s „low“",
       {"\"", "Quoted", "\"", "text", "-", "with", "-", "dashes", "...", "and", "'", "single", "'", "quotes", "'s", "\"", "low", "\""}},
      {"He said: ``hi'' (loudly) . Then ( quietly ) ; done",
       {"He", "said", ":", "\"", "hi", "\"", "(", "loudly", ")", ".", "Then", "(", "quietly", ")", ";", "done"}},
      {"50 % of «les gens» said\u00a0: oui\u00a0! Il fait 20\u00a0ºC, nº\u00a05",
       {"50", "%", "of", "\"", "les", "gens", "\"", "said", ":", "oui", "!", "Il", "fait", "20", "ºC", ",", "nº", "5"}},
      {"1\u00a0000 and 2\u00a0500",
       {"1", "@.@", "000", "and", "2", "@.@", "500"}},
      {"\"Yes,\" she said. \"No\".",
       {"\"", "Yes", ",", "\"", "she", "said", ".", "\"", "No", ".", "\""}},
      {"Mr. Smith met Dr. Who at 5 p.m. on Jan. 3, e.g. in the U.S. No. 5 and No. way. Art. 7 pp. 3",
       {"Mr.", "Smith", "met", "Dr.", "Who", "at", "5", "p.m.", "on", "Jan.", "3", ",", "e.g.", "in", "the", "U.S.", "No.", "5", "and", "No.", "way", ".", "Art.", "7", "pp.", "3"}},
      {"Wait... what.... really..? Yes.",
       {"Wait", "...", "what", "....", "really", "..", "?", "Yes", "."}},
      {"I can't, won't, shouldn't've; it's John's and the '90s cats' toys",
       {"I", "can", "'t", ",", "won", "'t", ",", "shouldn", "'t've", ";", "it", "'s", "John", "'s", "and", "the", "'", "90s", "cats", "'", "toys"}},
      {"rock'n'roll 'tis 5's 1990's",
       {"rock", "'n'roll", "'", "tis", "5", "'s", "1990", "'s"}},
      {"<unk> words <UNK> and <formula> stay x<eos>y",
       {"<unk>", "words", "<UNK>", "and", "<formula>", "stay", "x<eos>y"}},
      // Python's case folding takes the Kelvin sign for k and the long s for s.
      {"a<un\u212a>b <EO\u017f>, <Unk>. <form\u00fcla>",
       {"a<un\u212a>b", "<EO\u017f>", ",", "<Unk>", ".", "<", "form\u00fcla", ">"}},
      {"A,B,C 5,300 1,2,3 end,",
       {"A", ",", "B", ",", "C", "5", "@,@", "300", "1", "@,@", "2", "@,@", "3", "end", ","}},
      {"email me@x.org #tag 100% & $5 © 2020 €3",
       {"email", "me", "@", "x.org", "#", "tag", "100", "%", "&", "$", "5", "©", "2020", "€", "3"}},
      {"Ωμέγα, Привет-мир, 中文-字, 한국어",
       {"Ωμέγα", ",", "Привет", "@-@", "мир", ",", "中", "文", "-", "字", ",", "한", "국", "어"}},
      {"He said 'hello.'",
       {"He", "said", "'", "hello", ".", "'"}},
      {"tabs\tand\x01" "control\x1c" "chars   spaced\u00a0out",
       {"tabs", "andcontrol", "chars", "spaced", "out"}},
      {"",
       {}},
      {"   ",
       {}},
      {"3.14.15 1,000.5 v1.2-beta",
       {"3", "@.@", "14", "@.@", "15", "1", "@,@", "000", "@.@", "5", "v1", "@.@", "2", "@-@", "beta"}},
      {"'quoted' and `backticked`",
       {"'quoted", "'", "and", "'", "backticked'"}},
      {"(a) [b] {c} <d> a/b x--y",
       {"(", "a", ")", "[", "b", "]", "{", "c", "}", "<", "d", ">", "a", "/", "b", "x--y"}},
  };
  for (const auto& [line, words] : cases) EXPECT_EQ(moses(line), words) << line;
}

// 800 lines of random pieces (quotes of every kind, no-break spaces, dots, apostrophes,
// abbreviations, numbers, protected tokens in any case, other scripts, control bytes) to the word.
TEST(Moses, RandomLinesAsHuggingFacesTokenizerSplitsThem) {
  const auto [input, expected] = recorded("random-lines");
  int differ = 0;
  for (size_t i = 0; i < input.size(); ++i) {
    std::string joined;
    for (const auto& w : moses(input[i])) joined += (joined.empty() ? "" : " ") + w;
    if (joined != expected[i] && ++differ <= 5) ADD_FAILURE() << "line " << i + 1 << ": " << joined << "\n  expected: " << expected[i];
  }
  EXPECT_EQ(differ, 0);
}

// One word sequence per rule of the detokenizer: quotes open and close in turn (a possessive ' after
// an s closes nothing), currency and opening brackets join the next word, punctuation and
// contractions the last, CJK joins CJK, XML entities are unescaped, @-@ @,@ @.@ join.
TEST(Moses, DetokenizesAsHuggingFacesDecode) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"Hello", "(", "bracket", ")", "and", "side", "@-@", "scrolled", "[", "and", "]", "Henry", "'s", "$", "5", "@,@", "000", "with", "3", "@.@", "34", "m", ".", "What", "'s", "up", "!", "?"},
       "Hello (bracket) and side-scrolled [and] Henry's $5,000 with 3.34 m. What's up!?"},
      {{"\"", "Yes", ",", "\"", "she", "said", ",", "\"", "no", ".", "\""},
       "\"Yes,\" she said, \"no.\""},
      {{"the", "Jones", "'", "house", "and", "'", "quoted", "'", "words"},
       "the Jones' house and 'quoted' words"},
      {{"``", "Penn", "''", "quotes", "and", "„", "low", "“", "ones"},
       "``Penn ''quotes and „low“ ones"},
      {{"中", "文", "字", "and", "한", "국"},
       "中文字 and 한국"},
      {{"&amp;", "&lt;", "tag", "&gt;", "&quot;", "x", "&quot;", "&apos;s", "&#124;", "&#91;", "1", "&#93;"},
       "& < tag > \"x\"'s | [1]"},
      {{"¿", "que", "?", "¡", "si", "!", "(", "a", ")", "[", "b", "]", "{", "c", "}", "$", "(", "5", ")"},
       "¿que? ¡si! (a) [b] {c} $(5)"},
      {{"a", "@-@", "@-@", "b", "@,@", "@.@", "c"},
       "a-@-@ b,@.@ c"},
      {{"@-@", "x"},
       "-x"},
      {{"I", "can", "'t", ",", "won", "'t", ";", "it", "'s", "'em"},
       "I can't, won't; it's'em"},
      {{},
       ""},
  };
  for (const auto& [words, text] : cases) EXPECT_EQ(moses_detokenize(words), text) << text;
}

// 800 lines of random words from a pool of quotes, brackets, currency, punctuation, contractions,
// joiners, CJK, entities and plain words; and the same words given one at a time to the writer
// xl-generate uses, whose pieces must add up to the whole line's text.
TEST(Moses, RandomWordsDetokenizeAsHuggingFacesDecodeAndWordByWord) {
  const auto [input, expected] = recorded("random-words");
  int differ = 0, streamed_differ = 0, continued_differ = 0, joined_after_prompt = 0;
  for (size_t i = 0; i < input.size(); ++i) {
    std::vector<std::string> words;
    for (size_t at = 0; at < input[i].size();) {
      size_t end = std::min(input[i].find(' ', at), input[i].size());
      words.push_back(input[i].substr(at, end - at));
      at = end + 1;
    }
    const std::string text = moses_detokenize(words);
    if (text != expected[i] && ++differ <= 5) ADD_FAILURE() << "line " << i + 1 << ": " << text << "\n  expected: " << expected[i];
    MosesLineWriter writer;
    std::string streamed = writer.begin_line({}, true);
    for (const auto& w : words) streamed += writer.add(w);
    streamed += writer.end_line();
    if (streamed != text + "\n" && ++streamed_differ <= 5) ADD_FAILURE() << "line " << i + 1 << " word by word: " << streamed;
    // Its first half as an unechoed prompt: what follows is the line's text after the prompt's own.
    const std::vector<std::string> prompt(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(words.size() / 2));
    const std::string prompt_text = moses_detokenize(prompt);
    if (text.compare(0, prompt_text.size(), prompt_text) != 0) continue;  // the prompt ends in a joiner
    std::string continued = writer.begin_line(prompt, false);
    for (size_t w = prompt.size(); w < words.size(); ++w) continued += writer.add(words[w]);
    continued += writer.end_line();
    if (prompt_text + continued != text + "\n" && ++continued_differ <= 5)
      ADD_FAILURE() << "line " << i + 1 << " after its first half: " << continued;
    joined_after_prompt += !prompt.empty() && words.size() > prompt.size() && words[prompt.size()].front() == '@';
  }
  EXPECT_GT(joined_after_prompt, 0);  // the case a joiner decides is among them
  EXPECT_EQ(continued_differ, 0);
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(streamed_differ, 0);
}

// A word's text is given once no later word can change it: the last word waits for the next, and
// words next to a joiner wait for the word after it.
TEST(Moses, LineWriterHoldsWordsAJoinerMayStillChange) {
  MosesLineWriter writer;
  EXPECT_EQ(writer.begin_line({"A", "state"}, true), "A");
  EXPECT_EQ(writer.add("@-@"), "");
  EXPECT_EQ(writer.add("of"), "");
  EXPECT_EQ(writer.add("the"), " state-of");
  EXPECT_EQ(writer.add("art"), " the");
  EXPECT_EQ(writer.add("."), " art");
  EXPECT_EQ(writer.end_line(), ".\n");
  // Words not to be written (an unechoed prompt) are continued, not repeated ...
  EXPECT_EQ(writer.begin_line({"He", "said"}, false), "");
  EXPECT_EQ(writer.add(","), "");
  EXPECT_EQ(writer.add("\""), ",");
  EXPECT_EQ(writer.rest(), " \"");
  // ... and a joiner after them joins their last word as the whole line's text does.
  EXPECT_EQ(writer.begin_line({"A", "state"}, false), "");
  EXPECT_EQ(writer.add("@-@"), "");
  EXPECT_EQ(writer.add("of"), "");
  EXPECT_EQ(writer.add("the"), "-of");
  EXPECT_EQ(writer.end_line(), " the\n");
}

// The segmenter runs it per line: <eos> after every line (an empty one too; the last without its
// newline if it has words), the words made, not the text's.
TEST(Moses, WordVocabsAndTokenizersTakeItPerLine) {
  const std::string text = "Hello, world.\n\n\"Mr. Smith's 1,000 cats.\"";
  VocabOptions o;
  o.type = VocabType::kWord;
  o.pretokenizer = Pretokenizer::kMoses;
  Vocab v = build_vocab({text}, o, "test");
  for (const char* w : {"Hello", ",", "world", ".", "Mr.", "Smith", "'s", "1", "@,@", "000", "cats", "\""})
    EXPECT_GE(v.find(w), 0) << w;
  EXPECT_LT(v.find("world."), 0);
  EXPECT_EQ(v.counts()[static_cast<size_t>(v.eos_id())], 3);
  std::vector<int32_t> ids;
  EncodeStats stats;
  Tokenizer(v, false, Pretokenizer::kMoses).encode(text, "test", &ids, &stats);
  EXPECT_EQ(Tokenizer(v).decode(ids), "Hello , world .\n\n\" Mr. Smith 's 1 @,@ 000 cats . \"\n");
  EXPECT_EQ(Tokenizer(v, false, Pretokenizer::kMoses).decode(ids), "Hello, world.\n\n\"Mr. Smith's 1,000 cats.\"\n");
  EXPECT_EQ(stats.unknown, 0);
  // Without it the same vocab misses the words the text glues to punctuation.
  ids.clear();
  Tokenizer(v).encode(text, "test", &ids, &stats);
  EXPECT_GT(stats.unknown, 3);
}

// A vocab built from Moses words records it; a tool reading text with a vocab takes the flag when
// given, else the record; a char vocab cannot take it, and an empty flag is no pretokenizer (64).
TEST(Moses, VocabsRecordItAndToolsDefaultToTheRecord) {
  VocabOptions o;
  o.type = VocabType::kWord;
  o.pretokenizer = Pretokenizer::kMoses;
  const Vocab moses = build_vocab({std::string_view("Hello, world.\n")}, o, "test");
  EXPECT_EQ(moses.pretokenizer(), Pretokenizer::kMoses);
  o.pretokenizer = Pretokenizer::kNone;
  const Vocab plain = build_vocab({std::string_view("Hello , world .\n")}, o, "test");
  EXPECT_EQ(plain.pretokenizer(), Pretokenizer::kNone);
  EXPECT_EQ(plain.sha256(), moses.sha256());  // the same words, whatever made them
  EXPECT_EQ(pretokenizer_for(moses, std::nullopt), Pretokenizer::kMoses);
  EXPECT_EQ(pretokenizer_for(moses, "none"), Pretokenizer::kNone);
  EXPECT_EQ(pretokenizer_for(plain, std::nullopt), Pretokenizer::kNone);
  EXPECT_EQ(pretokenizer_for(plain, "moses"), Pretokenizer::kMoses);
  o.type = VocabType::kChar;
  const Vocab chars = build_vocab({std::string_view("ab\n")}, o, "test");
  EXPECT_EQ(pretokenizer_for(chars, std::nullopt), Pretokenizer::kNone);
  std::string what;
  EXPECT_EQ(xl::test::error_code([&] { pretokenizer_for(chars, "moses"); }, &what), xl::kExitUsage);
  EXPECT_EQ(xl::test::error_code([&] { pretokenizer_for(moses, ""); }, &what), xl::kExitUsage);
  EXPECT_NE(what.find("--pretokenize: unknown ''"), std::string::npos) << what;
  Vocab copy = chars;
  EXPECT_EQ(xl::test::error_code([&] { copy.set_pretokenizer(Pretokenizer::kMoses); }, &what), xl::kExitUsage);
  Vocab assigned;
  assigned = moses;
  EXPECT_EQ(assigned.pretokenizer(), Pretokenizer::kMoses);
}

// A text's words, line by line, with a newline where the text has one; the same in any number of
// chunks, whose first invalid byte is the text's.
TEST(Moses, PretokenizedTextIsEachLinesWordsInAnyNumberOfChunks) {
  const auto [lines, expected] = recorded("random-lines");
  std::string text, want;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find('\r') != std::string::npos) continue;  // in a file, a lone CR ends a line
    text += lines[i] + "\n";
    want += expected[i] + "\n";
  }
  text.pop_back(), want.pop_back();
  for (size_t chunks : {1, 2, 7, 2000}) EXPECT_EQ(moses_pretokenize(text, "t", chunks), want) << chunks << " chunks";
  EXPECT_EQ(moses_pretokenize("a,b\n\n  \n", "t"), "a , b\n\n\n");
  // Lines end as Python's universal newlines end them, as Hugging Face's tokenizer reads files.
  EXPECT_EQ(moses_pretokenize("a,b\rc\r\n\rd", "t"), "a , b\nc\n\nd");
  EXPECT_EQ(moses_pretokenize("", "t"), "");
  const std::string bad = text.substr(0, 20000) + "\xff" + text.substr(20000) + "\xc3";
  for (size_t chunks : {1, 5}) {
    try {
      moses_pretokenize(bad, "in.txt", chunks);
      ADD_FAILURE() << "invalid UTF-8 was tokenized";
    } catch (const xl::Error& e) {
      EXPECT_NE(std::string(e.what()).find("in.txt: invalid UTF-8 at byte 20000"), std::string::npos) << e.what();
    }
  }
}

// sacremoses takes a pass per dot of the longest run of dots and per protected token: quadratic
// in a long line (20,000 dots took 13 s that way), as was detokenizing a line again for each word
// generated. Here such lines come out whole, as it makes them.
TEST(Moses, LongLines) {
  const std::string dots(100000, '.');
  EXPECT_EQ(moses("a" + dots + "b, c" + dots), (std::vector<std::string>{"a", dots, "b", ",", "c", dots}));
  std::string line;
  std::vector<std::string> words;
  for (int i = 0; i < 50000; ++i) {
    line += i % 2 ? "<unk> x, " : "<UNK>y ";
    for (const char* w : i % 2 ? std::vector<const char*>{"<unk>", "x", ","} : std::vector<const char*>{"<UNK>y"}) words.push_back(w);
  }
  EXPECT_EQ(moses(line), words);
  // Words given one at a time: @,@ 5 5 @,@ 5 5 ... @,@, whose @,@ join the 5s around them.
  MosesLineWriter writer;
  std::string streamed;
  for (int i = 0; i < 100000; ++i) streamed += writer.add(i % 3 ? "5" : "@,@");
  std::string want = "@,@ 5 5";
  for (int i = 1; i < 33333; ++i) want += ",5 5";
  EXPECT_EQ(streamed + writer.rest(), want + " @,@");
}

TEST(Moses, RefusesOtherVocabTypesAndInvalidUtf8) {
  try {
    check_pretokenizer(VocabType::kChar, Pretokenizer::kMoses);
    FAIL() << "a char vocab took --pretokenize moses";
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitUsage);
    EXPECT_NE(std::string(e.what()).find("--pretokenize moses"), std::string::npos) << e.what();
  }
  VocabOptions o;
  o.type = VocabType::kWord;
  o.pretokenizer = Pretokenizer::kMoses;
  try {
    build_vocab({std::string("fine\nbad \xff byte")}, o, "in.txt");
    FAIL() << "invalid UTF-8 was tokenized";
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitDataErr);
    EXPECT_NE(std::string(e.what()).find("in.txt: invalid UTF-8 at byte 9"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_pretokenizer("none"), Pretokenizer::kNone);
  EXPECT_THROW(parse_pretokenizer("Moses"), xl::Error);
}

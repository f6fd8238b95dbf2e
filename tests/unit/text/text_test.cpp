// Vocab building, TSV escaping and identity, tokenization round trips on tricky input.
#include <gtest/gtest.h>

#include <algorithm>

#include "xl/text/escape.h"
#include "xl/text/tokenizer.h"
#include "xl/text/vocab.h"
#include "xl/util/error.h"

using namespace xl::text;

namespace {
Vocab build(VocabType type, const std::string& text, int64_t min_count = 1, bool allow_invalid = false) {
  VocabOptions o;
  o.type = type;
  o.min_count = min_count;
  o.allow_invalid_utf8 = allow_invalid;
  return build_vocab({text}, o, "test");
}
std::vector<int32_t> encode(const Vocab& v, const std::string& text, EncodeStats* stats = nullptr) {
  EncodeStats local;
  std::vector<int32_t> ids;
  Tokenizer(v).encode(text, "test", &ids, stats ? stats : &local);
  return ids;
}
}  // namespace

TEST(Escape, RoundTripsEveryByteAndKeepsLinesPrintable) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string escaped = escape_piece(all);
  EXPECT_EQ(escaped.find('\t'), std::string::npos);
  EXPECT_EQ(escaped.find('\n'), std::string::npos);
  EXPECT_EQ(escaped.find(' '), std::string::npos);
  std::string back;
  ASSERT_TRUE(unescape_piece(escaped, &back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(escape_piece("\xc3\xa9"), "\xc3\xa9");  // valid UTF-8 stays readable
  EXPECT_EQ(escape_piece("a\\b"), "a\\\\b");
  EXPECT_FALSE(unescape_piece("\\q", &back));
  EXPECT_FALSE(unescape_piece("\\x4", &back));
  EXPECT_FALSE(unescape_piece("abc\\", &back));
}

TEST(Vocab, ByteModeIsFixedAndRoundTripsNulAndCrlf) {
  std::string text("a\0b\r\n\tz\xff", 8);
  Vocab v = build(VocabType::kByte, text);
  EXPECT_EQ(v.size(), 256u);
  EXPECT_EQ(v.counts()[0], 1);
  EXPECT_EQ(v.counts()['\r'], 1);
  auto ids = encode(v, text);
  ASSERT_EQ(ids.size(), 8u);
  EXPECT_EQ(ids[1], 0);
  EXPECT_EQ(ids[7], 255);
  EXPECT_EQ(Tokenizer(v).decode(ids), text);
}

TEST(Vocab, TsvRoundTripAndHashIgnoresCounts) {
  Vocab v = build(VocabType::kChar, "h\xc3\xa9llo\twor\\ld \n\n");
  std::string tsv = v.to_tsv();
  EXPECT_EQ(tsv.rfind("#xl-vocab 1 type=char size=", 0), 0u);
  Vocab back = Vocab::from_tsv(tsv, "v.tsv");
  EXPECT_EQ(back.pieces(), v.pieces());
  EXPECT_EQ(back.counts(), v.counts());
  EXPECT_EQ(back.sha256(), v.sha256());
  EXPECT_EQ(back.to_tsv(), tsv);
  Vocab other = build(VocabType::kChar, "h\xc3\xa9llo\twor\\ld \n\nll");  // same pieces, other counts... and order
  EXPECT_NE(other.sha256(), Vocab(VocabType::kWord, v.pieces(), v.counts(), v.specials()).sha256());
}

TEST(Vocab, DeterministicOrderWithTieBreaking) {
  Vocab a = build(VocabType::kWord, "b a c\na b\n");
  Vocab b = build(VocabType::kWord, "b a c\na b\n");
  EXPECT_EQ(a.to_tsv(), b.to_tsv());
  // <eos> and <unk> first, then by count, ties in byte order.
  std::vector<std::string> expected{"<eos>", "<unk>", "a", "b", "c"};
  EXPECT_EQ(a.pieces(), expected);
  EXPECT_EQ(a.counts()[0], 2);
}

TEST(Vocab, WordModeEosOnEveryLineIncludingEmptyAndCrlf) {
  Vocab v = build(VocabType::kWord, "x y\r\n\r\n\tz\n");
  auto ids = encode(v, "x y\r\n\r\n\tz\n");
  // x y <eos> <eos> z <eos>
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(ids[2], v.eos_id());
  EXPECT_EQ(ids[3], v.eos_id());
  EXPECT_EQ(ids[5], v.eos_id());
  EXPECT_EQ(encode(v, "x").size(), 2u);  // last line without newline still ends with <eos>
  EXPECT_TRUE(encode(v, "").empty());
  EXPECT_EQ(Tokenizer(v).decode(ids), "x y\n\nz\n");
}

// Transformer-XL's vocab reads files with Python's universal newlines (\n, \r\n and a lone \r end
// a line) and splits lines with str.split(), at Unicode's spaces too (no-break space, ideographic
// space, NEL, the ASCII separators); other bytes, invalid UTF-8 included, stay in their word.
TEST(Vocab, WordModeSplitsLinesAndWordsAsPythonReadsThem) {
  const std::string text = "a\xc2\xa0" "b\rc\r\n\rd\x1c" "e\xe3\x80\x80" "f\xc2\x85g h\xffi\xc2\xa9j";
  Vocab v = build(VocabType::kWord, text);
  EXPECT_EQ(Tokenizer(v).decode(encode(v, text)), "a b\nc\n\nd e f g h\xffi\xc2\xa9j\n");
}

TEST(Vocab, MinCountAndMaxSizeFoldIntoUnk) {
  Vocab v = build(VocabType::kWord, "a a a b b c\n", 2);
  EXPECT_EQ(v.find("c"), -1);
  EXPECT_EQ(v.counts()[static_cast<size_t>(v.unk_id())], 1);
  EncodeStats stats;
  auto ids = encode(v, "a c d\n", &stats);
  EXPECT_EQ(stats.unknown, 2);
  EXPECT_EQ(ids[1], v.unk_id());
  VocabOptions o;
  o.type = VocabType::kWord;
  o.max_size = 3;
  Vocab small = build_vocab({"a a a b b c\n"}, o, "t");
  EXPECT_EQ(small.size(), 3u);
  // A literal <unk> in the text is the unknown token itself (WikiText).
  Vocab w = build(VocabType::kWord, "<unk> a\n");
  EXPECT_EQ(w.find("<unk>"), w.unk_id());
  EXPECT_EQ(w.size(), 3u);
}

TEST(Vocab, AWordVocabsUnkWordStandsForWordsOutsideIt) {
  // Transformer-XL's WikiText vocabs hold <unk> as a word of the text, not a special.
  Vocab v(VocabType::kWord, {"<eos>", "the", "<unk>", "cat"}, {0, 9, 5, 2}, 1);
  EXPECT_EQ(v.unk_id(), 2);
  EncodeStats stats;
  EXPECT_EQ(encode(v, "the zebra <unk>\n", &stats), (std::vector<int32_t>{1, 2, 2, 0}));
  EXPECT_EQ(stats.unknown, 1);
  // Without one, a word outside the vocab is refused.
  Vocab none(VocabType::kWord, {"<eos>", "the"}, {0, 9}, 1);
  EXPECT_EQ(none.unk_id(), -1);
  EXPECT_THROW(encode(none, "zebra\n"), xl::Error);
}

TEST(Vocab, CharModeRejectsInvalidUtf8UnlessAllowed) {
  std::string bad = "ab\xff" "c\xc3";
  try {
    build(VocabType::kChar, bad);
    FAIL() << "invalid UTF-8 accepted";
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitDataErr);
    EXPECT_NE(std::string(e.what()).find("byte 2"), std::string::npos);
  }
  Vocab v = build(VocabType::kChar, bad, 1, true);
  EXPECT_EQ(v.counts()[static_cast<size_t>(v.unk_id())], 2);
  EXPECT_EQ(v.size(), 4u);  // <unk> a b c
  // Overlong and surrogate encodings are invalid too.
  EXPECT_THROW(build(VocabType::kChar, "\xc0\xaf"), xl::Error);
  EXPECT_THROW(build(VocabType::kChar, "\xed\xa0\x80"), xl::Error);
}

TEST(Vocab, CharModeRoundTripsUnicode) {
  std::string text = "na\xc3\xafve \xe2\x82\xac 10 \xf0\x9f\x98\x80\n";
  Vocab v = build(VocabType::kChar, text);
  auto ids = encode(v, text);
  EXPECT_EQ(ids.size(), 13u);
  EXPECT_EQ(Tokenizer(v).decode(ids), text);
}

TEST(Vocab, MalformedTsvIsRefusedWithLineNumbers) {
  auto code_of = [](const std::string& tsv) {
    try {
      Vocab::from_tsv(tsv, "bad.tsv");
    } catch (const xl::Error& e) {
      return std::make_pair(e.code(), std::string(e.what()));
    }
    return std::make_pair(0, std::string());
  };
  EXPECT_EQ(code_of("hello\n").first, xl::kExitDataErr);
  EXPECT_NE(code_of("#xl-vocab 1 type=char size=1 specials=0\n5\ta\t1\n").second.find("bad.tsv:2"), std::string::npos);
  EXPECT_EQ(code_of("#xl-vocab 1 type=char size=2 specials=0\n0\ta\t1\n").first, xl::kExitDataErr);
  EXPECT_EQ(code_of("#xl-vocab 1 type=char size=2 specials=0\n0\ta\t1\n1\ta\t1\n").first, xl::kExitDataErr);
  EXPECT_EQ(code_of("#xl-vocab 9 type=char\n").first, xl::kExitDataErr);
  // Pieces the type cannot hold, named by id.
  const auto two_bytes = code_of("#xl-vocab 1 type=byte size=2 specials=0\n0\ta\t1\n1\tbc\t1\n");
  EXPECT_EQ(two_bytes.first, xl::kExitDataErr);
  EXPECT_NE(two_bytes.second.find("entry 1 ('bc') is not one byte"), std::string::npos) << two_bytes.second;
  EXPECT_EQ(code_of("#xl-vocab 1 type=byte size=1 specials=1\n0\ta\t1\n").first, xl::kExitDataErr);
  EXPECT_NE(code_of("#xl-vocab 1 type=char size=2 specials=1\n0\t<unk>\t1\n1\tab\t1\n").second.find("not one character"),
            std::string::npos);
  EXPECT_NE(code_of("#xl-vocab 1 type=char size=1 specials=0\n0\t\\xc3\t1\n").second.find("not one character"),
            std::string::npos);
  EXPECT_EQ(code_of("#xl-vocab 1 type=word size=1 specials=2\n0\ta\t1\n").first, xl::kExitDataErr);
  EXPECT_EQ(code_of("#xl-vocab 1 type=char size=2 specials=1\n0\t<unk>\t1\n1\t\xc3\xa9\t1\n").first, 0);
}

// A byte vocab in another order, without some bytes: Transformer-XL's enwik8 symbols (its most
// frequent bytes first, no newline) as xl-import-torch --corpus writes them.
TEST(Vocab, ByteVocabOfSomeBytesInItsOwnOrder) {
  const std::string text = "the cat\xc3\xa9";
  std::vector<std::string> pieces;
  for (char c : std::string(" taehc\xc3\xa9")) pieces.emplace_back(1, c);
  const Vocab v(VocabType::kByte, pieces, {}, 0);
  v.check("v");
  std::vector<int32_t> expected;
  for (char c : text) expected.push_back(static_cast<int32_t>(std::find(pieces.begin(), pieces.end(), std::string(1, c)) - pieces.begin()));
  EXPECT_EQ(encode(v, text), expected);
  EXPECT_EQ(expected[3], 0);  // the space, its first byte
  EXPECT_EQ(Tokenizer(v).decode(expected), text);
  try {
    encode(v, "cat\nhat");
    FAIL() << "a byte outside the vocab was encoded";
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitDataErr);
    EXPECT_NE(std::string(e.what()).find("'\\n' is not in the vocab"), std::string::npos) << e.what();
  }
}

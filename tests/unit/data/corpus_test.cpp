// Split specs (fractions and enwik8-style counts) and tokenize_corpus: one input cut into splits
// or one input per split, a given vocab or one built from the train split only.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <boost/iostreams/device/back_inserter.hpp>
#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_stream.hpp>

#include "xl/data/corpus.h"
#include "xl/text/tokenizer.h"
#include "xl/text/vocab.h"
#include "xl/util/error.h"
#include "xl/util/sha256.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using xl::data::split_lengths;
using xl::text::Vocab;
using xl::text::VocabType;

namespace {

using xl::test::TempDir;
using xl::test::error_code;

using Lengths = std::vector<int64_t>;

Vocab build(VocabType type, const std::string& text) {
  xl::text::VocabOptions o;
  o.type = type;
  return xl::text::build_vocab({std::string_view(text)}, o, "t");
}

const xl::h5::TokenSplit& find_split(const xl::data::Corpus& c, const std::string& name) {
  for (const auto& s : c.splits)
    if (s.name == name) return s;
  throw std::runtime_error("no split " + name);
}

std::string gzip(const std::string& text) {
  namespace bio = boost::iostreams;
  std::string out;
  {
    bio::filtering_ostream os;
    os.push(bio::gzip_compressor());
    os.push(bio::back_inserter(out));
    os << text;
  }
  return out;
}

}  // namespace

TEST(SplitLengths, FractionsRoundAndTheLastTakesTheRest) {
  EXPECT_EQ(split_lengths("0.9,0.05,0.05", 1000), (Lengths{900, 50, 50}));
  EXPECT_EQ(split_lengths("0.9,0.05,0.05", 1001), (Lengths{901, 50, 50}));
  EXPECT_EQ(split_lengths("0.9,0.05,0.05", 100000000), (Lengths{90000000, 5000000, 5000000}));
  EXPECT_EQ(split_lengths("0.5,0.5", 3), (Lengths{2, 1}));
  EXPECT_EQ(split_lengths("0.9,0.05,0.05", 0), (Lengths{0, 0, 0}));
  EXPECT_EQ(split_lengths("0.9,0.05,0.05", 1), (Lengths{1, 0, 0}));
  EXPECT_EQ(split_lengths("1.0", 77), (Lengths{77}));
  // A zero part is still a fraction (not a token count of 0 after a count of "0.95").
  EXPECT_EQ(split_lengths("0.95,0.05,0", 1000), (Lengths{950, 50, 0}));
  EXPECT_EQ(split_lengths("1.0,0,0", 10), (Lengths{10, 0, 0}));
  EXPECT_EQ(split_lengths(".8,.1,.1", 10), (Lengths{8, 1, 1}));
  for (int64_t total : {7, 10, 99, 12345, 4154064}) {
    auto l = split_lengths("0.9,0.05,0.05", total);
    EXPECT_EQ(l[0] + l[1] + l[2], total) << total;
  }
}

TEST(SplitLengths, TokenCountsLikeTheEnwik8Split) {
  EXPECT_EQ(split_lengths("90M,5M,5M", 100000000), (Lengths{90000000, 5000000, 5000000}));
  // More input than the counts use: the rest is left out (with a warning).
  EXPECT_EQ(split_lengths("90M,5M,5M", 100000123), (Lengths{90000000, 5000000, 5000000}));
  EXPECT_EQ(split_lengths("1.5K,500,0", 2000), (Lengths{1500, 500, 0}));
  EXPECT_EQ(split_lengths("2G", 2000000000), (Lengths{2000000000}));
  EXPECT_EQ(split_lengths("1,0,0", 10), (Lengths{10, 0, 0}));  // no point, but adding up to 1: fractions
  EXPECT_EQ(split_lengths("0,1", 10), (Lengths{0, 10}));
  EXPECT_EQ(split_lengths("1,1", 10), (Lengths{1, 1}));  // no point, adding up to 2: counts
  EXPECT_EQ(split_lengths("0,0,1", 10), (Lengths{0, 0, 10}));
  EXPECT_EQ(split_lengths("10,20", 30), (Lengths{10, 20}));
  std::string what;
  EXPECT_EQ(error_code([] { split_lengths("90M,5M,5M", 99999999); }, &what), xl::kExitUsage);
  EXPECT_NE(what.find("99999999"), std::string::npos) << what;
}

TEST(SplitLengths, BadSpecsAreUsageErrors) {
  for (const char* spec : {"", ",", "abc", "0.5,0.6", "0.9,0.05", "-1,2", "-0.1,1.1", "1X", "5Q,1", "0.9,,0.1",
                           "0.9;0.1", "M"}) {
    std::string what;
    EXPECT_EQ(error_code([&] { split_lengths(spec, 1000); }, &what), xl::kExitUsage) << "'" << spec << "'";
    EXPECT_NE(what.find("--split"), std::string::npos) << what;
    EXPECT_EQ(error_code([&] { xl::data::check_split_spec(spec, 3, "--split"); }), xl::kExitUsage) << "'" << spec << "'";
  }
  EXPECT_EQ(error_code([] { xl::data::check_split_spec("0.25,0.25,0.25,0.25", 3, "--split"); }), xl::kExitUsage);
  EXPECT_EQ(error_code([] { xl::data::check_split_spec("1,2,3,4", 3, "--split"); }), xl::kExitUsage);
  EXPECT_EQ(error_code([] { xl::data::check_split_spec("90M,5M,5M", 3, "--split"); }), 0);
  EXPECT_EQ(error_code([] { xl::data::check_split_spec("0.9,0.05,0.05", 3, "--split"); }), 0);
}

TEST(Vocab, CopiesKeepAWorkingIndex) {
  // The piece index holds views into the pieces: a copy must not point into its source. Long
  // pieces live on the heap, and the clobbering below reuses their freed memory.
  const std::string a(40, 'a'), b(40, 'b'), g(40, 'g');
  auto original = std::make_unique<Vocab>(build(VocabType::kWord, a + " " + b + " " + g + " " + b + "\n"));
  Vocab copy(*original);
  Vocab assigned;
  assigned = *original;
  const Vocab& const_ref = *original;
  Vocab from_conditional = true ? const_ref : build(VocabType::kWord, "x\n");  // a const prvalue: copied
  original.reset();
  std::vector<std::string> clobber;
  for (int i = 0; i < 64; ++i) clobber.emplace_back(40, 'z');
  for (const Vocab* v : {&copy, &assigned, &from_conditional}) {
    EXPECT_EQ(v->find(b), 2);
    EXPECT_EQ(v->find(a), 3);
    EXPECT_EQ(v->find(g), 4);
    EXPECT_EQ(v->find(clobber[0]), -1);
    EXPECT_EQ(v->unk_id(), 1);
    EXPECT_EQ(v->eos_id(), 0);
  }
  Vocab moved(std::move(copy));
  EXPECT_EQ(moved.find(a), 3);
  Vocab move_assigned;
  move_assigned = std::move(assigned);
  EXPECT_EQ(move_assigned.find(g), 4);
}

TEST(TokenizeCorpus, CharModeBuildsTheVocabFromTrainOnly) {
  TempDir dir;
  // 13 characters of train, then valid and test with characters train never shows.
  const std::string train = "abcabc\nabca\xc3\xa9\n", valid = "abz\n", test = "\xe2\x82\xac" "ab\n";
  std::string path = dir.write("all.txt", train + valid + test);
  xl::data::CorpusRequest req;
  req.whole_input = path;
  req.split_spec = "13,4,4";
  req.build.type = VocabType::kChar;
  auto corpus = xl::data::tokenize_corpus(req);

  const Vocab expected = build(VocabType::kChar, train);
  EXPECT_EQ(corpus.vocab.pieces(), expected.pieces());
  EXPECT_EQ(corpus.vocab.counts(), expected.counts());
  EXPECT_EQ(corpus.vocab.sha256(), expected.sha256());
  EXPECT_EQ(corpus.vocab.find("z"), -1);
  EXPECT_EQ(corpus.vocab.find("\xe2\x82\xac"), -1);
  ASSERT_EQ(corpus.splits.size(), 3u);
  EXPECT_EQ(corpus.splits[0].name, "train");
  EXPECT_EQ(corpus.splits[1].name, "valid");
  EXPECT_EQ(corpus.splits[2].name, "test");
  const int32_t unk = corpus.vocab.unk_id();
  EXPECT_EQ(find_split(corpus, "train").source.unknown, 0);
  EXPECT_EQ(find_split(corpus, "valid").source.unknown, 1);
  EXPECT_EQ(find_split(corpus, "test").source.unknown, 1);
  EXPECT_EQ(find_split(corpus, "valid").ids[2], unk);
  EXPECT_EQ(find_split(corpus, "test").ids[0], unk);
  xl::text::Tokenizer tok(corpus.vocab);
  EXPECT_EQ(tok.decode(find_split(corpus, "train").ids), train);
  EXPECT_EQ(tok.decode(find_split(corpus, "valid").ids), "ab<unk>\n");
  // Provenance: the whole input's hash and size, repeated on each split.
  const std::string all = train + valid + test;
  EXPECT_EQ(corpus.source_sha256, xl::sha256_hex(all));
  EXPECT_EQ(corpus.source_bytes, static_cast<int64_t>(all.size()));
  EXPECT_EQ(find_split(corpus, "valid").source.name, path);
  EXPECT_EQ(find_split(corpus, "valid").source.sha256, xl::sha256_hex(all));

  // One input per split gives the same vocab and ids.
  xl::data::CorpusRequest sep;
  sep.inputs = {{"train", dir.write("train.txt", train)}, {"valid", dir.write("valid.txt", valid)},
                {"test", dir.write("test.txt", test)}};
  sep.build.type = VocabType::kChar;
  auto corpus2 = xl::data::tokenize_corpus(sep);
  EXPECT_EQ(corpus2.vocab.sha256(), expected.sha256());
  for (const char* s : {"train", "valid", "test"}) {
    EXPECT_EQ(find_split(corpus2, s).ids, find_split(corpus, s).ids) << s;
    EXPECT_EQ(find_split(corpus2, s).source.unknown, find_split(corpus, s).source.unknown) << s;
  }
  EXPECT_EQ(find_split(corpus2, "valid").source.sha256, xl::sha256_hex(valid));
  EXPECT_EQ(find_split(corpus2, "valid").source.bytes, 4);
  EXPECT_TRUE(corpus2.source_sha256.empty());
}

TEST(TokenizeCorpus, WordModeMinCountAndMaxSizeApplyToTrainCounts) {
  TempDir dir;
  xl::data::CorpusRequest req;
  req.inputs = {{"train", dir.write("t.txt", "a a a b b c\nd\n")}, {"valid", dir.write("v.txt", "a b c d e\n")}};
  req.build.type = VocabType::kWord;
  req.build.min_count = 2;
  auto corpus = xl::data::tokenize_corpus(req);
  EXPECT_EQ(corpus.vocab.pieces(), (std::vector<std::string>{"<eos>", "<unk>", "a", "b"}));
  EXPECT_EQ(corpus.vocab.counts(), (std::vector<int64_t>{2, 2, 3, 2}));  // c and d folded into <unk>
  EXPECT_EQ(find_split(corpus, "train").source.unknown, 2);
  EXPECT_EQ(find_split(corpus, "valid").source.unknown, 3);
  req.build.min_count = 1;
  req.build.max_size = 3;
  auto small = xl::data::tokenize_corpus(req);
  EXPECT_EQ(small.vocab.pieces(), (std::vector<std::string>{"<eos>", "<unk>", "a"}));
}

TEST(TokenizeCorpus, GivenVocabIsKeptAndUnknownsCounted) {
  TempDir dir;
  Vocab given = build(VocabType::kWord, "the cat sat\n");
  xl::data::CorpusRequest req;
  req.whole_input = dir.write("in.txt", "the cat sat\nthe dog sat\nthe cow ran\n");
  req.split_spec = "4,4,4";
  req.vocab = given;
  auto corpus = xl::data::tokenize_corpus(req);
  EXPECT_EQ(corpus.vocab.sha256(), given.sha256());
  EXPECT_EQ(corpus.vocab.to_tsv(), given.to_tsv());
  EXPECT_EQ(find_split(corpus, "train").source.unknown, 0);
  EXPECT_EQ(find_split(corpus, "valid").source.unknown, 1);
  EXPECT_EQ(find_split(corpus, "test").source.unknown, 2);
}

TEST(TokenizeCorpus, ByteModeCompressedInputAndInvalidUtf8) {
  TempDir dir;
  std::string text("x\0y\r\n\tz\xff\xfe", 9);
  for (int i = 0; i < 6; ++i) text += text;
  xl::data::CorpusRequest req;
  req.whole_input = dir.write("in.gz", gzip(text));
  req.split_spec = "0.9,0.05,0.05";
  req.build.type = VocabType::kByte;
  auto corpus = xl::data::tokenize_corpus(req);
  EXPECT_EQ(corpus.vocab.size(), 256u);
  EXPECT_EQ(corpus.source_sha256, xl::sha256_hex(text));  // of the decompressed text
  std::vector<int32_t> all;
  for (const auto& s : corpus.splits) all.insert(all.end(), s.ids.begin(), s.ids.end());
  EXPECT_EQ(xl::text::Tokenizer(corpus.vocab).decode(all), text);
  EXPECT_EQ(find_split(corpus, "train").ids.size(), static_cast<size_t>(std::llround(0.9 * text.size())));

  // Char mode: invalid UTF-8 fails naming the file, or becomes <unk> and is counted.
  req.build.type = VocabType::kChar;
  std::string what;
  EXPECT_EQ(error_code([&] { xl::data::tokenize_corpus(req); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("in.gz"), std::string::npos) << what;
  req.allow_invalid_utf8 = true;
  auto chars = xl::data::tokenize_corpus(req);
  int64_t unknown = 0;
  for (const auto& s : chars.splits) unknown += s.source.unknown;
  EXPECT_EQ(unknown, 2 * 64);
}

TEST(TokenizeCorpus, FailsEarlyOnBadSpecsAndMissingInputs) {
  TempDir dir;
  xl::data::CorpusRequest req;
  req.whole_input = "/nonexistent/input.txt";
  req.split_spec = "0.9,0.2";
  req.build.type = VocabType::kByte;
  // The spec is checked before the input is read.
  EXPECT_EQ(error_code([&] { xl::data::tokenize_corpus(req); }), xl::kExitUsage);
  req.split_spec = "0.25,0.25,0.25,0.25";
  EXPECT_EQ(error_code([&] { xl::data::tokenize_corpus(req); }), xl::kExitUsage);
  req.split_spec = "0.9,0.1";
  std::string what;
  EXPECT_EQ(error_code([&] { xl::data::tokenize_corpus(req); }, &what), xl::kExitNoInput);
  EXPECT_NE(what.find("/nonexistent/input.txt"), std::string::npos);
  req.whole_input = dir.write("short.txt", "abc");
  req.split_spec = "2,2";
  EXPECT_EQ(error_code([&] { xl::data::tokenize_corpus(req); }), xl::kExitUsage);
}

// Transformer-XL's vocabs as xl's: a Corpus's, a Vocab's and Hugging Face's vocab.bin (a Vocab's
// __dict__ whose UTF-8 symbols were read as Latin-1), from parsed torch.save files.
#include <gtest/gtest.h>

#include "xl/interop/txl_corpus.h"
#include "xl/util/error.h"
#include "support/test_support.h"

using namespace xl::interop;
using xl::test::error_code;

namespace {

// What torch.save(vocab.__dict__) parses to: its symbols, counts and specials as attributes.
TorchFile vocab_dict(const std::vector<std::string>& symbols, const std::string& cls = "dict") {
  TorchFile f;
  f.classes[""] = cls;
  f.attributes["idx2sym"] = symbols;
  nlohmann::json counter = nlohmann::json::object();
  for (size_t i = 1; i < symbols.size(); ++i) counter[symbols[i]] = static_cast<int64_t>(100 - i);
  f.attributes["counter"] = counter;
  f.attributes["special"] = {"<eos>"};
  return f;
}

// A string's UTF-8 bytes, each taken as a Latin-1 character and written as UTF-8 again.
std::string latin1_read(const std::string& utf8) {
  std::string out;
  for (unsigned char c : utf8) {
    if (c < 0x80) out += static_cast<char>(c);
    else {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

}  // namespace

TEST(TxlVocab, HuggingFacesLatin1ReadSymbolsAreDecodedInTheirIdOrder) {
  const std::vector<std::string> text{"<eos>", "the", "Enquêtes", "東京", "<unk>"};
  std::vector<std::string> stored;
  for (const auto& s : text) stored.push_back(latin1_read(s));
  EXPECT_EQ(stored[2], "Enqu\xc3\x83\xc2\xaates");  // "EnquÃªtes", as transformers#271 shows it
  const auto v = vocab_from_torch(vocab_dict(stored), "vocab.bin");
  EXPECT_EQ(v.type(), xl::text::VocabType::kWord);
  EXPECT_EQ(v.pieces(), text);
  EXPECT_EQ(v.specials(), 1);
  EXPECT_EQ(v.counts()[2], 98);  // counted under the stored symbol
  EXPECT_EQ(v.unk_id(), 4);
  EXPECT_EQ(v.eos_id(), 0);
}

TEST(TxlVocab, SymbolsThatAreNotLatin1ReadUtf8StayAsTheyAre) {
  // Latin-1 text itself: "é" is one character, whose byte alone is not UTF-8.
  const std::vector<std::string> latin1{"<eos>", "caf\xc3\xa9", "na\xc3\xafve"};
  EXPECT_EQ(vocab_from_torch(vocab_dict(latin1), "v").pieces(), latin1);
  // A symbol past U+00FF means the file holds Unicode: nothing is decoded, even what could be.
  const std::vector<std::string> unicode{"<eos>", "\xe6\x9d\xb1", latin1_read("\xc3\xa9")};
  EXPECT_EQ(vocab_from_torch(vocab_dict(unicode), "v").pieces(), unicode);
  // Plain ASCII is untouched.
  const std::vector<std::string> ascii{"<eos>", "the", "cat"};
  EXPECT_EQ(vocab_from_torch(vocab_dict(ascii), "v").pieces(), ascii);
}

TEST(TxlVocab, TakesACorpusOrAPickledVocabAndRefusesOtherObjects) {
  TorchFile corpus;
  corpus.classes[""] = "data_utils.Corpus";
  corpus.classes["vocab"] = "vocabulary.Vocab";
  corpus.attributes["dataset"] = "text8";
  corpus.attributes["vocab.idx2sym"] = {"_", "e", "t"};
  const auto chars = vocab_from_torch(corpus, "cache.pt");
  EXPECT_EQ(chars.type(), xl::text::VocabType::kChar);
  EXPECT_EQ(chars.pieces(), (std::vector<std::string>{" ", "e", "t"}));
  EXPECT_EQ(vocab_from_torch(vocab_dict({"<eos>", "a"}, "vocabulary.Vocab"), "vocab.pt").size(), 2u);

  std::string msg;
  TorchFile model;
  model.classes[""] = "mem_transformer.MemTransformerLM";
  EXPECT_EQ(error_code([&] { vocab_from_torch(model, "model.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("model.pt: holds a pickled mem_transformer.MemTransformerLM, not a Transformer-XL vocab"), std::string::npos) << msg;
  TorchFile other = vocab_dict({"<eos>", "a"});
  other.attributes.erase("idx2sym");
  EXPECT_EQ(error_code([&] { vocab_from_torch(other, "d.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_EQ(error_code([&] { vocab_from_torch(vocab_dict({"<eos>", "a", "a"}), "twice.bin"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("twice.bin: idx2sym holds \"a\" twice"), std::string::npos) << msg;
}

#include "xl/interop/txl_corpus.h"

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "xl/util/error.h"
#include "xl/util/parse.h"
#include "xl/util/utf8.h"

namespace xl::interop {

using parse::ends_with;

namespace {

// Transformer-XL writes its character corpora as words of one symbol each: enwik8's bytes as their
// decimal values (prep_enwik8.py; a newline byte becomes a line end, which data_utils.py drops),
// text8's letters with '_' for the space (prep_text8.py). Taken as xl's byte and char vocabs in
// the same id order, they decode to the text and report bpc, as the reference does. Anything else
// (specials, other symbols) stays a word vocab.
std::optional<text::Vocab> character_vocab(const std::string& dataset, const std::vector<std::string>& symbols,
                                           const std::vector<int64_t>& counts, int specials) {
  if (specials > 0 || (dataset != "enwik8" && dataset != "text8")) return std::nullopt;
  std::vector<std::string> pieces;
  for (const auto& s : symbols) {
    if (dataset == "enwik8") {
      const bool digits = s.size() <= 3 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                          (s.size() == 1 || s[0] != '0');
      const int byte = digits ? std::stoi(s) : 256;
      if (byte > 255) return std::nullopt;
      pieces.emplace_back(1, static_cast<char>(byte));
    } else {
      uint32_t cp;
      if (utf8_decode(s, 0, &cp) != static_cast<int>(s.size())) return std::nullopt;
      pieces.push_back(s == "_" ? " " : s);
    }
  }
  return text::Vocab(dataset == "enwik8" ? text::VocabType::kByte : text::VocabType::kChar, std::move(pieces), counts, 0);
}

}  // namespace

ImportedCorpus corpus_from_cache(const TorchFile& cache, const std::string& file) {
  auto cls = [&](const std::string& path) {
    auto it = cache.classes.find(path);
    return it == cache.classes.end() ? std::string() : it->second;
  };
  XL_CHECK(ends_with(cls(""), "Corpus") && ends_with(cls("vocab"), "Vocab"), kExitDataErr,
           file << ": holds " << (cls("").empty() ? "a state_dict" : "a pickled " + cls(""))
                << ", not a Transformer-XL corpus cache (data_utils.py's Corpus with its Vocab)");
  auto attr = [&](const std::string& name) {
    auto it = cache.attributes.find(name);
    return it == cache.attributes.end() ? nlohmann::json() : it->second;
  };
  ImportedCorpus out;
  if (const auto d = attr("dataset"); d.is_string()) out.dataset = d.get<std::string>();

  // The vocab: idx2sym in id order, the special symbols (add_special) first; counts where known.
  const nlohmann::json symbols = attr("vocab.idx2sym"), counter = attr("vocab.counter"), special = attr("vocab.special");
  XL_CHECK(symbols.is_array() && !symbols.empty(), kExitDataErr, file << ": its vocab has no symbols (vocab.idx2sym)");
  std::vector<std::string> pieces;
  std::vector<int64_t> counts;
  std::unordered_set<std::string> seen;
  for (const auto& s : symbols) {
    XL_CHECK(s.is_string() && !s.get<std::string>().empty(), kExitDataErr, file << ": vocab.idx2sym holds " << s.dump() << ", not a symbol");
    XL_CHECK(seen.insert(s.get<std::string>()).second, kExitDataErr, file << ": vocab.idx2sym holds " << s.dump() << " twice");
    pieces.push_back(s.get<std::string>());
    const auto c = counter.is_object() ? counter.find(pieces.back()) : counter.end();
    counts.push_back(counter.is_object() && c != counter.end() && c->is_number_integer() ? c->get<int64_t>() : 0);
  }
  int specials = 0;
  if (special.is_array())
    while (specials < static_cast<int>(special.size()) && specials < static_cast<int>(pieces.size()) &&
           special[static_cast<size_t>(specials)] == pieces[static_cast<size_t>(specials)])
      ++specials;
  out.vocab = character_vocab(out.dataset, pieces, counts, specials)
                  .value_or(text::Vocab(text::VocabType::kWord, pieces, counts, specials));
  out.vocab.check(file);

  // The splits: LongTensors of ids (encode_file(ordered=True)).
  for (const char* name : {"train", "valid", "test"}) {
    const torch::Tensor* ids = nullptr;
    for (const auto& [n, t] : cache.tensors)
      if (n == name) ids = &t;
    XL_CHECK(ids, kExitDataErr,
             file << ": its " << name << " split is not a tensor of ids"
                  << (out.dataset == "lm1b" ? " (lm1b's cache holds file names: tokenize its text with the vocab instead)" : ""));
    XL_CHECK(ids->dim() == 1 && !ids->is_floating_point() && !ids->is_complex(), kExitDataErr,
             file << ": its " << name << " split is a " << ids->dim() << "-d " << ids->scalar_type() << " tensor, not ids");
    const torch::Tensor as_long = ids->to(torch::kInt64).contiguous();
    if (as_long.numel() > 0) {
      const int64_t lo = as_long.min().item<int64_t>(), hi = as_long.max().item<int64_t>();
      XL_CHECK(lo >= 0 && hi < static_cast<int64_t>(pieces.size()), kExitDataErr,
               file << ": its " << name << " split holds id " << (lo < 0 ? lo : hi) << ", outside the vocab's " << pieces.size());
    }
    h5::TokenSplit split;
    split.name = name;
    const int64_t* p = as_long.data_ptr<int64_t>();
    split.ids.assign(p, p + as_long.numel());
    split.source.name = file + ":" + name;
    out.splits.push_back(std::move(split));
  }
  return out;
}

}  // namespace xl::interop

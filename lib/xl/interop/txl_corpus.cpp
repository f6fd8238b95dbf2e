#include "xl/interop/txl_corpus.h"

#include <algorithm>
#include <optional>
#include <unordered_set>
#include <utility>

#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"
#include "xl/util/log.h"
#include "xl/util/parse.h"
#include "xl/util/torch_save_signature.h"
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

// Hugging Face converted its wt103 vocab.bin from a Python 2 pickle read as Latin-1, so each
// non-ASCII symbol is its UTF-8 bytes taken as Latin-1 characters ("EnquÃªtes";
// huggingface/transformers#271). When every symbol fits Latin-1 and some are not ASCII, and all of
// those are such bytes, they are decoded; a text in Latin-1 itself ("é" as one character) is not
// valid UTF-8 that way and stays as it is. Returns how many symbols changed.
int64_t repair_latin1_read_utf8(std::vector<std::string>* symbols) {
  std::vector<std::string> bytes;
  bytes.reserve(symbols->size());
  int64_t changed = 0;
  for (const auto& s : *symbols) {
    std::string b;
    for (size_t i = 0; i < s.size();) {
      uint32_t cp;
      const int n = utf8_decode(s, i, &cp);
      if (n <= 0 || cp > 0xff) return 0;
      b.push_back(static_cast<char>(cp));
      i += static_cast<size_t>(n);
    }
    if (b != s) {
      for (size_t i = 0; i < b.size();) {
        uint32_t cp;
        const int n = utf8_decode(b, i, &cp);
        if (n <= 0) return 0;
        i += static_cast<size_t>(n);
      }
      ++changed;
    }
    bytes.push_back(std::move(b));
  }
  if (changed > 0) *symbols = std::move(bytes);
  return changed;
}

// The vocab of the Transformer-XL Vocab whose attributes sit under `prefix` ("vocab." in a Corpus,
// "" for a Vocab or its __dict__): idx2sym in id order, the special symbols (add_special) first;
// counts where known.
text::Vocab vocab_at(const TorchFile& f, const std::string& prefix, const std::string& dataset, const std::string& file,
                     std::optional<bool> lower_case = std::nullopt) {
  auto attr = [&](const std::string& name) {
    auto it = f.attributes.find(prefix + name);
    return it == f.attributes.end() ? nlohmann::json() : it->second;
  };
  const nlohmann::json symbols = attr("idx2sym"), counter = attr("counter"), special = attr("special");
  XL_CHECK(symbols.is_array() && !symbols.empty(), kExitDataErr, file << ": its vocab has no symbols (" << prefix << "idx2sym)");
  std::vector<std::string> pieces;
  std::vector<int64_t> counts;
  std::unordered_set<std::string> seen;
  for (const auto& s : symbols) {
    XL_CHECK(s.is_string() && !s.get<std::string>().empty(), kExitDataErr,
             file << ": " << prefix << "idx2sym holds " << json_line(s) << ", not a symbol");
    XL_CHECK(seen.insert(s.get<std::string>()).second, kExitDataErr, file << ": " << prefix << "idx2sym holds " << json_line(s) << " twice");
    pieces.push_back(s.get<std::string>());
    const auto c = counter.is_object() ? counter.find(pieces.back()) : counter.end();
    counts.push_back(counter.is_object() && c != counter.end() && c->is_number_integer() ? c->get<int64_t>() : 0);
  }
  int specials = 0;
  if (special.is_array())
    while (specials < static_cast<int>(special.size()) && specials < static_cast<int>(pieces.size()) &&
           special[static_cast<size_t>(specials)] == pieces[static_cast<size_t>(specials)])
      ++specials;
  if (const int64_t n = repair_latin1_read_utf8(&pieces))
    XL_INFO(file << ": " << n << " symbols were UTF-8 read as Latin-1 (Hugging Face's wt103 vocab), decoded");
  text::Vocab vocab = character_vocab(dataset, pieces, counts, specials)
                          .value_or(text::Vocab(text::VocabType::kWord, pieces, counts, specials));
  vocab.check(file);
  // Its tokenize lowercases each line first where lower_case is set (the reference's PTB setting,
  // and its default, which enwik8 and text8 keep); xl's tokenizer keeps the case, so other text
  // would meet <unk> where the reference would not. Not for enwik8's bytes: lowercasing their
  // decimal symbols changes nothing. Hugging Face's tokenizer says it for its vocab.
  if (lower_case.value_or(attr("lower_case") == true) && vocab.type() != text::VocabType::kByte)
    XL_WARN(file << ": its " << (lower_case ? "tokenizer (tokenizer_config.json)" : "vocab")
                 << " lowercases text before looking words up (lower_case), which xl-tokenize does not: lowercase new text first");
  return vocab;
}

std::string root_class(const TorchFile& f, const std::string& path = "") {
  auto it = f.classes.find(path);
  return it == f.classes.end() ? std::string() : it->second;
}

std::string dataset_of(const TorchFile& f) {
  auto it = f.attributes.find("dataset");
  return it != f.attributes.end() && it->second.is_string() ? it->second.get<std::string>() : std::string();
}

bool is_corpus(const TorchFile& f) { return ends_with(root_class(f), "Corpus") && ends_with(root_class(f, "vocab"), "Vocab"); }

// Hugging Face's corpus.bin: a Corpus's __dict__ without its vocab (torch_pickle.h).
bool is_corpus_without_vocab(const TorchFile& f) { return root_class(f) == "dict" && !dataset_of(f).empty(); }

// "holds a pickled X" or "holds a state_dict", for refusals.
std::string what_it_holds(const TorchFile& f) {
  const std::string cls = root_class(f);
  return "holds " + (cls.empty() ? std::string("a state_dict") : "a pickled " + cls);
}

}  // namespace

text::Vocab vocab_from_torch(const TorchFile& f, const std::string& file, const std::string& dataset,
                             std::optional<bool> lower_case) {
  if (is_corpus(f)) return vocab_at(f, "vocab.", dataset_of(f), file);
  XL_CHECK(!is_corpus_without_vocab(f), kExitDataErr, file << ": a corpus without its vocab (Hugging Face's corpus.bin), not a vocab");
  const std::string cls = root_class(f);
  const bool vocab = ends_with(cls, "Vocab") || ends_with(cls, "TransfoXLTokenizer") || (cls == "dict" && f.attributes.count("idx2sym"));
  XL_CHECK(vocab, kExitDataErr,
           file << ": " << what_it_holds(f) << ", not a Transformer-XL vocab (data_utils.py's Corpus or Vocab, or Hugging Face's vocab.bin)");
  return vocab_at(f, "", dataset, file, lower_case);
}

text::Vocab import_vocab(const std::string& path, const std::string& dataset, std::optional<bool> lower_case) {
  if (h5::is_hdf5_file(path)) return h5::load_vocab(path);  // the vocab alone, not the file's bytes
  std::string bytes = io::read_text(path, io::ZipArchives::kAsStored);
  const std::string name = io::display_name(path);
  if (is_torch_zip(bytes) || is_torch_legacy(bytes) || is_plain_pickle(bytes))
    return vocab_from_torch(parse_torch_file(bytes, "", name), name, dataset, lower_case);
  return h5::vocab_of_bytes(std::move(bytes), name);
}

bool corpus_holds_vocab(const TorchFile& cache) { return !is_corpus_without_vocab(cache); }

ImportedCorpus corpus_from_cache(const TorchFile& cache, const std::string& file, const std::string& vocab_file,
                                 bool lower_case) {
  const bool without_vocab = is_corpus_without_vocab(cache);
  XL_CHECK(is_corpus(cache) || without_vocab, kExitDataErr,
           file << ": " << what_it_holds(cache)
                << ", not a Transformer-XL corpus cache (data_utils.py's Corpus with its Vocab, or Hugging Face's corpus.bin)"
                << (cache.attributes.count("idx2sym") ? "; a vocab alone serves --vocab" : ""));
  ImportedCorpus out;
  out.dataset = dataset_of(cache);
  if (without_vocab) {
    XL_CHECK(!vocab_file.empty(), kExitNoInput,
             file << ": Hugging Face's corpus.bin holds no vocab, and no vocab.bin or vocab.pkl lies beside it: give --vocab");
    out.vocab = import_vocab(vocab_file, out.dataset, lower_case);
  } else {
    out.vocab = vocab_at(cache, "vocab.", out.dataset, file);
  }

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
      XL_CHECK(lo >= 0 && hi < static_cast<int64_t>(out.vocab.size()), kExitDataErr,
               file << ": its " << name << " split holds id " << (lo < 0 ? lo : hi) << ", outside the vocab's " << out.vocab.size());
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

#include "xl/data/corpus.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "xl/text/moses.h"
#include "xl/text/segmenter.h"
#include "xl/text/tokenizer.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/parse.h"
#include "xl/util/sha256.h"

namespace xl::data {

namespace {

struct SplitSpec {
  bool fractions = false;
  std::vector<double> fraction;  // when fractions
  std::vector<int64_t> count;    // otherwise
};

SplitSpec parse_split_spec(const std::string& spec, const std::string& what) {
  const auto parts = parse::list_items(spec, what);
  XL_CHECK(!parts.empty(), kExitUsage, what << ": empty split spec");
  SplitSpec out;
  bool fractions = true, any_point = false;
  for (const auto& p : parts) {
    size_t pos = 0;
    double v = 0;
    try {
      v = std::stod(p, &pos);
    } catch (...) {
      XL_FAIL(kExitUsage, what << ": not a number: '" << p << "'");
    }
    XL_CHECK(v >= 0, kExitUsage, what << ": negative part '" << p << "'");
    // Fractions are plain numbers in [0, 1], at least one written with a point ("0.95,0.05,0"),
    // or adding up to 1 without one ("1,0,0": all to train, not a split of one token).
    if (pos != p.size() || v > 1) fractions = false;
    if (p.find('.') != std::string::npos) any_point = true;
    out.fraction.push_back(v);
  }
  const double sum = std::accumulate(out.fraction.begin(), out.fraction.end(), 0.0);
  out.fractions = fractions && (any_point || sum == 1);
  if (out.fractions) {
    XL_CHECK(std::fabs(sum - 1.0) < 1e-6, kExitUsage, what << ": fractions add up to " << sum << ", not 1");
  } else {
    for (const auto& p : parts) out.count.push_back(static_cast<int64_t>(parse::count(p, what)));
  }
  return out;
}

}  // namespace

void check_split_spec(const std::string& spec, size_t max_parts, const std::string& what) {
  SplitSpec s = parse_split_spec(spec, what);
  size_t n = s.fractions ? s.fraction.size() : s.count.size();
  XL_CHECK(n <= max_parts, kExitUsage, what << ": at most " << max_parts << " parts (train, valid, test), got " << n);
}

std::vector<int64_t> split_lengths(const std::string& spec, int64_t total) {
  SplitSpec s = parse_split_spec(spec, "--split");
  std::vector<int64_t> lengths;
  int64_t used = 0;
  if (s.fractions) {
    for (size_t i = 0; i < s.fraction.size(); ++i) {
      int64_t n = i + 1 == s.fraction.size() ? total - used : static_cast<int64_t>(std::llround(s.fraction[i] * total));
      n = std::min(n, total - used);
      lengths.push_back(n);
      used += n;
    }
    return lengths;
  }
  for (int64_t n : s.count) {
    lengths.push_back(n);
    used += n;
  }
  XL_CHECK(used <= total, kExitUsage, "--split: sizes add up to " << used << " tokens but the input has only " << total);
  if (used < total) XL_WARN("--split: the last " << (total - used) << " tokens of the input are not used");
  return lengths;
}

namespace {

const char* kSplitNames[] = {"train", "valid", "test"};

// Re-indexes ids of a provisional vocab into a vocab built from the training counts only, so that
// pieces seen only in valid/test become <unk> as they would for a user of a trained model.
text::Vocab restrict_to_train(const text::Vocab& full, std::vector<h5::TokenSplit>* splits,
                              const text::VocabOptions& opts) {
  std::vector<int64_t> train_counts(full.size(), 0);
  for (const auto& s : *splits)
    if (s.name == "train")
      for (int32_t id : s.ids) ++train_counts[static_cast<size_t>(id)];
  std::unordered_map<std::string, int64_t> counts;
  for (size_t id = static_cast<size_t>(full.specials()); id < full.size(); ++id)
    counts.emplace(full.piece(static_cast<int32_t>(id)), train_counts[id]);
  int64_t eos = full.eos_id() >= 0 ? train_counts[static_cast<size_t>(full.eos_id())] : 0;
  int64_t unk = full.unk_id() >= 0 ? train_counts[static_cast<size_t>(full.unk_id())] : 0;
  text::Vocab vocab = text::vocab_from_counts(opts, std::move(counts), eos, unk);
  std::vector<int32_t> remap(full.size());
  for (size_t id = 0; id < full.size(); ++id) {
    int32_t to = vocab.find(full.piece(static_cast<int32_t>(id)));
    remap[id] = to >= 0 ? to : vocab.unk_id();
  }
  for (auto& s : *splits) {
    int64_t unknown = 0;
    for (auto& id : s.ids) {
      int32_t to = remap[static_cast<size_t>(id)];
      if (to == vocab.unk_id() && id != full.unk_id()) ++unknown;
      id = to;
    }
    s.source.unknown += unknown;
  }
  return vocab;
}

}  // namespace

Corpus tokenize_corpus(const CorpusRequest& req) {
  Corpus corpus;
  const bool build = !req.vocab.has_value();
  // A bad spec or pretokenizer is a usage error: report it before reading anything.
  if (!req.whole_input.empty()) check_split_spec(req.split_spec, 3, "--split");
  text::check_pretokenizer(build ? req.build.type : req.vocab->type(), req.pretokenizer);
  // A char or word vocab is built from the train split: without one every piece would be <unk>.
  const bool from_train = build && req.build.type != text::VocabType::kByte;
  const std::string mode = "--mode " + text::to_string(req.build.type);
  XL_CHECK(!from_train || !req.whole_input.empty() ||
               std::any_of(req.inputs.begin(), req.inputs.end(), [](const CorpusInput& in) { return in.split == "train"; }),
           kExitUsage, mode << " builds its vocab from the train split: give --train too, or --vocab");
  std::vector<std::string> texts, names;
  std::vector<std::string_view> views;
  auto read = [&](const std::string& path) {
    texts.push_back(io::read_text(path));
    names.push_back(io::display_name(path));
    XL_INFO("read " << io::display_name(path) << ": " << texts.back().size() << " bytes");
    text::warn_byte_order_mark(texts.back(), build ? req.build.type : req.vocab->type(), names.back());
  };
  if (!req.whole_input.empty()) read(req.whole_input);
  for (const auto& in : req.inputs) read(in.path);
  std::vector<std::string> sha256s;  // of the inputs as read
  for (const auto& t : texts) sha256s.push_back(sha256_hex(t));
  std::vector<int64_t> sizes;
  for (const auto& t : texts) sizes.push_back(static_cast<int64_t>(t.size()));
  // Moses-tokenized once: the vocab and the ids then read its words as pre-tokenized text.
  if (req.pretokenizer == text::Pretokenizer::kMoses)
    for (size_t i = 0; i < texts.size(); ++i) texts[i] = text::moses_pretokenize(texts[i], names[i]);
  for (const auto& t : texts) views.emplace_back(t);

  // Without a vocab, tokenize with one that holds every piece, then keep what train supports.
  text::VocabOptions provisional;  // min_count 1, no max_size
  provisional.type = req.build.type;
  provisional.allow_invalid_utf8 = req.allow_invalid_utf8;
  provisional.pretokenizer = text::Pretokenizer::kNone;  // the texts are already its words
  corpus.vocab = build ? text::build_vocab(views, provisional, names) : *req.vocab;
  text::Tokenizer tokenizer(corpus.vocab, req.allow_invalid_utf8);

  auto encode = [&](std::string_view text, const std::string& path, h5::TokenSplit* split) {
    text::EncodeStats stats;
    tokenizer.encode(text, io::display_name(path), &split->ids, &stats);
    split->source.unknown = stats.unknown;
  };
  if (!req.whole_input.empty()) {
    corpus.source_sha256 = sha256s[0];
    corpus.source_bytes = sizes[0];
    h5::TokenSplit all;
    encode(texts[0], req.whole_input, &all);
    auto lengths = split_lengths(req.split_spec, static_cast<int64_t>(all.ids.size()));
    XL_CHECK(lengths.size() <= 3, kExitUsage, "--split: at most three parts (train, valid, test)");
    int64_t offset = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      h5::TokenSplit s;
      s.name = kSplitNames[i];
      // Train (the bulk) takes over the buffer once the later splits are copied out of it.
      if (i > 0) s.ids.assign(all.ids.begin() + offset, all.ids.begin() + offset + lengths[i]);
      s.source = {io::display_name(req.whole_input), corpus.source_sha256, corpus.source_bytes, 0};
      offset += lengths[i];
      corpus.splits.push_back(std::move(s));
    }
    if (!lengths.empty()) {
      all.ids.resize(static_cast<size_t>(lengths[0]));
      corpus.splits[0].ids = std::move(all.ids);
    }
  } else {
    for (size_t i = 0; i < req.inputs.size(); ++i) {
      h5::TokenSplit s;
      s.name = req.inputs[i].split;
      encode(texts[i], req.inputs[i].path, &s);
      s.source.name = io::display_name(req.inputs[i].path);
      s.source.sha256 = sha256s[i];
      s.source.bytes = sizes[i];
      corpus.splits.push_back(std::move(s));
    }
  }
  if (from_train) {
    const auto train = std::find_if(corpus.splits.begin(), corpus.splits.end(),
                                    [](const h5::TokenSplit& split) { return split.name == "train"; });
    const bool whole = !req.whole_input.empty();  // or a --train input, which `train` is then
    XL_CHECK(whole ? corpus.source_bytes > 0 : !train->ids.empty(), kExitDataErr,
             (whole ? io::display_name(req.whole_input) : train->source.name)
                 << ": no text to build the vocab from (" << mode << ")");
    XL_CHECK(train != corpus.splits.end() && !train->ids.empty(), kExitUsage,
             "--split " << req.split_spec << " leaves the train split empty, and " << mode << " builds its vocab from it");
    text::VocabOptions final_opts = provisional;
    final_opts.min_count = req.build.min_count;
    final_opts.max_size = req.build.max_size;
    corpus.vocab = restrict_to_train(corpus.vocab, &corpus.splits, final_opts);
    text::check_vocab_has_pieces(corpus.vocab, final_opts, train->source.name, req.build.origins);
  }
  // The vocab records how this text became its words, for the tools that decode it or read more.
  corpus.vocab.set_pretokenizer(req.pretokenizer);
  // One input cut by token counts: the unknown pieces of each split (invalid UTF-8 bytes included)
  // are the <unk> ids that landed in it.
  if (!req.whole_input.empty() && corpus.vocab.unk_id() >= 0)
    for (auto& s : corpus.splits)
      s.source.unknown = std::count(s.ids.begin(), s.ids.end(), corpus.vocab.unk_id());
  return corpus;
}

}  // namespace xl::data

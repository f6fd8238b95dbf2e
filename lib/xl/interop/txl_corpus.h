// Transformer-XL's corpus cache (pytorch/data_utils.py's cache.pt: torch.save of its Corpus, the
// vocab and each split's ids) and its vocabs as xl's, so that xl trains and evaluates on the very
// ids the PyTorch code uses, with the vocab its models were trained with.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "xl/h5/tokens_file.h"
#include "xl/interop/torch_pickle.h"
#include "xl/text/vocab.h"

namespace xl::interop {

struct ImportedCorpus {
  std::string dataset;  // ptb, wt2, wt103, enwik8, text8
  // The symbols in id order, the Vocab's specials first: a word vocab, or for enwik8 and text8 a
  // byte and a char vocab (symbols of one character each).
  text::Vocab vocab;
  std::vector<h5::TokenSplit> splits;  // train, valid, test
};

// The vocab of a parsed Transformer-XL Corpus (cache.pt), Vocab (torch.save(corpus.vocab, f)) or
// Vocab's __dict__ (Hugging Face's vocab.bin; its Latin-1-read UTF-8 symbols are decoded), as
// corpus_from_cache makes it; `dataset` names the corpus a Vocab alone is of (enwik8 and text8 make
// byte and char vocabs). A vocab that lowercases text first is named in a warning: its lower_case,
// or `lower_case` where its tokenizer says (Hugging Face's tokenizer_config.json). Fails with 65
// naming the file for anything else.
text::Vocab vocab_from_torch(const TorchFile& f, const std::string& file, const std::string& dataset = "",
                             std::optional<bool> lower_case = std::nullopt);

// What xl-import-torch --vocab takes: what h5::load_vocab reads, or a torch.save file holding a
// Transformer-XL vocab (vocab_from_torch). "-" reads stdin.
text::Vocab import_vocab(const std::string& path, const std::string& dataset = "",
                         std::optional<bool> lower_case = std::nullopt);

// Whether a parsed corpus holds its vocab (cache.pt) or leaves it to a file beside it (Hugging
// Face's corpus.bin: a Corpus's __dict__ without the vocab, whose splits may be NumPy arrays, as
// its converter took them from the TensorFlow code's corpus).
bool corpus_holds_vocab(const TorchFile& cache);

// The corpus of a parsed cache.pt, or of a corpus.bin with its vocab read from `vocab_file` (a
// Vocab's __dict__: Hugging Face's vocab.bin or vocab.pkl, whose tokenizer lowercases where
// `lower_case` says; 66 naming the file when none is given).
// Fails with 65 naming the file: another object, a vocab without symbols, a split that is not a 1-D
// integer tensor of ids inside the vocab (lm1b's cache holds file names instead of its training ids).
ImportedCorpus corpus_from_cache(const TorchFile& cache, const std::string& file, const std::string& vocab_file = "",
                                 bool lower_case = false);

}  // namespace xl::interop

// Transformer-XL's corpus cache (pytorch/data_utils.py's cache.pt: torch.save of its Corpus, the
// vocab and each split's ids) as an xl tokens file, so that xl trains and evaluates on the very
// ids the PyTorch code uses, with the vocab its models were trained with.
#pragma once
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

// The corpus of a parsed cache.pt. Fails with 65 naming the file: another object, a vocab without
// symbols, a split that is not a 1-D integer tensor of ids inside the vocab (lm1b's cache holds
// file names instead of its training ids).
ImportedCorpus corpus_from_cache(const TorchFile& cache, const std::string& file);

}  // namespace xl::interop

// Moses tokenization of raw text, as Hugging Face's TransfoXL tokenizer does it before looking
// words up (its moses_pipeline): sacremoses' English punctuation normaliser, its tokenizer with
// dashes split ("side @-@ scrolled") and no XML escapes, then numbers' separators split
// ("23 @,@ 000", "1 @.@ 80"); <unk>, <eos> and <formula> stay whole.
#pragma once
#include <string>
#include <vector>

namespace xl::text {

// The words of one line (code points, no line end), in UTF-8.
std::vector<std::string> moses_tokenize(std::u32string line);

}  // namespace xl::text

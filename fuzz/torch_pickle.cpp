// The readers behind xl-import-torch, torch.save's (zip archive + pickle, parsed by hand) and
// safetensors', chosen by the first bytes as the tool chooses: any bytes are refused cleanly, or
// give named tensors (of a state_dict or a pickled module) whose Transformer-XL config is inferred
// and imported, or a corpus cache's vocab and splits, or a vocab (Hugging Face's vocab.bin or
// vocab.pkl), or Hugging Face's corpus.bin (its splits NumPy arrays).
#include "fuzz_support.h"
#include "xl/interop/torch_pickle.h"
#include "xl/interop/txl_corpus.h"
#include "xl/interop/txl_state_dict.h"
#include "xl/util/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  xl::fuzz::expect_clean_refusal([&] {
    const auto [contents, tied] = xl::interop::parse_weights_file(bytes, "", "fuzz.pt");
    const auto root = contents.classes.find("");
    if (root != contents.classes.end() && xl::parse::ends_with(root->second, "Corpus")) {
      (void)xl::interop::corpus_from_cache(contents, "fuzz.pt");
      return;
    }
    if (!xl::interop::corpus_holds_vocab(contents)) {  // Hugging Face's corpus.bin: its ids (NumPy's bytes in place) read
      for (const auto& [name, tensor] : contents.tensors)
        if (tensor.numel() > 0) (void)tensor.to(torch::kDouble).sum().item<double>();
      return;
    }
    if (root != contents.classes.end() && (root->second == "dict" || xl::parse::ends_with(root->second, "Vocab"))) {
      (void)xl::interop::vocab_from_torch(contents, "fuzz.pt");
      return;
    }
    xl::interop::TorchHyperParams params;
    const auto state_dict =
        contents.classes.empty() ? contents.tensors : xl::interop::module_state_dict(contents, &params, "fuzz.pt");
    for (const auto& [name, tensor] : state_dict)
      if (!tensor.defined()) xl::fuzz::finding("undefined tensor " + name);
    const auto cfg = xl::interop::torch_config(state_dict, params, "fuzz.pt");
    (void)xl::interop::import_torch_tensors(state_dict, cfg, "fuzz.pt", tied);
  });
  return 0;
}

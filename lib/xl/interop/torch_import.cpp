#include "xl/interop/torch_import.h"

#include <algorithm>
#include <iostream>
#include <optional>

#include "xl/checkpoint/checkpoint.h"
#include "xl/h5/tokens_file.h"
#include "xl/interop/hf_model_dir.h"
#include "xl/interop/torch_pickle.h"
#include "xl/interop/txl_corpus.h"
#include "xl/interop/zip_check.h"
#include "xl/model/model_io.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"

namespace xl::interop {
namespace {

// The flags go to stdout unless the state_dict itself does.
void print_flags(const model::ModelConfig& cfg, bool to_stderr) {
  std::ostream& os = to_stderr ? std::cerr : std::cout;
  os << "# xl-import-torch flags:\n"
     << import_flags(cfg) << "\n"
     << "# PyTorch Transformer-XL (pytorch/mem_transformer.py):\n"
     << pytorch_constructor(cfg) << "\n";
  os.flush();
}

void export_state_dict(const TorchImportRequest& r) {
  const auto model = model::load_model(r.input).model;
  const std::string display = io::display_name(r.input);
  auto exported = export_torch(model, r.untie_r, display);
  io::AtomicOutput out(r.output, r.force, true);
  write_torch_state_dict(exported.state_dict, out.stream());
  out.commit();
  XL_INFO("wrote " << exported.state_dict.size() << " tensors to " << io::display_name(r.output));
  print_flags(exported.config, out.to_stdout());
}

// Transformer-XL's corpus cache, or Hugging Face's corpus.bin and its vocab -> an xl tokens file
// with its vocab and ids.
void import_corpus(const TorchImportRequest& r) {
  const std::string path = io::is_dir(r.input) ? hf_corpus_file(r.input) : r.input;
  const std::string display = io::display_name(path);
  h5::OutputFile out(r.output, r.force);  // fail early on an unwritable output
  const auto cache = read_torch_file(path);
  std::string vocab = r.vocab;
  const bool holds_vocab = corpus_holds_vocab(cache);
  XL_CHECK(vocab.empty() || !holds_vocab, kExitUsage, "--vocab does not apply to " << display << " (the cache holds its vocab)");
  // Hugging Face's: the vocab beside it, as the hub keeps them, and its tokenizer's lower_case.
  const bool beside = !holds_vocab && !io::is_stdio(path);
  const std::string dir = beside ? path.substr(0, path.find_last_of('/') + 1) : "";
  if (beside && vocab.empty()) vocab = hf_vocab_file(dir);
  const auto corpus = corpus_from_cache(cache, display, vocab, beside && hf_lower_case(dir));
  h5::TokensMeta meta;
  meta.created_by = std::string("xl-import-torch ") + XL_VERSION;
  meta.command_line = r.command_line;
  h5::write_tokens(out.file(), corpus.vocab, corpus.splits, meta);
  out.commit();
  XL_INFO(display << ": " << (corpus.dataset.empty() ? "a" : corpus.dataset) << " corpus, "
                  << text::to_string(corpus.vocab.type()) << " vocab of " << corpus.vocab.size()
                  << " (" << corpus.vocab.specials() << " special), train " << corpus.splits[0].ids.size() << ", valid "
                  << corpus.splits[1].ids.size() << ", test " << corpus.splits[2].ids.size() << " tokens");
}

// DataParallel writes module.<name>, Hugging Face's TransfoXLLMHeadModel transformer.<name>
// beside crit.<name>: strips such a prefix, or the one asked for.
void strip_prefix(checkpoint::TensorList& sd, std::string prefix) {
  auto all_start = [&](std::initializer_list<const char*> heads) {
    return !sd.empty() && std::all_of(sd.begin(), sd.end(), [&](const auto& p) {
      return std::any_of(heads.begin(), heads.end(), [&](const char* h) { return p.first.rfind(h, 0) == 0; });
    });
  };
  if (prefix.empty() && all_start({"module."})) prefix = "module.";
  if (prefix.empty() && all_start({"transformer.", "crit."}) && !all_start({"crit."})) prefix = "transformer.";
  if (!prefix.empty())
    for (auto& [name, t] : sd)
      if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
}

void import_model(const TorchImportRequest& r) {
  TorchHyperParams params = r.params;
  // A Hugging Face model directory: its state_dict (one file or shards), config.json and vocab.
  std::optional<HfModelDir> hf;
  std::string vocab_path = r.vocab;
  if (io::is_dir(r.input)) {
    hf = hf_model_dir(r.input);
    if (vocab_path.empty()) vocab_path = hf->vocab;
    hf_config_params(hf->config, &params, hf->config_file);
  }
  XL_CHECK(!vocab_path.empty(), kExitUsage, "give --vocab FILE: the model's vocab, which the checkpoint embeds");
  const std::string display = io::display_name(hf ? hf->weights : r.input);
  // The tensors, not the file's bytes beside them (a wt103 model's are 1.1 GB).
  auto [contents, tied] = hf ? read_hf_weights(*hf, r.key) : read_weights_file(r.input, r.key);
  const text::Vocab vocab = import_vocab(vocab_path, "", hf ? std::optional<bool>(hf->lower_case) : std::nullopt);
  // A whole pickled model also says what its tensors cannot (pre_lnorm, same_length, ...).
  auto sd = contents.classes.empty() ? contents.tensors : module_state_dict(contents, &params, display);
  strip_prefix(sd, r.prefix);
  auto ckpt = import_torch_checkpoint(sd, params, vocab, display, tied);
  ckpt.state.command_line = r.command_line;
  checkpoint::save(r.output, ckpt, r.force);
  auto cfg = model::ModelConfig::from_json(ckpt.model_config, display);
  XL_INFO("imported " << sd.size() << " tensors (" << ckpt.model.size() << " after tying) as " << import_flags(cfg));
  // Hugging Face's tokenizer Moses-tokenizes what it reads; WikiText is tokenized already.
  if (hf && vocab.type() == text::VocabType::kWord)
    XL_INFO("raw text meets this vocab as Hugging Face's tokenizer gives it with --pretokenize moses "
            "(xl-tokenize, xl-generate); WikiText's .tokens files need none");
}

}  // namespace

void run_torch_import(const TorchImportRequest& request) {
  set_zip_checks(request.verify_crc);
  switch (request.direction) {
    case ImportDirection::kModel: return import_model(request);
    case ImportDirection::kCorpus: return import_corpus(request);
    case ImportDirection::kExport: return export_state_dict(request);
  }
}

}  // namespace xl::interop

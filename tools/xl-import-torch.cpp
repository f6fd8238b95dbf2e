// xl-import-torch: a PyTorch Transformer-XL model or state_dict -> an xl checkpoint, and back with --export.
#include <algorithm>
#include <iostream>
#include <optional>

#include "xl/checkpoint/checkpoint.h"
#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/compute/torch_process.h"
#include "xl/h5/tokens_file.h"
#include "xl/interop/hf_model_dir.h"
#include "xl/interop/torch_pickle.h"
#include "xl/interop/txl_corpus.h"
#include "xl/interop/txl_state_dict.h"
#include "xl/model/model_io.h"
#include "xl/options/model_options.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/parse.h"

namespace po = xl::cli::po;

namespace {

// What the user said about the PyTorch model (the rest is read off the tensors).
xl::interop::TorchHyperParams hyper_params(const xl::cli::Options& cli) {
  const auto given = xl::options::given_model(cli);
  const auto& c = given.config;
  xl::interop::TorchHyperParams h;
  if (cli.has("n-token")) h.n_token = cli.get<int64_t>("n-token");
  auto take = [&](const char* field, auto& out, const auto& value) {
    if (given.has(field)) out = value;
  };
  take("n_layer", h.n_layer, c.n_layer);
  take("d_model", h.d_model, c.d_model);
  take("n_head", h.n_head, c.n_head);
  take("d_head", h.d_head, c.d_head);
  take("d_inner", h.d_inner, c.d_inner);
  take("d_embed", h.d_embed, c.d_embed);
  take("div_val", h.div_val, c.div_val);
  take("clamp_len", h.clamp_len, c.clamp_len);
  take("cutoffs", h.cutoffs, c.cutoffs);
  take("tie_projs", h.tie_projs, c.tie_projs);
  take("tie_weight", h.tie_weight, c.tie_weight);
  take("untie_r", h.untie_r, c.untie_r);
  take("pre_lnorm", h.pre_lnorm, c.pre_lnorm);
  take("same_length", h.same_length, c.same_length);
  take("dropout", h.dropout, c.dropout);
  take("dropatt", h.dropatt, c.dropatt);
  return h;
}

// The flags go to stdout unless the state_dict itself does.
void print_flags(const xl::model::ModelConfig& cfg, bool to_stderr) {
  std::ostream& os = to_stderr ? std::cerr : std::cout;
  os << "# xl-import-torch flags:\n"
     << xl::interop::import_flags(cfg) << "\n"
     << "# PyTorch Transformer-XL (pytorch/mem_transformer.py):\n"
     << xl::interop::pytorch_constructor(cfg) << "\n";
  os.flush();
}

int export_state_dict(const xl::cli::Options& cli, const std::string& input) {
  const auto model = xl::model::load_model(input).model;
  const std::string display = xl::io::display_name(input);
  auto exported = xl::interop::export_torch(model, cli.has("untie-r") && cli.get<bool>("untie-r"), display);
  xl::io::AtomicOutput out(cli.output(), cli.force(), true);
  xl::interop::write_torch_state_dict(exported.state_dict, out.stream());
  out.commit();
  XL_INFO("wrote " << exported.state_dict.size() << " tensors to " << xl::io::display_name(cli.output()));
  print_flags(exported.config, out.to_stdout());
  return 0;
}

// Transformer-XL's corpus cache, or Hugging Face's corpus.bin and its vocab -> an xl tokens file
// with its vocab and ids.
int import_corpus(const xl::cli::Options& cli, const std::string& input, int argc, char** argv) {
  const std::string path = xl::io::is_dir(input) ? xl::interop::hf_corpus_file(input) : input;
  const std::string display = xl::io::display_name(path);
  xl::h5::OutputFile out(cli.output(), cli.force());  // fail early on an unwritable output
  const auto cache = xl::interop::read_torch_file(path);
  std::string vocab = cli.has("vocab") ? cli.get<std::string>("vocab") : "";
  const bool holds_vocab = xl::interop::corpus_holds_vocab(cache);
  XL_CHECK(vocab.empty() || !holds_vocab, xl::kExitUsage, "--vocab does not apply to " << display << " (the cache holds its vocab)");
  // Hugging Face's: the vocab beside it, as the hub keeps them, and its tokenizer's lower_case.
  const bool beside = !holds_vocab && !xl::io::is_stdio(path);
  const std::string dir = beside ? path.substr(0, path.find_last_of('/') + 1) : "";
  if (beside && vocab.empty()) vocab = xl::interop::hf_vocab_file(dir);
  const auto corpus = xl::interop::corpus_from_cache(cache, display, vocab, beside && xl::interop::hf_lower_case(dir));
  xl::h5::TokensMeta meta;
  meta.created_by = std::string("xl-import-torch ") + XL_VERSION;
  meta.command_line = xl::cli::command_line(argc, argv);
  xl::h5::write_tokens(out.file(), corpus.vocab, corpus.splits, meta);
  out.commit();
  XL_INFO(display << ": " << (corpus.dataset.empty() ? "a" : corpus.dataset) << " corpus, "
                  << xl::text::to_string(corpus.vocab.type()) << " vocab of " << corpus.vocab.size()
                  << " (" << corpus.vocab.specials() << " special), train " << corpus.splits[0].ids.size() << ", valid "
                  << corpus.splits[1].ids.size() << ", test " << corpus.splits[2].ids.size() << " tokens");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl-import-torch", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli(
        {"xl-import-torch", "Convert a PyTorch Transformer-XL model, state_dict or corpus cache into xl's files, or back.",
         "[OPTIONS] (--vocab FILE | --export | --corpus) INPUT -o OUTPUT",
         "Reads INPUT, a file written by torch.save(model.state_dict(), f) or torch.save(model, f) (train.py's\n"
         "model.pt) with the PyTorch Transformer-XL (kimiyoung/transformer-xl, pytorch/mem_transformer.py; the\n"
         "zip format of PyTorch 1.6 and later or the legacy one before it), without Python, and writes an xl\n"
         "checkpoint (phase \"imported\") with the vocab embedded. The vocab (--vocab: a TSV, what a tokens file\n"
         "or checkpoint embeds, Transformer-XL's cache.pt, or Hugging Face's vocab.bin or vocab.pkl, whose\n"
         "symbols its converter stored as UTF-8 read as Latin-1 and which are decoded) must list the model's\n"
         "symbols in its id order. The model flags are read off the tensor shapes where they can be (layers,\n"
         "widths, heads, clusters, tying); each one given is checked against the file, and a mismatch, an\n"
         "unknown or missing tensor, or a wrong shape stops with exit 65 naming it. A whole model also gives\n"
         "what the shapes cannot show (--pre-lnorm, --same-length, --clamp-len, --cutoffs of a div-val 1 model,\n"
         "dropouts); with a state_dict those must be given as the model was trained. Tied tensors, stored under\n"
         "both names by PyTorch, must be equal and are kept once. INPUT may also be a safetensors file (Hugging\n"
         "Face's format, which lists a tied tensor once), or a Hugging Face TransfoXL directory\n"
         "(save_pretrained's, or the hub's transfo-xl-wt103): its model.safetensors or pytorch_model.bin (or\n"
         "their shards, each tensor from the shard the index names) is read with what its config.json says\n"
         "(tie_projs, and tie_word_embeddings, true when absent as transformers takes it: a tensor the file lacks\n"
         "is then taken as tied only where they say so), and its vocab.bin or vocab.pkl serves when --vocab is\n"
         "not given.\n"
         "\n"
         "--corpus writes Transformer-XL's corpus cache INPUT (data_utils.py's cache.pt: its vocab and the ids\n"
         "of each split) as an xl tokens file, so that xl reads the very ids the PyTorch code trained on; its\n"
         "vocab then serves --vocab. The enwik8 and text8 caches, whose symbols are one character each, become\n"
         "a byte and a char vocab in the same id order (the tools report bpc, as Transformer-XL does). INPUT may\n"
         "also be Hugging Face's corpus.bin (the hub's transfo-xl-wt103 holds it: the ids, often NumPy arrays,\n"
         "without the vocab), or the directory holding it; its vocab is the vocab.bin or vocab.pkl beside it,\n"
         "or --vocab.\n"
         "\n"
         "--export writes the xl checkpoint INPUT as a state_dict that MemTransformerLM.load_state_dict() takes\n"
         "(tied tensors under both names; torch.load reads it with weights_only=True, PyTorch 2.6's default) and\n"
         "prints the matching flags and constructor call. Per-layer u, v biases (untie_r, or pruned heads) need\n"
         "--untie-r true (a target with per-layer biases) unless all layers hold the same ones; layers with\n"
         "different head counts cannot be exported (exit 65).",
         "  xl-import-torch --corpus data/enwik8/cache.pt -o enwik8-txl.h5\n"
         "  xl-import-torch --vocab enwik8-txl.h5 LM-TFM-enwik8/model.pt -o enwik8-base.h5\n"
         "  xl-import-torch --vocab enwik8-txl.h5 --same-length true --clamp-len 820 enwik8-base-sd.pt -o enwik8-base.h5\n"
         "  xl-import-torch --corpus data/wikitext-103/cache.pt -o wt103.h5\n"
         "  xl-import-torch --vocab wt103.h5 --cutoffs 20000,40000,200000 wt103-base-sd.pt -o wt103-base.h5\n"
         "  xl-import-torch transfo-xl-wt103/ -o wt103-hf.h5\n"
         "  xl-import-torch --corpus transfo-xl-wt103/ -o wt103-hf-corpus.h5\n"
         "  xl-import-torch --vocab v.tsv --key model_state nvidia-checkpoint.pt -o model.h5\n"
         "  xl-import-torch --export --untie-r true pruned.h5 -o pruned.pt"});
    cli.add("Input")
        ("input", po::value<std::string>()->default_value("-"), "the model or state_dict (torch.save or safetensors), or a Hugging Face directory (the checkpoint with --export); - is stdin")
        ("vocab", po::value<std::string>(), "vocab TSV from xl-build-vocab (man 5 xl-vocab), or a tokens file or checkpoint whose vocab to use")
        ("key", po::value<std::string>(), "the state_dict or model is entry KEY of a checkpoint dict (model_state: NVIDIA's)")
        ("prefix", po::value<std::string>(), "strip PREFIX from the tensor names (module.: DataParallel, transformer.: Hugging Face; both found by themselves)")
        ("export", po::bool_switch(), "write the xl checkpoint INPUT as a PyTorch state_dict")
        ("corpus", po::bool_switch(), "write the corpus cache INPUT (data_utils.py's cache.pt, or Hugging Face's corpus.bin or its directory) as a tokens file");
    cli.add("Vocab size")("n-token", po::value<int64_t>(), "vocab size (read off the tensors when left out)");
    // The model options of every tool: read off the tensors when left out, checked when given.
    // pre-lnorm, same-length and clamp-len are not visible in the tensors; with --export,
    // --untie-r true means the target has per-layer biases.
    xl::options::add_model_options(cli, xl::options::ModelDefaults::kUnset);
    cli.positional("input", 1);
    cli.add_output("the checkpoint (the state_dict with --export)");
    cli.files({"input", "vocab", "export", "corpus"});
    if (!cli.parse(argc, argv)) return 0;

    const std::string input = cli.get<std::string>("input");
    XL_CHECK(!(cli.get<bool>("export") && cli.get<bool>("corpus")), xl::kExitUsage, "give --export or --corpus, not both");
    if (cli.get<bool>("corpus")) {
      for (const char* flag : {"key", "prefix", "n-token"})
        XL_CHECK(!cli.given(flag), xl::kExitUsage, "--" << flag << " does not apply to --corpus (a corpus has no model)");
      XL_CHECK(xl::options::given_model(cli).fields.empty(), xl::kExitUsage, "model flags do not apply to --corpus (a corpus has no model)");
      return import_corpus(cli, input, argc, argv);
    }
    if (cli.get<bool>("export")) {
      for (const char* flag : {"vocab", "key", "prefix", "n-token"})
        XL_CHECK(!cli.given(flag), xl::kExitUsage, "--" << flag << " does not apply to --export (the checkpoint has its config)");
      for (const auto& field : xl::options::given_model(cli).fields)
        XL_CHECK(field == "untie_r", xl::kExitUsage,
                 "--" << xl::parse::kebab_case(field) << " does not apply to --export (the checkpoint has its config)");
      return export_state_dict(cli, input);
    }

    auto params = hyper_params(cli);
    const std::string key = cli.has("key") ? cli.get<std::string>("key") : "";
    // A Hugging Face model directory: its state_dict (one file or shards), config.json and vocab.
    std::optional<xl::interop::HfModelDir> hf;
    std::string vocab_path = cli.has("vocab") ? cli.get<std::string>("vocab") : "";
    if (xl::io::is_dir(input)) {
      hf = xl::interop::hf_model_dir(input);
      if (vocab_path.empty()) vocab_path = hf->vocab;
      xl::interop::hf_config_params(hf->config, &params, hf->config_file);
    }
    XL_CHECK(!vocab_path.empty(), xl::kExitUsage, "give --vocab FILE: the model's vocab, which the checkpoint embeds");
    const std::string display = xl::io::display_name(hf ? hf->weights : input);
    // The tensors, not the file's bytes beside them (a wt103 model's are 1.1 GB).
    auto [contents, tied] = hf ? xl::interop::read_hf_weights(*hf, key) : xl::interop::read_weights_file(input, key);
    const xl::text::Vocab vocab =
        xl::interop::import_vocab(vocab_path, "", hf ? std::optional<bool>(hf->lower_case) : std::nullopt);
    // A whole pickled model also says what its tensors cannot (pre_lnorm, same_length, ...).
    auto sd = contents.classes.empty() ? contents.tensors : xl::interop::module_state_dict(contents, &params, display);
    // DataParallel writes module.<name>, Hugging Face's TransfoXLLMHeadModel transformer.<name>
    // beside crit.<name>: strip such a prefix, or the one asked for.
    std::string prefix = cli.has("prefix") ? cli.get<std::string>("prefix") : "";
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
    auto ckpt = xl::interop::import_torch_checkpoint(sd, params, vocab, display, tied);
    ckpt.state.command_line = xl::cli::command_line(argc, argv);
    xl::checkpoint::save(cli.output(), ckpt, cli.force());
    auto cfg = xl::model::ModelConfig::from_json(ckpt.model_config, display);
    XL_INFO("imported " << sd.size() << " tensors (" << ckpt.model.size() << " after tying) as " << xl::interop::import_flags(cfg));
    // Hugging Face's tokenizer Moses-tokenizes what it reads; WikiText is tokenized already.
    if (hf && vocab.type() == xl::text::VocabType::kWord)
      XL_INFO("raw text meets this vocab as Hugging Face's tokenizer gives it with --pretokenize moses "
              "(xl-tokenize, xl-generate); WikiText's .tokens files need none");
    return 0;
  });
}

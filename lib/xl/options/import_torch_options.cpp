#include "xl/options/import_torch_options.h"

#include "xl/options/model_options.h"
#include "xl/util/error.h"
#include "xl/util/parse.h"

namespace xl::options {
namespace po = cli::po;
namespace {

// What the user said about the PyTorch model (the rest is read off the tensors).
interop::TorchHyperParams hyper_params(const cli::Options& cli) {
  const auto given = given_model(cli);
  const auto& c = given.config;
  interop::TorchHyperParams h;
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

}  // namespace

void add_import_torch_options(cli::Options& cli) {
  cli.add("Input")
      ("input", po::value<std::string>()->default_value("-"), "the model or state_dict (torch.save or safetensors), or a Hugging Face directory (the checkpoint with --export); - is stdin")
      ("vocab", po::value<std::string>(), "vocab TSV from xl-build-vocab (man 5 xl-vocab), or a tokens file or checkpoint whose vocab to use")
      ("key", po::value<std::string>(), "the state_dict or model is entry KEY of a checkpoint dict (model_state: NVIDIA's)")
      ("prefix", po::value<std::string>(), "strip PREFIX from the tensor names (module.: DataParallel, transformer.: Hugging Face; both found by themselves)")
      ("export", po::bool_switch(), "write the xl checkpoint INPUT as a PyTorch state_dict")
      ("corpus", po::bool_switch(), "write the corpus cache INPUT (data_utils.py's cache.pt, or Hugging Face's corpus.bin or its directory) as a tokens file")
      ("no-verify-crc", po::bool_switch(), "read a torch.save or .bin file without checking its entries' CRC-32s (for a file known to be fine)");
  cli.add("Vocab size")("n-token", po::value<int64_t>(), "vocab size (read off the tensors when left out)");
  // The model options of every tool: read off the tensors when left out, checked when given.
  // pre-lnorm, same-length and clamp-len are not visible in the tensors; with --export,
  // --untie-r true means the target has per-layer biases.
  add_model_options(cli, ModelDefaults::kUnset);
  cli.positional("input", 1);
  cli.add_output("the checkpoint (the state_dict with --export)");
  cli.files({"input", "vocab", "export", "corpus"});
}

interop::TorchImportRequest torch_import_request(const cli::Options& cli, int argc, char** argv) {
  interop::TorchImportRequest r;
  r.input = cli.get<std::string>("input");
  r.output = cli.output();
  r.force = cli.force();
  r.command_line = cli::command_line(argc, argv);
  r.verify_crc = !cli.get<bool>("no-verify-crc");
  r.vocab = cli.has("vocab") ? cli.get<std::string>("vocab") : "";
  XL_CHECK(!(cli.get<bool>("export") && cli.get<bool>("corpus")), kExitUsage, "give --export or --corpus, not both");
  if (cli.get<bool>("corpus")) {
    for (const char* flag : {"key", "prefix", "n-token"})
      XL_CHECK(!cli.given(flag), kExitUsage, "--" << flag << " does not apply to --corpus (a corpus has no model)");
    XL_CHECK(given_model(cli).fields.empty(), kExitUsage, "model flags do not apply to --corpus (a corpus has no model)");
    r.direction = interop::ImportDirection::kCorpus;
    return r;
  }
  if (cli.get<bool>("export")) {
    for (const char* flag : {"vocab", "key", "prefix", "n-token"})
      XL_CHECK(!cli.given(flag), kExitUsage, "--" << flag << " does not apply to --export (the checkpoint has its config)");
    for (const auto& field : given_model(cli).fields)
      XL_CHECK(field == "untie_r", kExitUsage,
               "--" << parse::kebab_case(field) << " does not apply to --export (the checkpoint has its config)");
    r.direction = interop::ImportDirection::kExport;
    r.untie_r = cli.has("untie-r") && cli.get<bool>("untie-r");
    return r;
  }
  r.params = hyper_params(cli);
  r.key = cli.has("key") ? cli.get<std::string>("key") : "";
  r.prefix = cli.has("prefix") ? cli.get<std::string>("prefix") : "";
  return r;
}

}  // namespace xl::options

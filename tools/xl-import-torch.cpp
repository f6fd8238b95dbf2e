// xl-import-torch: a PyTorch Transformer-XL state_dict -> an xl checkpoint, and back with --export.
#include <algorithm>
#include <iostream>

#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/h5/checkpoint.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/torch_import.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"

namespace po = xl::cli::po;

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : text + ",") {
    if (ch == ',' || ch == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return out;
}

std::vector<int64_t> parse_ints(const std::string& text, const std::string& flag) {
  std::vector<int64_t> out;
  for (const auto& s : split_list(text)) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (...) {
    }
    XL_CHECK(used == s.size() && used > 0, xl::kExitUsage, "--" << flag << ": '" << s << "' is not an integer");
    out.push_back(v);
  }
  return out;
}

bool parse_bool(const std::string& s, const std::string& flag) {
  for (const char* t : {"1", "true", "True", "T", "yes", "on"})
    if (s == t) return true;
  for (const char* f : {"0", "false", "False", "F", "no", "off"})
    if (s == f) return false;
  XL_FAIL(xl::kExitUsage, "--" << flag << ": '" << s << "' is not a boolean (use 1/0, true/false or T/F)");
}

xl::model::TorchHyperParams hyper_params(const xl::cli::Options& cli) {
  xl::model::TorchHyperParams h;
  auto opt_int = [&](const char* name, std::optional<int64_t>& field) {
    if (cli.has(name)) field = cli.get<int64_t>(name);
  };
  // Switches: given means true; left out means "read it off the tensors" (or PyTorch's default).
  auto opt_bool = [&](const char* name, std::optional<bool>& field) {
    if (cli.given(name) && cli.get<bool>(name)) field = true;
  };
  opt_int("n-token", h.n_token);
  opt_int("n-layer", h.n_layer);
  opt_int("d-model", h.d_model);
  opt_int("n-head", h.n_head);
  opt_int("d-head", h.d_head);
  opt_int("d-inner", h.d_inner);
  opt_int("d-embed", h.d_embed);
  opt_int("div-val", h.div_val);
  opt_int("clamp-len", h.clamp_len);
  opt_bool("tie-weight", h.tie_weight);
  if (cli.given("not-tied") && cli.get<bool>("not-tied")) {
    XL_CHECK(!h.tie_weight, xl::kExitUsage, "give --tie-weight or --not-tied, not both");
    h.tie_weight = false;
  }
  opt_bool("untie-r", h.untie_r);
  opt_bool("pre-lnorm", h.pre_lnorm);
  opt_bool("same-length", h.same_length);
  if (cli.has("cutoffs")) h.cutoffs = parse_ints(cli.get<std::string>("cutoffs"), "cutoffs");
  if (cli.has("tie-projs")) {
    std::vector<bool> v;
    for (const auto& s : split_list(cli.get<std::string>("tie-projs"))) v.push_back(parse_bool(s, "tie-projs"));
    h.tie_projs = v;
  }
  if (cli.has("dropout")) h.dropout = cli.get<double>("dropout");
  if (cli.has("dropatt")) h.dropatt = cli.get<double>("dropatt");
  return h;
}

// The flags go to stdout unless the state_dict itself does.
void print_flags(const xl::model::ModelConfig& cfg, bool to_stderr) {
  std::ostream& os = to_stderr ? std::cerr : std::cout;
  os << "# xl-import-torch flags:\n"
     << xl::model::import_flags(cfg) << "\n"
     << "# PyTorch Transformer-XL (pytorch/mem_transformer.py):\n"
     << xl::model::pytorch_constructor(cfg) << "\n";
  os.flush();
}

int export_state_dict(const xl::cli::Options& cli, const std::string& input) {
  auto ckpt = xl::h5::load_checkpoint(input);
  const std::string display = xl::io::display_name(input);
  auto exported = xl::model::export_torch(ckpt, cli.get<bool>("untie-r"), display);
  xl::io::AtomicOutput out(cli.output(), cli.force(), true);
  out.stream() << xl::model::torch_state_dict_bytes(exported.state_dict);
  out.commit();
  XL_INFO("wrote " << exported.state_dict.size() << " tensors to " << xl::io::display_name(cli.output()));
  print_flags(exported.config, out.to_stdout());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return xl::cli::run_tool("xl-import-torch", argc, argv, xl::cli::Runtime::kTorch, [](int argc, char** argv) {
    xl::cli::Options cli(
        {"xl-import-torch", "Convert a PyTorch Transformer-XL state_dict into an xl checkpoint, or back.",
         "[OPTIONS] (--vocab FILE | --tokens FILE | --export) INPUT -o OUTPUT",
         "Reads INPUT, a file written by torch.save(model.state_dict(), f) with the PyTorch Transformer-XL\n"
         "(kimiyoung/transformer-xl, pytorch/mem_transformer.py; zip format of PyTorch >= 1.6) and writes an xl\n"
         "checkpoint (phase \"imported\") with the vocab embedded. The vocab (--vocab, or the one embedded in\n"
         "--tokens) must list the model's symbols in its id order. The model flags are read off the tensor\n"
         "shapes where they can be (layers, widths, heads, clusters, tying); each one given is checked against\n"
         "the file, and a mismatch, an unknown or missing tensor, or a wrong shape stops with exit 65 naming it.\n"
         "Flags the shapes cannot show (--pre-lnorm, --same-length, --clamp-len) must match how the model was\n"
         "trained. Tied tensors, stored under both names by PyTorch, must be equal and are kept once.\n"
         "\n"
         "--export writes the xl checkpoint INPUT as a state_dict that MemTransformerLM.load_state_dict() takes\n"
         "(tied tensors under both names) and prints the matching flags and constructor call. Per-layer u, v\n"
         "biases (untie_r, or pruned heads) need --untie-r (a target with per-layer biases) unless all layers\n"
         "hold the same ones; layers with different head counts cannot be exported (exit 65).",
         "  xl-import-torch --vocab enwik8-txl.tsv --same-length --clamp-len 820 enwik8-base.pt -o enwik8-base.h5\n"
         "  xl-import-torch --tokens wt103.h5 --cutoffs 20000,40000,200000 wt103-base.pt -o wt103-base.h5\n"
         "  xl-import-torch --vocab v.tsv --key model_state nvidia-checkpoint.pt -o model.h5\n"
         "  xl-import-torch --export --untie-r pruned.h5 -o pruned.pt"});
    cli.add("Input")
        ("input", po::value<std::string>()->default_value("-"), "the state_dict (the checkpoint with --export); - is stdin")
        ("vocab", po::value<std::string>(), "vocab TSV (man 5 xl-vocab) in the model's id order")
        ("tokens", po::value<std::string>(), "take the vocab embedded in this tokens file instead")
        ("key", po::value<std::string>(), "the state_dict is entry KEY of a checkpoint dict (model_state: NVIDIA's)")
        ("prefix", po::value<std::string>(), "strip PREFIX from every tensor name (module.: DataParallel)")
        ("export", po::bool_switch(), "write the xl checkpoint INPUT as a PyTorch state_dict");
    cli.add("Model (read off the tensors when left out; checked when given)")
        ("n-token", po::value<int64_t>(), "vocab size")
        ("n-layer", po::value<int64_t>(), "layers")
        ("d-model", po::value<int64_t>(), "model width")
        ("n-head", po::value<int64_t>(), "attention heads per layer")
        ("d-head", po::value<int64_t>(), "width of a head")
        ("d-inner", po::value<int64_t>(), "feed-forward width")
        ("d-embed", po::value<int64_t>(), "embedding width (default d-model)")
        ("cutoffs", po::value<std::string>(), "adaptive softmax cutoffs, e.g. 20000,40000,200000")
        ("div-val", po::value<int64_t>(), "adaptive embedding width divisor")
        ("tie-weight", po::bool_switch(), "output weights tied to the embedding (PyTorch's default)")
        ("not-tied", po::bool_switch(), "output weights not tied (PyTorch's --not_tied)")
        ("tie-projs", po::value<std::string>(), "per cluster: projection tied (e.g. 0,1,1,1 for wt103)")
        ("untie-r", po::bool_switch(), "per-layer r_w_bias/r_r_bias (layers.L.dec_attn.r_w_bias); with --export: the target has them")
        ("pre-lnorm", po::bool_switch(), "layer norm before each sublayer (not visible in the tensors)")
        ("same-length", po::bool_switch(), "every query sees mem_len keys (not visible in the tensors)")
        ("clamp-len", po::value<int64_t>(), "clamp relative distances (-1 or 0: off; not visible in the tensors)")
        ("dropout", po::value<double>(), "dropout recorded in the config (for further training)")
        ("dropatt", po::value<double>(), "attention dropout recorded in the config");
    cli.positional("input", 1);
    cli.add_output(true, "the checkpoint (the state_dict with --export)");
    if (!cli.parse(argc, argv)) return 0;

    const std::string input = cli.get<std::string>("input");
    if (cli.get<bool>("export")) {
      for (const char* flag : {"vocab", "tokens", "key", "prefix", "n-token", "n-layer", "d-model", "n-head", "d-head",
                               "d-inner", "d-embed", "cutoffs", "div-val", "tie-weight", "not-tied", "tie-projs",
                               "pre-lnorm", "same-length", "clamp-len", "dropout", "dropatt"})
        XL_CHECK(!cli.given(flag), xl::kExitUsage, "--" << flag << " does not apply to --export (the checkpoint has its config)");
      return export_state_dict(cli, input);
    }

    XL_CHECK(cli.has("vocab") != cli.has("tokens"), xl::kExitUsage,
             "give exactly one of --vocab FILE or --tokens FILE (the checkpoint embeds the vocab)");
    xl::text::Vocab vocab;
    if (cli.has("vocab")) {
      std::string path = cli.get<std::string>("vocab");
      vocab = xl::text::Vocab::from_tsv(xl::io::read_text(path), path);
    } else {
      vocab = xl::h5::TokensFile::open(cli.get<std::string>("tokens")).vocab();
    }
    const std::string display = xl::io::display_name(input);
    auto sd = xl::model::read_torch_state_dict(input, cli.has("key") ? cli.get<std::string>("key") : "");
    // DataParallel writes module.<name>; strip a prefix every name has, or the one asked for.
    std::string prefix = cli.has("prefix") ? cli.get<std::string>("prefix") : "";
    if (prefix.empty() && !sd.empty() &&
        std::all_of(sd.begin(), sd.end(), [](const auto& p) { return p.first.rfind("module.", 0) == 0; }))
      prefix = "module.";
    if (!prefix.empty())
      for (auto& [name, t] : sd)
        if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
    auto ckpt = xl::model::import_torch_checkpoint(sd, hyper_params(cli), vocab, display);
    ckpt.state["command_line"] = xl::cli::command_line(argc, argv);
    xl::h5::save_checkpoint(cli.output(), ckpt, cli.force());
    auto cfg = xl::model::ModelConfig::from_json(ckpt.model_config, display);
    XL_INFO("imported " << sd.size() << " tensors (" << ckpt.model.size() << " after tying) as " << xl::model::import_flags(cfg));
    return 0;
  });
}

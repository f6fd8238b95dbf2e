#include "xl/interop/txl_state_dict.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "xl/interop/safetensors.h"
#include "xl/interop/shape_text.h"
#include "xl/model/model_io.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"
#include "xl/util/log.h"
#include "xl/util/parse.h"

namespace xl::interop {

using model::ModelConfig;
using model::TransformerXL;

// ================================================================================================
// Names
// ================================================================================================

std::vector<std::pair<std::string, std::string>> torch_names(const TransformerXL& model) {
  auto tensors = model->named_tensors();
  std::map<const c10::TensorImpl*, std::string> by_impl;
  std::set<std::string> have;
  for (const auto& [name, t] : tensors) {
    by_impl.emplace(t.unsafeGetTensorImpl(), name);
    have.insert(name);
  }
  auto alias_of = [&](const torch::Tensor& t, const std::string& name) {
    auto it = by_impl.find(t.unsafeGetTensorImpl());
    XL_CHECK(it != by_impl.end(), kExitSoftware, "torch_names: " << name << " is tied to a tensor the model does not list");
    return it->second;
  };
  // The crit.out_projs block, every cluster that has a projection, own or tied.
  std::vector<std::pair<std::string, std::string>> projs;
  const auto& crit = model->crit;
  for (size_t i = 0; i < crit->projections.size(); ++i) {
    if (!crit->projections[i].defined()) continue;
    std::string name = "crit.out_projs." + std::to_string(i);
    projs.emplace_back(name, have.count(name) ? name : alias_of(crit->projections[i], name));
  }
  std::vector<std::pair<std::string, std::string>> out;
  size_t last_out_layer = 0;
  bool any_out_layer = false;
  for (const auto& [name, t] : tensors) {
    if (name.rfind("crit.out_projs.", 0) == 0) continue;
    static const std::regex bias_re(R"(crit\.out_layers\.(\d+)\.bias)");
    std::smatch m;
    if (std::regex_match(name, m, bias_re)) {
      size_t i = std::stoul(m[1].str());
      std::string w = "crit.out_layers." + std::to_string(i) + ".weight";
      if (!have.count(w)) out.emplace_back(w, alias_of(crit->layers[i]->weight, w));
    }
    out.emplace_back(name, name);
    if (name.rfind("crit.out_layers.", 0) == 0) {
      last_out_layer = out.size();
      any_out_layer = true;
    }
  }
  XL_CHECK(any_out_layer, kExitSoftware, "torch_names: the model has no crit.out_layers");
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(last_out_layer), projs.begin(), projs.end());
  return out;
}

// ================================================================================================
// Pickled modules
// ================================================================================================

SavedHyperParams SavedHyperParams::read(std::string source, const std::function<nlohmann::json(const std::string&)>& at) {
  SavedHyperParams s;
  s.source = std::move(source);
  for (auto [field, name] : {std::pair{&s.attn_type, "attn_type"}, {&s.sample_softmax, "sample_softmax"}, {&s.pre_lnorm, "pre_lnorm"},
                             {&s.same_length, "same_length"}, {&s.clamp_len, "clamp_len"}, {&s.dropout, "dropout"},
                             {&s.dropatt, "dropatt"}, {&s.cutoffs, "cutoffs"}, {&s.tie_projs, "tie_projs"}})
    *field = at(name);
  s.tie_weight = at("tie_word_embeddings");
  if (s.tie_weight.is_null()) s.tie_weight = at("tie_weight");
  else s.tie_weight_name = "tie_word_embeddings";
  return s;
}

void apply_saved_hyper_params(const SavedHyperParams& saved, TorchHyperParams* given, const std::string& file) {
  XL_CHECK(saved.attn_type.is_null() || saved.attn_type == 0, kExitDataErr,
           file << ": the model has attn_type " << json_line(saved.attn_type)
                << "; xl implements Transformer-XL's relative attention (attn_type 0) only");
  XL_CHECK(!saved.sample_softmax.is_number() || saved.sample_softmax.get<double>() <= 0, kExitDataErr,
           file << ": the model has sample_softmax " << json_line(saved.sample_softmax)
                << "; xl implements the full and adaptive softmax, not the sampled one");

  // A flag given must agree on the architecture (pre_lnorm); on behaviour (as eval.py sets
  // same_length and clamp_len) it wins. Returns whether the saved value was taken.
  auto take = [&](const char* flag, const std::string& name, auto& field, auto value, bool architecture) {
    if (field && *field != value) {
      XL_CHECK(!architecture, kExitDataErr, file << ": --" << flag << " " << shown(*field) << " is given, but " << saved.source
                                                  << " has " << name << " = " << shown(value));
      XL_INFO(file << ": --" << flag << " " << shown(*field) << " (" << saved.source << " has " << name << " = " << shown(value) << ")");
      return false;
    }
    field = value;
    return true;
  };
  if (saved.pre_lnorm.is_boolean()) take("pre-lnorm", "pre_lnorm", given->pre_lnorm, saved.pre_lnorm.get<bool>(), true);
  if (saved.same_length.is_boolean()) take("same-length", "same_length", given->same_length, saved.same_length.get<bool>(), false);
  if (saved.clamp_len.is_number_integer())  // PyTorch's -1 is off, xl's 0
    take("clamp-len", "clamp_len", given->clamp_len, std::max<int64_t>(0, saved.clamp_len.get<int64_t>()), false);
  if (saved.dropout.is_number()) take("dropout", "dropout", given->dropout, saved.dropout.get<double>(), false);
  if (saved.dropatt.is_number()) take("dropatt", "dropatt", given->dropatt, saved.dropatt.get<double>(), false);
  // Tying, which a flag may undo (an untied copy) and torch_config checks against the tensors.
  if (saved.tie_weight.is_boolean() &&
      take("tie-weight", saved.tie_weight_name, given->tie_weight, saved.tie_weight.get<bool>(), false))
    given->tie_weight_from = saved.source + "'s " + saved.tie_weight_name;
  const auto& tp = saved.tie_projs;
  if (tp.is_array() && std::all_of(tp.begin(), tp.end(), [](const auto& x) { return x.is_boolean(); }) &&
      take("tie-projs", "tie_projs", given->tie_projs, tp.get<std::vector<bool>>(), false))
    given->tie_projs_from = saved.source + "'s tie_projs";
  // A div_val 1 model's clusters are invisible in its tensors.
  const auto& c = saved.cutoffs;
  if (c.is_array() && std::all_of(c.begin(), c.end(), [](const auto& x) { return x.is_number_integer(); })) {
    const auto cutoffs = c.get<std::vector<int64_t>>();
    if (given->cutoffs && *given->cutoffs != cutoffs)
      XL_FAIL(kExitDataErr, file << ": --cutoffs is given, but " << saved.source << " has cutoffs " << json_line(c));
    given->cutoffs = cutoffs;
  }
}

checkpoint::TensorList module_state_dict(const TorchFile& f, TorchHyperParams* given, const std::string& file) {
  // The MemTransformerLM: the root or the shallowest submodule of that class (a DataParallel's).
  auto depth = [](const std::string& path) { return path.empty() ? 0 : 1 + std::count(path.begin(), path.end(), '.'); };
  std::optional<std::string> path;
  for (const auto& [p, cls] : f.classes) {
    const bool txl = cls == "MemTransformerLM" || parse::ends_with(cls, ".MemTransformerLM");
    if (txl && (!path || depth(p) < depth(*path))) path = p;
  }
  const auto root = f.classes.find("");
  const std::string cls = root == f.classes.end() ? "?" : root->second;
  const bool corpus = parse::ends_with(cls, ".Corpus");
  const bool vocab = parse::ends_with(cls, "Vocab") || (cls == "dict" && f.attributes.count("idx2sym"));
  XL_CHECK(path, kExitDataErr,
           file << ": a pickled " << cls << ", not mem_transformer.py's MemTransformerLM"
                << (corpus  ? " (a corpus cache: --corpus makes a tokens file of it)"
                    : vocab ? " (a Transformer-XL vocab: give it as --vocab)"
                            : " (give its state_dict: torch.save(model.state_dict(), f))"));
  const std::string prefix = path->empty() ? "" : *path + ".";
  auto attr = [&](const std::string& name) {
    auto it = f.attributes.find(prefix + name);
    return it == f.attributes.end() ? nlohmann::json() : it->second;
  };
  // Where the modules keep what the config calls them.
  const std::map<std::string, std::string> module_attr{
      {"pre_lnorm", "layers.0.dec_attn.pre_lnorm"}, {"dropout", "drop.p"}, {"dropatt", "layers.0.dec_attn.dropatt.p"}};
  const auto saved = SavedHyperParams::read("the pickled model", [&](const std::string& field) {
    if (field == "cutoffs") {  // the criterion's end with n_token
      nlohmann::json c = attr("crit.cutoffs");
      if (c.is_array() && !c.empty()) c.erase(c.size() - 1);
      return c;
    }
    const auto it = module_attr.find(field);
    return attr(it == module_attr.end() ? field : it->second);
  });
  apply_saved_hyper_params(saved, given, file);
  if (const auto t = attr("tgt_len"), m = attr("mem_len"); t.is_number_integer() && m.is_number_integer())
    XL_INFO(file << ": a pickled " << f.classes.at(*path) << ", trained with tgt_len " << t.get<int64_t>() << " and mem_len "
                 << m.get<int64_t>() << "; its pre_lnorm, same_length, clamp_len, cutoffs and dropouts come from it");

  checkpoint::TensorList out;
  for (const auto& [name, t] : f.tensors)
    if (name.compare(0, prefix.size(), prefix) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

// ================================================================================================
// Import
// ================================================================================================

WeightsFile parse_weights_file(const std::string& bytes, const std::string& key, const std::string& display) {
  WeightsFile w;
  if (!is_safetensors(bytes)) {
    w.contents = parse_torch_file(bytes, key, display);
    return w;
  }
  XL_CHECK(key.empty(), kExitUsage, "--key does not apply to " << display << " (a safetensors file holds one flat state_dict)");
  w.contents.tensors = parse_safetensors(bytes, display);
  w.tied = TiedNames::kOne;
  return w;
}

WeightsFile read_weights_file(const std::string& path, const std::string& key) {
  if (!is_torch_zip_file(path)) return parse_weights_file(io::read_raw(path), key, io::display_name(path));
  WeightsFile w;
  w.contents = read_torch_file(path, key);
  return w;
}

checkpoint::TensorList import_torch_tensors(const checkpoint::TensorList& sd, const ModelConfig& cfg, const std::string& file,
                                            TiedNames tied) {
  TransformerXL model(cfg, std::nullopt);  // its names, shapes and dtypes
  std::map<std::string, torch::Tensor> xl_tensors;
  for (const auto& [name, x] : model->named_tensors()) xl_tensors.emplace(name, x);
  auto names = torch_names(model);
  std::map<std::string, std::string> expected(names.begin(), names.end());

  std::map<std::string, torch::Tensor> given;
  for (const auto& [name, x] : sd) {
    XL_CHECK(expected.count(name), kExitDataErr,
             file << ": unknown tensor '" << name << "' (no such tensor in a Transformer-XL with " << summary(cfg) << ")");
    given.emplace(name, x);
  }
  std::set<std::string> listed;  // xl names given under some PyTorch name
  for (const auto& [tname, xname] : names)
    if (given.count(tname)) listed.insert(xname);
  std::map<std::string, std::pair<std::string, torch::Tensor>> seen;  // xl name -> first PyTorch name, value
  for (const auto& [tname, xname] : names) {
    auto it = given.find(tname);
    if (it == given.end() && tied == TiedNames::kOne && listed.count(xname)) continue;
    XL_CHECK(it != given.end(), kExitDataErr, file << ": lacks tensor '" << tname << "' (" << summary(cfg) << ")");
    const torch::Tensor& x = it->second;
    const torch::Tensor& target = xl_tensors.at(xname);
    XL_CHECK(x.sizes() == target.sizes(), kExitDataErr,
             file << ": tensor '" << tname << "' has shape " << shape_str(x) << ", the model (" << summary(cfg)
                  << ") needs " << shape_str(target));
    XL_CHECK(x.is_floating_point(), kExitDataErr,
             file << ": tensor '" << tname << "' has dtype " << x.dtype() << ", expected floating point");
    auto first = seen.find(xname);
    if (first == seen.end()) {
      seen.emplace(xname, std::make_pair(tname, x));
    } else {
      XL_CHECK(same_values(x, first->second.second), kExitDataErr,
               file << ": tensor '" << tname << "' is tied to '" << first->second.first
                    << "' in this model but their values differ (untied? see --tie-weight/--tie-projs)");
    }
  }
  // inv_freq is the sinusoid's 1/10000^(2i/d_model): another value means another d_model or model.
  // A model saved in half precision holds it rounded (model.half() converts buffers too).
  const torch::Tensor& inv = seen.at("pos_emb.inv_freq").second;
  torch::Tensor want = xl_tensors.at("pos_emb.inv_freq");
  const double rtol = inv.scalar_type() == torch::kHalf ? 1e-3 : inv.scalar_type() == torch::kBFloat16 ? 8e-3 : 1e-5;
  XL_CHECK(torch::allclose(inv.to(torch::kFloat64), want.to(torch::kFloat64), rtol, 0), kExitDataErr,
           file << ": tensor 'pos_emb.inv_freq' is not 1/10000^(2i/d_model) for d_model " << cfg.d_model);

  checkpoint::TensorList out;
  for (const auto& [xname, target] : model->named_tensors()) {
    torch::Tensor t = seen.at(xname).second.to(target.scalar_type()).contiguous();
    // A tensor that is the whole of its storage is taken as it is (a wt103 model's 1.1 GB are not
    // copied again); a view into a storage shared with others is copied out of it.
    if (t.is_same(seen.at(xname).second) &&
        (t.storage_offset() != 0 || t.storage().nbytes() != static_cast<size_t>(t.numel()) * t.element_size()))
      t = t.clone();
    out.emplace_back(xname, t);
  }
  return out;
}

checkpoint::Checkpoint import_torch_checkpoint(const checkpoint::TensorList& sd, const TorchHyperParams& given, const text::Vocab& vocab,
                                               const std::string& file, TiedNames tied) {
  ModelConfig cfg = torch_config(sd, given, file);
  XL_CHECK(static_cast<int64_t>(vocab.size()) == cfg.n_token, kExitDataErr,
           file << ": the vocab has " << vocab.size() << " entries but the model has n_token " << cfg.n_token
                << " (the vocab must list the PyTorch model's symbols in its id order)");
  checkpoint::Checkpoint ckpt;
  ckpt.phase = "imported";
  ckpt.model_config = cfg.to_json();
  ckpt.train_config = nullptr;
  ckpt.state.imported_from = file;
  ckpt.vocab = vocab;
  ckpt.model = import_torch_tensors(sd, cfg, file, tied);
  return ckpt;
}

// ================================================================================================
// Export
// ================================================================================================

TorchExport export_torch(const TransformerXL& src, bool untie_r, const std::string& file) {
  const ModelConfig& cfg = src->config;
  XL_CHECK(!cfg.has_variant() && cfg.ff, kExitDataErr,
           file << ": uses attention " << cfg.attention << (cfg.persistent_mem ? ", persistent memory" : "")
                << (cfg.adaptive_span ? ", adaptive span" : "") << (cfg.ff ? "" : ", no feed-forward")
                << "; a PyTorch Transformer-XL has none of these variants");
  XL_CHECK(!cfg.compressive(), kExitDataErr,
           file << ": a Compressive Transformer (cmem-rate " << cfg.cmem_rate << "); a PyTorch Transformer-XL has no compressed memory");
  ModelConfig target = cfg;
  if (!cfg.heads_per_layer.empty()) {
    const auto& h = cfg.heads_per_layer;
    XL_CHECK(std::all_of(h.begin(), h.end(), [&](int64_t x) { return x == h[0]; }), kExitDataErr,
             file << ": its layers keep different numbers of heads (" << list_str(h)
                  << "); a PyTorch Transformer-XL has the same n_head in every layer");
    XL_CHECK(h[0] > 0, kExitDataErr, file << ": every attention head was pruned; a PyTorch Transformer-XL needs n_head >= 1");
    target.n_head = h[0];
    target.heads_per_layer.clear();
  }
  torch::NoGradGuard no_grad;
  if (cfg.per_layer_biases() && !untie_r) {
    bool equal = true;
    for (int64_t l = 1; l < cfg.n_layer && equal; ++l) {
      auto [u0, v0] = src->biases(0);
      auto [u, v] = src->biases(l);
      equal = same_values(u, u0) && same_values(v, v0);
    }
    XL_CHECK(equal, kExitDataErr,
             file << ": its u, v biases are per layer (" << (cfg.untie_r ? "untie_r" : "pruned heads")
                  << ") and differ between layers, which the PyTorch Transformer-XL cannot hold (it shares one "
                     "r_w_bias, r_r_bias); give --untie-r for a target with per-layer biases (HF TransfoXL's untie_r)");
  }
  target.untie_r = untie_r;
  target.validate(SettingOrigins(file + " (export)"));

  auto src_list = src->named_tensors();
  std::map<std::string, torch::Tensor> from(src_list.begin(), src_list.end());
  TransformerXL dst(target, std::nullopt);  // the target's names and shapes
  const torch::Tensor& any = from.at("word_emb.emb_layers.0.weight");
  dst->to(any.scalar_type());
  std::map<std::string, torch::Tensor> values;
  static const std::regex bias_re(R"(layers\.(\d+)\.dec_attn\.(r_w_bias|r_r_bias))");
  for (auto& [name, x] : dst->named_tensors()) {
    std::smatch m;
    torch::Tensor value;
    if (name == "r_w_bias" || name == "r_r_bias") {
      auto uv = src->biases(0);
      value = name == "r_w_bias" ? uv.first : uv.second;
    } else if (std::regex_match(name, m, bias_re)) {
      auto uv = src->biases(std::stoll(m[1].str()));
      value = m[2] == "r_w_bias" ? uv.first : uv.second;
    } else {
      value = from.at(name);
    }
    XL_CHECK(value.sizes() == x.sizes(), kExitSoftware, "export: " << name << " has shape " << value.sizes() << ", expected " << x.sizes());
    // The source's own tensor where it holds its storage whole, so that the weights are not held
    // twice; a view is copied, since torch.save writes the whole storage a tensor views.
    const bool whole = value.is_contiguous() && value.storage_offset() == 0 &&
                       value.storage().nbytes() == value.nbytes() && value.scalar_type() == x.scalar_type();
    values.emplace(name, whole ? value.detach() : value.to(x.scalar_type()).clone(at::MemoryFormat::Contiguous));
  }
  TorchExport out;
  out.config = target;
  for (const auto& [tname, xname] : torch_names(dst)) out.state_dict.emplace_back(tname, values.at(xname));
  return out;
}

std::string import_flags(const ModelConfig& c) {
  std::ostringstream os;
  os << "--n-token " << c.n_token << " --n-layer " << c.n_layer << " --d-model " << c.d_model << " --n-head " << c.n_head
     << " --d-head " << c.d_head << " --d-inner " << c.d_inner;
  if (c.embed_dim() != c.d_model) os << " --d-embed " << c.embed_dim();
  if (!c.cutoffs.empty()) os << " --cutoffs " << list_str(c.cutoffs);
  os << " --div-val " << c.div_val;
  if (!c.tie_weight) os << " --tie-weight false";
  if (!c.tie_projs.empty()) os << " --tie-projs " << bools_str(c.tie_projs);
  if (c.pre_lnorm) os << " --pre-lnorm true";
  if (c.same_length) os << " --same-length true";
  if (c.clamp_len > 0) os << " --clamp-len " << c.clamp_len;
  if (c.untie_r) os << " --untie-r true";
  return os.str();
}

std::string pytorch_constructor(const ModelConfig& c) {
  auto py = [](bool b) { return b ? "True" : "False"; };
  std::ostringstream os;
  os << "MemTransformerLM(" << c.n_token << ", " << c.n_layer << ", " << c.n_head << ", " << c.d_model << ", " << c.d_head
     << ", " << c.d_inner << ", dropout=" << c.dropout << ", dropatt=" << c.dropatt << ", tie_weight=" << py(c.tie_weight)
     << ", d_embed=" << c.embed_dim() << ", div_val=" << c.div_val << ", tie_projs=[";
  std::vector<bool> tp = c.tie_projs.empty() ? std::vector<bool>(c.cutoffs.size() + 1, false) : c.tie_projs;
  for (size_t i = 0; i < tp.size(); ++i) os << (i ? ", " : "") << py(tp[i]);
  os << "], pre_lnorm=" << py(c.pre_lnorm) << ", cutoffs=[" << list_str(c.cutoffs) << "], same_length=" << py(c.same_length)
     << ", attn_type=0, clamp_len=" << (c.clamp_len > 0 ? c.clamp_len : -1) << ")";
  if (c.untie_r) os << "  # with per-layer r_w_bias/r_r_bias (untie_r)";
  return os.str();
}

}  // namespace xl::interop

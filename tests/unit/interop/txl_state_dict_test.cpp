// PyTorch Transformer-XL state_dicts: export -> import round trips every tensor exactly; an
// imported model gives the original loss; the hyper-parameters are read off the shapes and checked;
// bad files and inconsistent flags fail with 65 naming the culprit.
#include <gtest/gtest.h>

#include <sstream>

#include <set>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "xl/checkpoint/checkpoint.h"
#include "xl/interop/hf_model_dir.h"
#include "xl/interop/torch_pickle.h"
#include "xl/interop/txl_state_dict.h"
#include "xl/model/head_pruning.h"
#include "xl/model/model_io.h"
#include "xl/util/error.h"
#include "support/test_support.h"
#include "support/model_sizes.h"

using namespace xl;
using namespace xl::model;
using namespace xl::interop;
using torch::Tensor;
using xl::checkpoint::TensorList;
namespace fs = std::filesystem;

namespace {

// The bytes write_torch_state_dict writes.
std::string state_dict_bytes(const xl::checkpoint::TensorList& sd) {
  std::ostringstream os;
  xl::interop::write_torch_state_dict(sd, os);
  return os.str();
}

using xl::test::error_code;

ModelConfig char_config() {
  return xl::test::model_of_sizes(17, 3, 16, 3, 4, 20);  // tokens, layers, d_model, heads, d_head, d_inner
}

// Word level as wt103: cutoffs, div_val > 1, tied weights and projections but the first.
ModelConfig adaptive_config() {
  ModelConfig c = char_config();
  c.n_token = 50;
  c.cutoffs = {10, 30};
  c.div_val = 2;
  c.d_embed = 12;
  c.tie_projs = {false, true, true};
  return c;
}

// div_val 1 with d_embed != d_model (one projection shared by all clusters), untied weights.
ModelConfig div1_config() {
  ModelConfig c = char_config();
  c.n_token = 30;
  c.cutoffs = {8, 20};
  c.d_embed = 10;
  c.tie_weight = false;
  c.tie_projs = {true, false, true};
  c.pre_lnorm = true;
  c.untie_r = true;
  return c;
}

std::vector<std::pair<std::string, ModelConfig>> configs() {
  return {{"char", char_config()}, {"adaptive", adaptive_config()}, {"div1", div1_config()}};
}

TransformerXL make_model(const ModelConfig& c, uint64_t seed = 7) {
  TransformerXL m(c);
  m->reset_parameters(seed);
  torch::NoGradGuard g;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
  for (auto& [name, t] : m->named_tensors())
    if (name != "pos_emb.inv_freq") t.add_(torch::empty(t.sizes()).normal_(0, 0.1, gen));
  m->eval();
  return m;
}

// What the user would pass for the flags the shapes cannot show.
TorchHyperParams invisible(const ModelConfig& c) {
  TorchHyperParams h;
  h.pre_lnorm = c.pre_lnorm;
  h.same_length = c.same_length;
  h.clamp_len = c.clamp_len;
  h.dropout = c.dropout;
  if (c.div_val == 1 && !c.cutoffs.empty()) h.cutoffs = c.cutoffs;
  return h;
}

xl::text::Vocab vocab_of(int64_t n) {
  std::vector<std::string> pieces;
  for (int64_t i = 0; i < n; ++i) pieces.push_back("w" + std::to_string(i));
  return xl::text::Vocab(xl::text::VocabType::kWord, pieces, std::vector<int64_t>(pieces.size(), 1), 0);
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         torch::equal(a.contiguous().view(torch::kInt32), b.contiguous().view(torch::kInt32));
}

TensorList round_trip(const TensorList& sd) {
  return parse_torch_file(state_dict_bytes(sd), "", "mem.pt").tensors;
}

Tensor loss(TransformerXL& m) {
  torch::NoGradGuard g;
  Memory mem = m->new_memory();
  ForwardOptions o;
  o.mem_len = 6;
  std::vector<Tensor> out;
  for (int s = 0; s < 3; ++s) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(s + 1);
    Tensor in = torch::randint(0, m->config.n_token, {2, 5}, gen, torch::kLong);
    Tensor tg = torch::randint(0, m->config.n_token, {2, 5}, gen, torch::kLong);
    out.push_back(m->forward(in, tg, mem, o));
  }
  return torch::stack(out);
}

TensorList without(TensorList sd, const std::string& name) {
  sd.erase(std::remove_if(sd.begin(), sd.end(), [&](const auto& p) { return p.first == name; }), sd.end());
  return sd;
}

TensorList replaced(TensorList sd, const std::string& name, const Tensor& value) {
  for (auto& [n, t] : sd)
    if (n == name) t = value;
  return sd;
}

}  // namespace

TEST(TxlStateDict, ExportThenImportRoundTripsEveryTensorExactly) {
  for (auto [name, cfg] : configs()) {
    auto model = make_model(cfg);
    auto exported = export_torch(model, cfg.untie_r, "mem");
    TensorList sd = round_trip(exported.state_dict);
    // The file holds what export produced, name for name and bit for bit.
    ASSERT_EQ(sd.size(), exported.state_dict.size()) << name;
    for (size_t i = 0; i < sd.size(); ++i) {
      EXPECT_EQ(sd[i].first, exported.state_dict[i].first) << name;
      EXPECT_TRUE(bit_equal(sd[i].second, exported.state_dict[i].second)) << name << " " << sd[i].first;
    }
    // Every hyper-parameter visible in the shapes is read back.
    ModelConfig back = torch_config(sd, invisible(cfg), "mem.pt");
    ModelConfig want = cfg;
    if (want.d_embed == want.d_model) want.d_embed = 0;
    EXPECT_EQ(back.to_json(), want.to_json()) << name << "\n" << back.to_json().dump() << "\n" << want.to_json().dump();
    TensorList imported = import_torch_tensors(sd, back, "mem.pt");
    auto original = model->named_tensors();
    ASSERT_EQ(imported.size(), original.size()) << name;
    for (size_t i = 0; i < imported.size(); ++i) {
      EXPECT_EQ(imported[i].first, original[i].first) << name;
      EXPECT_TRUE(bit_equal(imported[i].second, original[i].second)) << name << " " << original[i].first;
    }
  }
}

TEST(TxlStateDict, TiedTensorsAppearUnderBothPyTorchNames) {
  auto model = make_model(adaptive_config());
  std::map<std::string, Tensor> sd;
  for (auto& [n, t] : export_torch(model, false, "mem").state_dict) sd.emplace(n, t);
  for (int i = 0; i < 3; ++i) {
    auto w = "crit.out_layers." + std::to_string(i) + ".weight", e = "word_emb.emb_layers." + std::to_string(i) + ".weight";
    ASSERT_TRUE(sd.count(w) && sd.count(e)) << w;
    EXPECT_TRUE(torch::equal(sd[w], sd[e]));
  }
  EXPECT_TRUE(sd.count("crit.out_projs.0") && sd.count("crit.out_projs.1") && sd.count("crit.out_projs.2"));
  EXPECT_TRUE(torch::equal(sd["crit.out_projs.2"], sd["word_emb.emb_projs.2"]));
  EXPECT_FALSE(torch::equal(sd["crit.out_projs.0"], sd["word_emb.emb_projs.0"]));
  EXPECT_TRUE(sd.count("r_w_bias") && sd.count("pos_emb.inv_freq"));
  // A char model has no projections at all.
  auto char_sd = export_torch(make_model(char_config()), false, "mem").state_dict;
  for (auto& [n, t] : char_sd) EXPECT_EQ(n.find("projs"), std::string::npos) << n;
}

TEST(TxlStateDict, ImportedCheckpointGivesTheOriginalLoss) {
  fs::path dir = fs::temp_directory_path() / ("xl-torch-import-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (auto [name, cfg] : configs()) {
    auto model = make_model(cfg);
    TensorList sd = round_trip(export_torch(model, cfg.untie_r, "mem").state_dict);
    auto ckpt = import_torch_checkpoint(sd, invisible(cfg), vocab_of(cfg.n_token), "mem.pt");
    EXPECT_EQ(ckpt.phase, "imported");
    const std::string path = (dir / (name + ".h5")).string();
    xl::checkpoint::save(path, ckpt, false);
    auto loaded = xl::checkpoint::load(path);
    auto back = model_from_checkpoint(loaded, path);
    EXPECT_TRUE(torch::equal(loss(model), loss(back))) << name;
  }
  fs::remove_all(dir);
}

TEST(TxlStateDict, TiedTensorsListedOnceImportAsTransformersSafetensorsListThem) {
  // save_pretrained's safetensors keep a tied tensor under its first name only (the embedding's);
  // read with TiedNames::kOne that is the same model, read as a torch.save state_dict a lack.
  for (auto [name, cfg] : configs()) {
    SCOPED_TRACE(name);
    auto model = make_model(cfg);
    TensorList sd = round_trip(export_torch(model, cfg.untie_r, "mem").state_dict);
    std::set<std::string> kept;
    TensorList once;
    std::vector<std::string> dropped;
    for (const auto& [tname, xname] : torch_names(model)) {
      if (kept.insert(xname).second) once.emplace_back(tname, xl::checkpoint::find_tensor(sd, tname));
      else dropped.push_back(tname);
    }
    auto ckpt = import_torch_checkpoint(once, invisible(cfg), vocab_of(cfg.n_token), "m.safetensors", TiedNames::kOne);
    EXPECT_EQ(ckpt.model_config, import_torch_checkpoint(sd, invisible(cfg), vocab_of(cfg.n_token), "mem.pt").model_config);
    auto back = model_from_checkpoint(ckpt, "m.safetensors");
    EXPECT_TRUE(torch::equal(loss(model), loss(back)));
    if (dropped.empty()) continue;  // the char model ties nothing
    std::string msg;
    EXPECT_EQ(error_code([&] { import_torch_checkpoint(once, invisible(cfg), vocab_of(cfg.n_token), "sd.pt"); }, &msg),
              xl::kExitDataErr);
    EXPECT_NE(msg.find("lacks tensor '" + dropped[0] + "'"), std::string::npos) << msg;
    // An untied tensor is still needed under its own name.
    EXPECT_EQ(error_code([&] {
                import_torch_checkpoint(without(once, "layers.0.dec_attn.o_net.weight"), invisible(cfg),
                                        vocab_of(cfg.n_token), "m.safetensors", TiedNames::kOne);
              }, &msg),
              xl::kExitDataErr);
    EXPECT_NE(msg.find("lacks tensor 'layers.0.dec_attn.o_net.weight'"), std::string::npos) << msg;
  }
}

TEST(TxlStateDict, ConfigJsonsTyingDecidesWhatAFileListingTiedTensorsOnceMustHold) {
  // transformers ties what config.json's tie_word_embeddings and tie_projs say; a tensor missing
  // from a safetensors file is tied only where they say so.
  const ModelConfig cfg = adaptive_config();  // tie_weight, tie_projs false,true,true
  auto model = make_model(cfg);
  TensorList sd = round_trip(export_torch(model, false, "mem").state_dict);
  std::set<std::string> kept;
  TensorList once;
  for (const auto& [tname, xname] : torch_names(model))
    if (kept.insert(xname).second) once.emplace_back(tname, xl::checkpoint::find_tensor(sd, tname));
  auto given = [&](const nlohmann::json& config) {
    TorchHyperParams h = invisible(cfg);
    hf_config_params(config, &h, "config.json");
    return h;
  };
  auto import = [&](const TensorList& tensors, const TorchHyperParams& h, TiedNames tied) {
    return import_torch_checkpoint(tensors, h, vocab_of(cfg.n_token), "m.safetensors", tied);
  };
  const nlohmann::json hub = {{"tie_projs", {false, true, true}}, {"tie_word_embeddings", true}};
  auto ckpt = import(once, given(hub), TiedNames::kOne);
  EXPECT_EQ(torch_config(once, given(hub), "m.safetensors").tie_projs, cfg.tie_projs);
  auto back = model_from_checkpoint(ckpt, "m");
  EXPECT_TRUE(torch::equal(loss(model), loss(back)));

  // The head's untied projection left out: the tensors alone read it as tied; config.json refuses.
  TensorList no_head_proj = without(once, "crit.out_projs.0");
  EXPECT_EQ(torch_config(no_head_proj, invisible(cfg), "m.safetensors").tie_projs, (std::vector<bool>{true, true, true}));
  import(no_head_proj, invisible(cfg), TiedNames::kOne);
  std::string msg;
  EXPECT_EQ(error_code([&] { import(no_head_proj, given(hub), TiedNames::kOne); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("lacks tensor 'crit.out_projs.0'"), std::string::npos) << msg;
  // Untied output layers left out, by either name of the field.
  for (const char* key : {"tie_word_embeddings", "tie_weight"}) {
    EXPECT_EQ(error_code([&] { import(once, given({{key, false}}), TiedNames::kOne); }, &msg), xl::kExitDataErr) << key;
    EXPECT_NE(msg.find("lacks tensor 'crit.out_layers.0.weight'"), std::string::npos) << msg;
  }
  // Said tied, but the file's tensors differ: refused naming config.json's field and the tensor.
  TensorList differs = replaced(sd, "crit.out_projs.0", torch::zeros_like(xl::checkpoint::find_tensor(sd, "crit.out_projs.0")));
  EXPECT_EQ(error_code([&] { import(differs, given({{"tie_projs", {true, true, true}}}), TiedNames::kEach); }, &msg),
            xl::kExitDataErr);
  EXPECT_NE(msg.find("config.json's tie_projs says cluster 0 is tied, but crit.out_projs.0 differs"), std::string::npos) << msg;
  TensorList layers_differ = replaced(sd, "crit.out_layers.1.weight", torch::zeros({20, 6}));
  EXPECT_EQ(error_code([&] { import(layers_differ, given({{"tie_word_embeddings", true}}), TiedNames::kEach); }, &msg),
            xl::kExitDataErr);
  EXPECT_NE(msg.find("config.json's tie_word_embeddings says the output layers are tied, but crit.out_layers.1.weight"),
            std::string::npos)
      << msg;
  // Saying nothing, config.json leaves transformers' default: tied.
  EXPECT_EQ(error_code([&] { import(layers_differ, given(nlohmann::json::object()), TiedNames::kEach); }, &msg),
            xl::kExitDataErr);
  EXPECT_NE(msg.find("config.json's tie_word_embeddings (absent: transformers' default, true) says the output layers "
                     "are tied, but crit.out_layers.1.weight"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(torch_config(layers_differ, given({{"tie_weight", false}}), "m.pt").tie_weight);
  // A flag wins over config.json (an untied copy of a tied model), and a length that is not one per
  // cluster is refused naming the field.
  TorchHyperParams flag = invisible(cfg);
  flag.tie_projs = std::vector<bool>{false, false, true};
  hf_config_params(hub, &flag, "config.json");
  EXPECT_EQ(torch_config(sd, flag, "m.pt").tie_projs, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(error_code([&] { import(sd, given({{"tie_projs", {false, true}}}), TiedNames::kEach); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("config.json's tie_projs false,true needs 3 entries"), std::string::npos) << msg;
}

TEST(TxlStateDict, HalfPrecisionStateDictsImportTheirRoundedWeights) {
  // model.half() (or bfloat16()) rounds every tensor, the inv_freq buffer too; another d_model's
  // inv_freq is still refused in those dtypes.
  ModelConfig cfg = adaptive_config();
  TensorList sd = export_torch(make_model(cfg), false, "mem").state_dict;
  for (auto dtype : {torch::kHalf, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    TensorList low;
    for (const auto& [n, t] : sd) low.emplace_back(n, t.to(dtype));
    auto ckpt = import_torch_checkpoint(low, invisible(cfg), vocab_of(cfg.n_token), "half.pt");
    const Tensor w = xl::checkpoint::find_tensor(ckpt.model, "layers.0.dec_attn.qkv_net.weight");
    EXPECT_EQ(w.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(w, xl::checkpoint::find_tensor(low, "layers.0.dec_attn.qkv_net.weight").to(torch::kFloat)));
    ModelConfig wider = cfg;
    wider.d_model = 18;
    const Tensor other = TransformerXL(wider)->named_buffers()["pos_emb.inv_freq"].narrow(0, 0, cfg.d_model / 2).to(dtype);
    std::string msg;
    EXPECT_EQ(error_code([&] {
                import_torch_checkpoint(replaced(low, "pos_emb.inv_freq", other), invisible(cfg), vocab_of(cfg.n_token),
                                        "half.pt");
              }, &msg),
              xl::kExitDataErr);
    EXPECT_NE(msg.find("pos_emb.inv_freq"), std::string::npos) << msg;
  }
}

TEST(TxlStateDict, PrunedModelsExportWhenAPyTorchModelCanHoldThem) {
  ModelConfig cfg = char_config();
  auto model = make_model(cfg);
  // The same number of heads in every layer: exportable with per-layer biases.
  Tensor uniform = torch::tensor({1, 0, 1, 0, 1, 1, 1, 1, 0}, torch::kInt64).view({3, 3});
  auto pruned = remove_heads(model, uniform);
  std::string msg;
  EXPECT_EQ(error_code([&] { export_torch(pruned, false, "p.h5"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("--untie-r"), std::string::npos) << msg;
  auto exported = export_torch(pruned, true, "p.h5");
  EXPECT_EQ(exported.config.n_head, 2);
  EXPECT_TRUE(exported.config.untie_r);
  EXPECT_TRUE(exported.config.heads_per_layer.empty());
  TensorList sd = round_trip(exported.state_dict);
  auto ckpt = import_torch_checkpoint(sd, invisible(cfg), vocab_of(cfg.n_token), "p.pt");
  auto back = model_from_checkpoint(ckpt, "p.pt");
  EXPECT_TRUE(torch::allclose(loss(pruned), loss(back), 1e-6, 1e-6));
  // Keeping the same heads everywhere leaves equal biases: they export shared.
  Tensor same = torch::tensor({1, 0, 1, 1, 0, 1, 1, 0, 1}, torch::kInt64).view({3, 3});
  auto shared = export_torch(remove_heads(model, same), false, "s.h5");
  EXPECT_FALSE(shared.config.untie_r);
  // Different head counts per layer, or a layer with none: no PyTorch equivalent.
  Tensor ragged = torch::tensor({1, 1, 1, 1, 0, 1, 1, 1, 1}, torch::kInt64).view({3, 3});
  EXPECT_EQ(error_code([&] { export_torch(remove_heads(model, ragged), true, "r.h5"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("different numbers of heads"), std::string::npos) << msg;
  EXPECT_EQ(error_code([&] { export_torch(remove_heads(model, torch::zeros({3, 3})), true, "z.h5"); }), xl::kExitDataErr);
}

TEST(TxlStateDict, BadStateDictsFailWith65NamingTheTensor) {
  ModelConfig cfg = adaptive_config();
  auto model = make_model(cfg);
  TensorList sd = round_trip(export_torch(model, false, "mem").state_dict);
  auto import = [&](const TensorList& s, const TorchHyperParams& h = {}) {
    import_torch_checkpoint(s, h, vocab_of(cfg.n_token), "sd.pt");
  };
  ASSERT_EQ(error_code([&] { import(sd); }), 0);
  std::string msg;
  for (const char* name : {"layers.1.pos_ff.CoreNet.3.bias", "layers.2.dec_attn.r_net.weight", "crit.cluster_bias",
                           "crit.out_projs.0", "r_r_bias", "pos_emb.inv_freq"}) {
    EXPECT_EQ(error_code([&] { import(without(sd, name)); }, &msg), xl::kExitDataErr) << name;
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
  TensorList extra = sd;
  extra.emplace_back("layers.0.dec_attn.qkv_net.bias", torch::zeros({36}));
  EXPECT_EQ(error_code([&] { import(extra); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("unknown tensor 'layers.0.dec_attn.qkv_net.bias'"), std::string::npos) << msg;
  EXPECT_EQ(error_code([&] { import(replaced(sd, "layers.1.pos_ff.CoreNet.3.bias", torch::zeros({15}))); }, &msg),
            xl::kExitDataErr);
  EXPECT_NE(msg.find("layers.1.pos_ff.CoreNet.3.bias"), std::string::npos) << msg;
  EXPECT_EQ(error_code([&] { import(replaced(sd, "layers.2.dec_attn.qkv_net.weight", torch::zeros({30, 16}))); }, &msg),
            xl::kExitDataErr);
  EXPECT_NE(msg.find("layers.2.dec_attn.qkv_net.weight"), std::string::npos) << msg;
  EXPECT_EQ(error_code([&] { import(replaced(sd, "layers.0.pos_ff.CoreNet.0.bias", torch::zeros({20}, torch::kLong))); }, &msg),
            xl::kExitDataErr);
  EXPECT_NE(msg.find("floating point"), std::string::npos) << msg;
  EXPECT_EQ(error_code([&] { import(replaced(sd, "pos_emb.inv_freq", torch::ones({8}))); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("inv_freq"), std::string::npos) << msg;
  // Wrong vocab size.
  EXPECT_EQ(error_code([&] { import_torch_checkpoint(sd, {}, vocab_of(49), "sd.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("n_token 50"), std::string::npos) << msg;
}

TEST(TxlStateDict, FlagsThatContradictTheShapesFailWith65) {
  ModelConfig cfg = adaptive_config();
  TensorList sd = round_trip(export_torch(make_model(cfg), false, "mem").state_dict);
  struct Case {
    std::string flag;
    std::function<void(TorchHyperParams&)> set;
  };
  std::vector<Case> cases = {
      {"--n-layer", [](TorchHyperParams& h) { h.n_layer = 4; }},
      {"--d-model", [](TorchHyperParams& h) { h.d_model = 32; }},
      {"--n-head", [](TorchHyperParams& h) { h.n_head = 4; }},
      {"--d-head", [](TorchHyperParams& h) { h.d_head = 3; }},
      {"--d-inner", [](TorchHyperParams& h) { h.d_inner = 2048; }},
      {"--n-token", [](TorchHyperParams& h) { h.n_token = 51; }},
      {"--d-embed", [](TorchHyperParams& h) { h.d_embed = 16; }},
      {"--cutoffs", [](TorchHyperParams& h) { h.cutoffs = std::vector<int64_t>{10, 31}; }},
      {"--div-val", [](TorchHyperParams& h) { h.div_val = 3; }},
      {"--tie-projs", [](TorchHyperParams& h) { h.tie_projs = std::vector<bool>{true, true, true}; }},
      {"--tie-projs", [](TorchHyperParams& h) { h.tie_projs = std::vector<bool>{true, true}; }},
      {"--untie-r", [](TorchHyperParams& h) { h.untie_r = true; }},
  };
  for (const auto& c : cases) {
    TorchHyperParams h;
    c.set(h);
    std::string msg;
    EXPECT_EQ(error_code([&] { torch_config(sd, h, "sd.pt"); }, &msg), xl::kExitDataErr) << c.flag;
    EXPECT_NE(msg.find(c.flag), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // Consistent flags are accepted, tie_weight false on a tied file included (an untied copy).
  TorchHyperParams ok;
  ok.n_layer = 3;
  ok.d_model = 16;
  ok.n_head = 3;
  ok.d_head = 4;
  ok.cutoffs = cfg.cutoffs;
  ok.div_val = 2;
  ok.tie_weight = false;
  EXPECT_FALSE(torch_config(sd, ok, "sd.pt").tie_weight);

  // Tied twins that differ: --tie-weight refuses; without it the model is read as untied.
  TensorList untied = replaced(sd, "crit.out_layers.1.weight", torch::zeros({20, 6}));
  TorchHyperParams tie;
  tie.tie_weight = true;
  std::string msg;
  EXPECT_EQ(error_code([&] { torch_config(untied, tie, "sd.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("crit.out_layers.1.weight"), std::string::npos) << msg;
  EXPECT_FALSE(torch_config(untied, {}, "sd.pt").tie_weight);

  // A div_val 1 model with clusters needs --cutoffs (not visible in the shapes): usage error.
  TensorList div1 = round_trip(export_torch(make_model(div1_config()), true, "mem").state_dict);
  EXPECT_EQ(error_code([&] { torch_config(div1, {}, "sd.pt"); }, &msg), xl::kExitUsage);
  EXPECT_NE(msg.find("--cutoffs"), std::string::npos) << msg;
  TorchHyperParams three;
  three.cutoffs = std::vector<int64_t>{5, 10, 20};
  EXPECT_EQ(error_code([&] { torch_config(div1, three, "sd.pt"); }, &msg), xl::kExitDataErr);
  // Per-layer biases without --untie-r given are read as untie_r; --untie-r=false refuses.
  TorchHyperParams shared_r;
  shared_r.cutoffs = div1_config().cutoffs;
  EXPECT_TRUE(torch_config(div1, shared_r, "sd.pt").untie_r);
  shared_r.untie_r = false;
  EXPECT_EQ(error_code([&] { torch_config(div1, shared_r, "sd.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("--untie-r"), std::string::npos) << msg;
}

// ---- the reader on a file laid out as Python's torch.save lays out a state_dict ----------------

// Moving models between xl checkpoints and the PyTorch Transformer-XL (kimiyoung/transformer-xl,
// `pytorch/mem_transformer.py`): its `torch.save(model.state_dict(), f)` and `torch.save(model, f)`
// files are read without Python, and an xl checkpoint is written back as a state_dict that `model.load_state_dict` takes.
//
// Parameter names are the same on both sides (xl follows the PyTorch names). The differences:
// - PyTorch lists tied tensors under every name (crit.out_layers.{i}.weight beside
//   word_emb.emb_layers.{i}.weight, crit.out_projs.{i} beside word_emb.emb_projs.{j}); xl keeps one.
//   Importing verifies that the twins are equal (transformers' safetensors files list a tied tensor
//   once: TiedNames); exporting writes each under all its names.
// - r_w_bias, r_r_bias are shared [n_head, d_head] tensors; with untie_r (TF's option, HF's
//   TransfoXL) they are per layer as layers.{l}.dec_attn.r_w_bias. A model whose layers keep
//   different numbers of heads (structural pruning) has no PyTorch Transformer-XL equivalent.
// Reading and writing the files themselves: torch_pickle.h.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xl/checkpoint/checkpoint.h"
#include "xl/interop/torch_pickle.h"
#include "xl/model/config.h"
#include "xl/model/transformer_xl.h"
#include "xl/text/vocab.h"

namespace xl::interop {

// ---- names --------------------------------------------------------------------------------------

// Every PyTorch state_dict name of `model`, in PyTorch's order, paired with the xl name (as in
// named_tensors()) of the tensor it holds. Tied tensors appear once per PyTorch name.
std::vector<std::pair<std::string, std::string>> torch_names(const model::TransformerXL& model);

// ---- hyper-parameters ---------------------------------------------------------------------------

// What the user said about the PyTorch model; an unset field is inferred from the tensor shapes
// (or takes PyTorch's default where shapes cannot tell: pre_lnorm, same_length, clamp_len, dropouts).
struct TorchHyperParams {
  std::optional<int64_t> n_token, n_layer, d_model, n_head, d_head, d_inner, d_embed, div_val, clamp_len;
  std::optional<std::vector<int64_t>> cutoffs;
  std::optional<std::vector<bool>> tie_projs;
  std::optional<bool> tie_weight, untie_r, pre_lnorm, same_length;
  std::optional<double> dropout, dropatt;
  // Who set tie_weight and tie_projs, for refusals: the flags, or a saved config's field.
  std::string tie_weight_from = "--tie-weight", tie_projs_from = "--tie-projs";
};

// The model config of a PyTorch Transformer-XL state_dict: n_layer, d_model, n_head, d_head,
// d_inner, n_token, d_embed, cutoffs, div_val and the tying read off the tensors, checked against
// every given field (65 with one line naming the flag and what the file holds). Cutoffs cannot be
// read off a div_val 1 model with clusters: they must be given (64 otherwise).
model::ModelConfig torch_config(const checkpoint::TensorList& state_dict, const TorchHyperParams& given, const std::string& file);

// How a file names a tied tensor: under each of its names (torch.save of a state_dict), or under
// one (transformers' safetensors files, which drop the tied keys).
enum class TiedNames { kEach, kOne };

// A model's weights file as xl-import-torch takes it: safetensors when its first bytes say so (a
// tied tensor listed once; a `key` fails with 64), else torch.save's, read as parse_torch_file
// reads it.
struct WeightsFile {
  TorchFile contents;
  TiedNames tied = TiedNames::kEach;
};
WeightsFile parse_weights_file(const std::string& bytes, const std::string& key, const std::string& display);
// The same read from PATH ("-": stdin), a torch.save archive on disk record by record.
WeightsFile read_weights_file(const std::string& path, const std::string& key);

// The model tensors (xl names, float32, model order) of a state_dict for `cfg`. Fails with 65 and
// one line naming the tensor for an unknown or missing name (with TiedNames::kOne, a tied tensor's
// other names may be missing), a wrong shape, a non-float dtype, tied twins that differ, or a
// pos_emb.inv_freq that is not the sinusoid of d_model.
checkpoint::TensorList import_torch_tensors(const checkpoint::TensorList& state_dict, const model::ModelConfig& cfg,
                                            const std::string& file, TiedNames tied = TiedNames::kEach);

// What a saved model says about itself beyond its tensors (a pickled module's attributes, a Hugging
// Face config.json), each null where it does not say; cutoffs without n_token.
struct SavedHyperParams {
  std::string source;  // for messages: "the pickled model", "config.json"
  nlohmann::json attn_type, sample_softmax, pre_lnorm, same_length, clamp_len, dropout, dropatt, cutoffs, tie_projs,
      tie_weight;
  std::string tie_weight_name = "tie_weight";  // or transformers' tie_word_embeddings, where that was read

  // Each field as `at` gives it by the field's name ("attn_type", ..., "cutoffs", "tie_projs"); the
  // output layers' tying by tie_word_embeddings (transformers' name) or else tie_weight.
  static SavedHyperParams read(std::string source, const std::function<nlohmann::json(const std::string&)>& at);
};

// Fills what `saved` says into `given` where not given. A given pre_lnorm or cutoffs that disagrees
// fails with 65 naming it (the others are behaviour, which the flags may change: logged), and so
// does an attn_type other than 0 or a sampled softmax. Saved tying (tie_weight, tie_projs) is then
// checked against the tensors by torch_config as a flag's would be, its refusals naming the field.
void apply_saved_hyper_params(const SavedHyperParams& saved, TorchHyperParams* given, const std::string& file);

// The state_dict of a pickled MemTransformerLM (torch.save(model, f): train.py's model.pt), or of the
// one a wrapper such as DataParallel holds, with what its attributes say and its tensors cannot
// (pre_lnorm, same_length, clamp_len, dropout, dropatt, cutoffs) filled into `given` as
// apply_saved_hyper_params does.
checkpoint::TensorList module_state_dict(const TorchFile& file_contents, TorchHyperParams* given, const std::string& file);

// A complete checkpoint (phase "imported", no optimizer state) from a state_dict. The vocab must
// have n_token entries in the PyTorch model's id order (65 otherwise).
checkpoint::Checkpoint import_torch_checkpoint(const checkpoint::TensorList& state_dict, const TorchHyperParams& given,
                                               const text::Vocab& vocab, const std::string& file,
                                               TiedNames tied = TiedNames::kEach);

// ---- export -------------------------------------------------------------------------------------

struct TorchExport {
  checkpoint::TensorList state_dict;  // PyTorch names; tied tensors under each name
  model::ModelConfig config;         // the PyTorch model's hyper-parameters
};

// The state_dict of a model. `untie_r`: the target has per-layer u, v (HF TransfoXL,
// TF); without it per-layer biases are written shared when all layers hold the same ones, and fail
// with 65 otherwise. Layers with different head counts (or none) fail with 65.
TorchExport export_torch(const model::TransformerXL& model, bool untie_r, const std::string& file);

// The xl-import-torch flags that describe `cfg` ("--n-layer 12 --d-model 512 ...").
std::string import_flags(const model::ModelConfig& cfg);
// The PyTorch constructor call with `cfg`'s hyper-parameters ("MemTransformerLM(204, 12, ...)").
std::string pytorch_constructor(const model::ModelConfig& cfg);

}  // namespace xl::interop

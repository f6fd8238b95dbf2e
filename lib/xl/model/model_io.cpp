#include "xl/model/model_io.h"

#include <map>

#include "xl/util/error.h"

namespace xl::model {

checkpoint::TensorList model_tensors(const TransformerXL& model) { return model->named_tensors(); }

void load_model_tensors(TransformerXL& model, const checkpoint::TensorList& tensors, const std::string& file) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> given(tensors.begin(), tensors.end());
  for (auto& [name, target] : model->named_tensors()) {
    auto it = given.find(name);
    XL_CHECK(it != given.end(), kExitDataErr, file << ": checkpoint lacks tensor '" << name << "'");
    XL_CHECK(it->second.sizes() == target.sizes(), kExitDataErr,
             file << ": tensor '" << name << "' has shape " << it->second.sizes() << ", the model expects " << target.sizes());
    target.copy_(it->second);
    given.erase(it);
  }
  XL_CHECK(given.empty(), kExitDataErr, file << ": checkpoint has tensor '" << given.begin()->first << "' that the model does not");
}

namespace {

// The model a checkpoint's config describes, its tensors unset. A damaged or crafted config may ask
// for any size: no model bigger than the tensors stored.
TransformerXL model_for(const nlohmann::json& model_config, double stored, const std::string& file) {
  ModelConfig cfg = ModelConfig::from_json(model_config, file);
  const double needed = cfg.minimum_parameters();
  XL_CHECK(needed <= stored, kExitDataErr,
           file << ": its model config needs at least " << static_cast<int64_t>(needed) << " parameters, the file holds "
                << static_cast<int64_t>(stored) << " (corrupt file?)");
  return TransformerXL(cfg, std::nullopt);
}

}  // namespace

TransformerXL model_from_checkpoint(const checkpoint::Checkpoint& ckpt, const std::string& file) {
  double stored = 0;
  for (const auto& [name, t] : ckpt.model) stored += static_cast<double>(t.numel());
  TransformerXL model = model_for(ckpt.model_config, stored, file);
  load_model_tensors(model, ckpt.model, file);
  model->eval();
  return model;
}

LoadedModel load_model(const std::string& path, const checkpoint::ExpectedVocab& expected, bool with_training_state) {
  checkpoint::Reader reader(path, expected);
  TransformerXL model = model_for(reader.header().model_config, reader.model_elements(), reader.file());
  reader.read_model_into(model_tensors(model));
  model->eval();
  return {reader.finish(with_training_state), model};
}

torch::Tensor head_mask_of(const checkpoint::Checkpoint& ckpt) { return checkpoint::find_tensor(ckpt.analysis, "head_mask"); }

}  // namespace xl::model

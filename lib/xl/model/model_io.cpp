#include "xl/model/model_io.h"

#include <set>

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

TransformerXL model_from_checkpoint(const checkpoint::Checkpoint& ckpt, const std::string& file) {
  ModelConfig cfg = ModelConfig::from_json(ckpt.model_config, file);
  // A damaged or crafted config may ask for any size: no model bigger than the tensors stored.
  double stored = 0;
  for (const auto& [name, t] : ckpt.model) stored += static_cast<double>(t.numel());
  const double needed = cfg.minimum_parameters();
  XL_CHECK(needed <= stored, kExitDataErr,
           file << ": its model config needs at least " << static_cast<int64_t>(needed) << " parameters, the file holds "
                << static_cast<int64_t>(stored) << " (corrupt file?)");
  TransformerXL model(cfg, std::nullopt);
  load_model_tensors(model, ckpt.model, file);
  model->eval();
  return model;
}

torch::Tensor head_mask_of(const checkpoint::Checkpoint& ckpt) { return checkpoint::find_tensor(ckpt.analysis, "head_mask"); }

}  // namespace xl::model

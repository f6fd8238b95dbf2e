// Hugging Face's TransfoXL model directory, as save_pretrained() writes it and the hub holds
// transfo-xl-wt103: the state_dict (model.safetensors or pytorch_model.bin, TransfoXLLMHeadModel's
// names), config.json (what the tensors cannot show: same_length, clamp_len, pre_lnorm, dropouts,
// cutoffs) and the vocab (vocab.bin, or vocab.pkl as later versions name it: a Transformer-XL
// Vocab's __dict__, torch.save'd, or pickled among the tokenizer's other attributes by
// save_vocabulary).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "xl/interop/txl_state_dict.h"

namespace xl::interop {

struct HfModelDir {
  std::string weights;    // DIR/model.safetensors, else DIR/pytorch_model.bin
  std::string vocab;      // DIR/vocab.bin or DIR/vocab.pkl; empty when neither is there
  std::string config_file;  // DIR/config.json
  nlohmann::json config;    // its contents; null when it is not there
};

// The files of directory `dir`. Fails with 66 naming the directory when it has neither weights
// file (saying so when it holds shards instead), and with 65 for a config.json that is not JSON or is another model type's.
HfModelDir hf_model_dir(const std::string& dir);

// What a TransfoXL config.json says beyond the tensors, filled into `given` as
// apply_saved_hyper_params does (`file` names config.json in messages).
void hf_config_params(const nlohmann::json& config, TorchHyperParams* given, const std::string& file);

}  // namespace xl::interop

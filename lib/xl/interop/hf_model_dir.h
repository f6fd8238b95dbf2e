// Hugging Face's TransfoXL model directory, as save_pretrained() writes it and the hub holds
// transfo-xl-wt103: the state_dict (model.safetensors or pytorch_model.bin, TransfoXLLMHeadModel's
// names, or their shards with the index naming each tensor's shard), config.json (what the tensors
// cannot show: same_length, clamp_len, pre_lnorm, dropouts, cutoffs, tying) and the vocab (vocab.bin,
// or vocab.pkl as later versions name it: a Transformer-XL Vocab's __dict__, torch.save'd, or
// pickled among the tokenizer's other attributes by save_vocabulary); the hub's also holds the
// corpus its model was trained on (corpus.bin).
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "xl/interop/txl_state_dict.h"

namespace xl::interop {

struct HfModelDir {
  // DIR/model.safetensors, else DIR/pytorch_model.bin, else the index of their shards
  // (DIR/model.safetensors.index.json, else DIR/pytorch_model.bin.index.json).
  std::string weights;
  std::vector<std::string> shards;              // the index's files (DIR/...), sorted; empty for one file
  std::map<std::string, std::string> shard_of;  // tensor name -> the shard the index puts it in
  std::string vocab;      // DIR/vocab.bin or DIR/vocab.pkl; empty when neither is there
  std::string config_file;  // DIR/config.json
  nlohmann::json config;    // its contents; null when it is not there
  bool lower_case = false;  // hf_lower_case(dir)
};

// The files of directory `dir`. Fails with 66 naming the directory when it has no weights file or
// index, and with 65 for an index without a weight_map of tensor names to file names in the
// directory, or a config.json that is not JSON or is another model type's.
HfModelDir hf_model_dir(const std::string& dir);

// DIR/vocab.bin, else DIR/vocab.pkl; empty when neither is there ("" is the current directory).
std::string hf_vocab_file(const std::string& dir);
// Whether transformers' tokenizer of DIR lowercases text: tokenizer_config.json's lower_case, else
// its default, false. It wins over the vocab file's own lower_case (TransfoXLTokenizer keeps the
// attributes it was made with over the pickled ones). 65 for a tokenizer_config.json that is not a
// JSON object or whose lower_case is not a bool.
bool hf_lower_case(const std::string& dir);
// DIR/corpus.bin (transformers' TransfoXLCorpus: the hub's transfo-xl-wt103 holds it beside the
// model); fails with 66 naming the directory when it is not there.
std::string hf_corpus_file(const std::string& dir);

// The state_dict in `dir`'s weights: its one file as parse_weights_file reads it, or its shards one
// at a time (the same format each), every tensor in the shard the index names: a tensor the index
// puts elsewhere or does not list, or one it lists that its shard lacks, fails with 65 naming both
// files. `key` (--key) applies to one torch.save file only (64 with shards).
WeightsFile read_hf_weights(const HfModelDir& dir, const std::string& key);

// What a TransfoXL config.json says beyond the tensors, filled into `given` as
// apply_saved_hyper_params does (`file` names config.json in messages); without
// tie_word_embeddings or tie_weight the output layers are tied, as transformers ties them.
void hf_config_params(const nlohmann::json& config, TorchHyperParams* given, const std::string& file);

}  // namespace xl::interop

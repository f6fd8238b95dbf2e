// Moving a model in and out of checkpoints: parameters by dotted name, config as JSON.
#pragma once
#include <string>

#include "xl/checkpoint/checkpoint.h"
#include "xl/model/transformer_xl.h"

namespace xl::model {

// Parameters and buffers (tied tensors once), as copies-free views of the live tensors.
checkpoint::TensorList model_tensors(const TransformerXL& model);

// Copies `tensors` into the model; every model tensor must be present with its shape, and no
// unknown name may remain (65, naming `file` and the tensor).
void load_model_tensors(TransformerXL& model, const checkpoint::TensorList& tensors, const std::string& file);

// A model built from the checkpoint's config and loaded with its tensors, in eval mode.
TransformerXL model_from_checkpoint(const checkpoint::Checkpoint& ckpt, const std::string& file);

// A checkpoint (`ckpt.model` empty) and its model, whose weights are read from the file straight
// into it, in eval mode: what a tool that runs a trained model loads, at the weights' size in
// memory, not twice it. Fails as checkpoint::load and model_from_checkpoint do.
struct LoadedModel {
  checkpoint::Checkpoint ckpt;
  TransformerXL model;
};
LoadedModel load_model(const std::string& path, const checkpoint::ExpectedVocab& expected = {},
                       bool with_training_state = false);

// The checkpoint's head mask [n_layer, n_head], or undefined when it has none.
torch::Tensor head_mask_of(const checkpoint::Checkpoint& ckpt);

}  // namespace xl::model

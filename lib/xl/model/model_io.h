// Moving a model in and out of checkpoints: parameters by dotted name, config as JSON.
#pragma once
#include <string>

#include "xl/h5/checkpoint.h"
#include "xl/model/transformer_xl.h"

namespace xl::model {

// Parameters and buffers (tied tensors once), as copies-free views of the live tensors.
h5::TensorList model_tensors(const TransformerXL& model);

// Copies `tensors` into the model; every model tensor must be present with its shape, and no
// unknown name may remain (65, naming `file` and the tensor).
void load_model_tensors(TransformerXL& model, const h5::TensorList& tensors, const std::string& file);

// A model built from the checkpoint's config and loaded with its tensors, in eval mode.
TransformerXL model_from_checkpoint(const h5::Checkpoint& ckpt, const std::string& file);

// The checkpoint's head mask [n_layer, n_head], or undefined when it has none.
torch::Tensor head_mask_of(const h5::Checkpoint& ckpt);

}  // namespace xl::model

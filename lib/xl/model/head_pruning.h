// Structural head pruning: a pruned model physically drops the removed heads' rows of
// qkv_net and r_net, their columns of o_net and their u, v biases, so it runs faster and gives the
// same outputs as the full model with those heads masked to zero.
//
// A keep pattern is an [n_layer, n_head] tensor (bool or 0/1 numbers); row l uses its first
// heads_in_layer(l) entries, so a model pruned before is pruned again by indexing its remaining
// heads 0..heads_in_layer(l)-1.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "xl/model/config.h"
#include "xl/model/transformer_xl.h"

namespace xl::model {

// `keep` as an [n_layer, n_head] bool tensor on the CPU with the entries beyond heads_in_layer(l)
// cleared. Fails with 65 when the shape is not [n_layer, n_head] or a value is not 0 or 1.
torch::Tensor heads_kept_mask(const ModelConfig& cfg, const torch::Tensor& keep);

// All heads of every layer kept: [n_layer, n_head] bool, true for the first heads_in_layer(l).
torch::Tensor all_heads_mask(const ModelConfig& cfg);

// The head mask (ForwardOptions::head_mask) with which `model` computes what remove_heads(model,
// keep) computes: [n_layer, n_head] of 0/1 in `dtype`.
torch::Tensor keep_to_head_mask(const ModelConfig& cfg, const torch::Tensor& keep, torch::Dtype dtype);

// Indices of the kept heads of layer `l` (ascending).
std::vector<int64_t> kept_heads(const ModelConfig& cfg, const torch::Tensor& keep, int64_t l);

// Heads kept per layer.
std::vector<int64_t> kept_head_counts(const ModelConfig& cfg, const torch::Tensor& keep);

// The config of the pruned model: heads_per_layer set to the kept counts (u, v become per layer).
ModelConfig pruned_config(const ModelConfig& cfg, const torch::Tensor& keep);

// A new model (same dtype, device and train/eval mode) with only the kept heads: qkv_net keeps the
// q, k and v rows of kept heads in its q|k|v stacking, r_net their rows, o_net their columns, and
// each layer gets its own u, v (copied from the shared or per-layer ones of the kept heads). Every
// other tensor is copied. A layer may lose all its heads: its attention then adds nothing.
TransformerXL remove_heads(const TransformerXL& model, const torch::Tensor& keep);

}  // namespace xl::model

// Every architectural hyper-parameter of a Transformer-XL, with JSON round trip and validation.
// Segment and memory lengths are not here: they belong to a run (training or evaluation), and one
// model can be evaluated with any memory length.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "xl/util/setting_origins.h"

namespace xl::model {

struct ModelConfig {
  int64_t n_token = 256;    // vocab size
  int64_t n_layer = 4;
  int64_t d_model = 128;
  int64_t n_head = 4;       // heads per layer (before pruning)
  int64_t d_head = 32;
  int64_t d_inner = 512;    // feed-forward width
  int64_t d_embed = 0;      // embedding width; 0 means d_model
  double dropout = 0.1;     // embeddings, pos-emb, attention output, feed-forward
  double dropatt = 0.0;     // attention probabilities
  bool pre_lnorm = false;   // layer norm before each sublayer instead of after
  bool untie_r = false;     // u, v biases per layer instead of shared by all layers
  int64_t clamp_len = 0;    // distances above this use this distance's embedding; 0: off
  bool same_length = false; // every query sees the same number of keys (mem_len)
  // Adaptive input and softmax (word level); empty cutoffs: a plain tied softmax (char level).
  std::vector<int64_t> cutoffs;
  int64_t div_val = 1;
  bool tie_weight = true;           // output weights shared with the input embedding
  std::vector<bool> tie_projs;      // per cluster: output projection shared with the input one
  double init_std = 0.02;           // N(0, init_std) for weights
  double proj_init_std = 0.01;      // N(0, proj_init_std) for adaptive projections
  // After structural pruning layers may keep different numbers of heads; empty: n_head each.
  std::vector<int64_t> heads_per_layer;
  // Attention variants (README "Attention variants"; model/attention_variants.h has the equations).
  std::string attention = "rel";   // rel | mgk (M key projections per head) | smgk (one key, M learned shifts)
  int64_t mgk_keys = 2;            // M: Gaussian keys per head
  std::string mgk_estep = "soft";  // soft: log sum_m pi_m N_m; hard: the most likely key only
  int64_t persistent_mem = 0;      // N learned key/value vectors per head and layer, in the softmax
  bool ff = true;                  // feed-forward sublayer (off needs persistent_mem > 0)
  bool adaptive_span = false;      // a learned soft limit on each head's attention span
  int64_t span_max = 0;            // S: the longest span a head may learn (0: a new training sets mem + tgt len)
  int64_t span_ramp = 32;          // R: the mask falls from 1 to 0 over R positions
  double span_loss = 2e-6;         // the loss term's coefficient: span_loss * S * mean(z) per layer
  // Compressive Transformer (Rae et al. 2020; model/compression.h): each layer compresses the
  // inputs that leave its memory, cmem_rate at a time, with cmem_fn (conv, dilated, max or mean)
  // into a compressed memory that a run's cmem_len sizes. 0: none (Transformer-XL's memory alone).
  int64_t cmem_rate = 0;
  std::string cmem_fn = "conv";

  bool is_mgk() const { return attention == "mgk" || attention == "smgk"; }
  // Anything but Transformer-XL's own attention: the variant path (model/attention_variants).
  bool has_variant() const { return is_mgk() || persistent_mem > 0 || adaptive_span; }
  bool compressive() const { return cmem_rate > 0; }

  int64_t embed_dim() const { return d_embed > 0 ? d_embed : d_model; }
  int64_t heads_in_layer(int64_t layer) const {
    return heads_per_layer.empty() ? n_head : heads_per_layer[static_cast<size_t>(layer)];
  }
  // u, v are per layer whenever layers differ in head count.
  bool per_layer_biases() const { return untie_r || !heads_per_layer.empty(); }

  // For a vocab of n_token entries: sets n_token and drops the cutoffs at or above it (a word
  // config written for WikiText-103 then fits a smaller corpus), with the tie_projs entries of the
  // clusters that go. Returns the cutoffs dropped.
  std::vector<int64_t> fit_to_vocab(int64_t vocab_size);

  // A lower bound on the parameter count (projections, feed-forward, one embedding entry per
  // token), in double: a config read from a file is checked against the tensors stored with it.
  double minimum_parameters() const;

  nlohmann::json to_json() const;
  // Unknown keys and bad values fail with 78 (config) naming `source`.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  // The same, with its values checked against where each came from (a file's, merged with a
  // command line's).
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source, const SettingOrigins& origins);
  // Fails with one line naming the offending key where its value came from: "--d-model ..." (64),
  // "tiny.ini: d-model ..." or "p1.h5: d_model ..." (78).
  void validate(const SettingOrigins& origins) const;
};

}  // namespace xl::model

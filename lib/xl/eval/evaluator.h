// Evaluation of a Transformer-XL language model over a whole token split (doc/conventions.md):
// the split is cut into batch_size parallel streams that together cover every token, consumed in
// segments of tgt_len with the memory carried from segment to segment, and the loss is weighted by
// token. The conventions, and how the reference implementations differ from them:
//
//   * Memory starts EMPTY (as TXL and NV; VV and AS attend to a zero-filled memory instead).
//   * Every token that has a prediction is scored: N - B tokens for a split of N tokens cut into B
//     streams (the first token of each stream has no prediction). The last, partial segment is
//     scored too (TXL, NV), and the loss is the token-weighted mean (VV drops the tail shorter than
//     tgt_len and averages segment means).
//   * Streams are contiguous: stream s holds tokens [start_s, start_s + L_s) with lengths that differ
//     by at most one (TXL trims the split to a multiple of B instead). The shorter streams are padded
//     in the last segment, and padded positions are excluded from the loss.
//   * warmup (NVIDIA's convention): only segments that start with every layer's memory full
//     (mem_len entries) are scored; the others only fill the memory.
//
// Evaluation never skips layers and never permutes heads; it honours a head mask. Memories keep
// their key/value projections within a memory budget (kv_cache_bytes). It runs without
// autograd in eval mode and restores the model's training flag and config afterwards.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "xl/checkpoint/checkpoint.h"
#include "xl/compute/precision.h"
#include "xl/model/transformer_xl.h"

namespace xl::eval {

// The compressed memory a checkpoint's run trained with (its train config's cmem_len; 0 for a
// Transformer-XL, or a checkpoint without one): evaluations take it unless given another.
int64_t trained_cmem_len(const checkpoint::Checkpoint& ckpt);

// A split to score needs a token and its successor.
constexpr int64_t kMinEvalTokens = 2;

struct EvalSettings {
  int64_t tgt_len = 128;
  int64_t mem_len = 0;
  int64_t cmem_len = 0;      // compressed memory slots (a model with cmem_rate; 0: none)
  int64_t batch_size = 10;
  std::optional<int64_t> clamp_len;  // unset: the model's own setting (0 = off)
  std::optional<bool> same_length;   // unset: the model's own setting
  bool warmup = false;       // NVIDIA's convention: score only tokens whose memory is full
  int64_t max_tokens = 0;    // 0: the whole split; else stop once about this many tokens are scored
  torch::Tensor head_mask;   // [n_layer, n_head] or undefined
  compute::Precision precision = compute::Precision::kFp32;  // of the matrix products
  // Each layer's memory keeps its key/value projections in place of its inputs (a segment then
  // projects only its own tokens, much faster with long memories: bench/HISTORY.md, long-memory
  // evaluation) when they need at most this many bytes (kv_cache_bytes).
  int64_t kv_cache_bytes = 4000000000;
  // Data parallel: this process evaluates streams [b * shard / shards, b * (shard + 1) / shards)
  // of the b streams; the shards' sums add up to the whole evaluation.
  int shard = 0, shards = 1;
  // A stop signal caught by the process (signals::catch_stop) ends the evaluation after its
  // segment, with EvalResult::stopped_by set: the tools keep the settings finished before.
  bool stop_on_signal = false;
};

struct EvalResult {
  double loss_sum = 0;       // sum of NLL (nats) over scored tokens
  int64_t tokens = 0;        // scored tokens
  double seconds = 0;
  // Seconds from the first segment that scored tokens to the end: with --warmup the segments that
  // fill the memory are left out, so that tokens / scoring_seconds is the speed at full memory.
  double scoring_seconds = 0;
  int stopped_by = 0;        // the signal that ended it early (stop_on_signal), or 0
  bool kv_cached = false;    // the memories kept their key/value projections (kv_cache_bytes allowed it)
  double loss() const;       // loss_sum / tokens (NaN when nothing was scored)
};

// Optional per-token output: called for each scored token with (stream, position in the split, nll).
using PerTokenSink = std::function<void(int64_t stream, int64_t index, float nll)>;

// Optional progress report, called after every segment: tokens scored so far, input positions
// consumed so far (over all streams, padding excluded) and the total to consume (N - B).
using ProgressFn = std::function<void(int64_t scored, int64_t consumed, int64_t total)>;

// Fails with 65 when `ids` has fewer than 2 tokens and 64 on bad settings. A split shorter than
// 2 x batch_size is cut into fewer streams (N / 2), so that every stream has a prediction.
EvalResult evaluate(model::TransformerXL& model, const std::vector<int32_t>& ids, const EvalSettings& s,
                    const PerTokenSink& sink = nullptr);
EvalResult evaluate(model::TransformerXL& model, const std::vector<int32_t>& ids, const EvalSettings& s,
                    const PerTokenSink& sink, const ProgressFn& progress);

// The same_length actually in force for `s` on `model`: same_length needs a memory (with
// mem_len 0 each query would see no key at all), so it is off when mem_len is 0.
bool effective_same_length(const model::TransformerXL& model, const EvalSettings& s);
// The clamp_len actually in force (0: off).
int64_t effective_clamp_len(const model::TransformerXL& model, const EvalSettings& s);

// The bytes the key/value projections of a full memory take for `streams` streams, in the dtype of
// the products (`precision`'s, or the model's for fp32), with the room that segments of tgt_len
// tokens grow into (model::row_window_capacity).
int64_t kv_cache_bytes(const model::TransformerXL& model, int64_t streams, int64_t mem_len, int64_t tgt_len,
                       compute::Precision precision);

// The number of parallel streams `evaluate` uses for a split of n tokens.
int64_t stream_count(int64_t n, int64_t batch_size);
// Whether evaluating `n` tokens with `s` scores any: with --warmup, some segment must start with a
// full memory, which a memory longer than the streams never has.
bool scores_any(const model::TransformerXL& model, int64_t n, const EvalSettings& s);

}  // namespace xl::eval

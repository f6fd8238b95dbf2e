// Segment-level recurrence state: for each layer, the inputs it saw in earlier segments (detached)
// and where in the stream they came from. Skip-Retain (phase 1) leaves a skipped layer's memory as
// it was, so its memory grows older than the other layers'; positions make the relative distances
// of such a memory exact.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "xl/checkpoint/tensor_list.h"
#include "xl/model/row_window.h"

namespace xl::model {

// A contiguous stretch of memory slots holding the inputs of stream positions [start, start+length).
struct MemoryRun {
  int64_t start = 0;
  int64_t length = 0;
};

struct LayerMemory {
  // [B, M, d_model], detached; undefined when empty, and when kv is kept (evaluation never reads
  // the memory's inputs then: they would only cost memory and a copy per segment).
  torch::Tensor hidden;
  std::vector<MemoryRun> runs;  // oldest first; lengths add up to M
  // [B, M, 2, H, d_head] (MGK: [B, M, 1 + M_keys, H, d_head], its extra keys after the values): the
  // attention's key and value projections of the memory, kept by evaluation
  // (ForwardOptions::cache_kv) so that each segment projects only its own tokens; empty when not
  // kept. A memory that keeps them cannot be trained on or saved.
  RowWindow kv;

  int64_t length() const;
  // Tokens between the newest slot and the current segment: 0 when written by the previous segment.
  int64_t gap(int64_t position) const;
};

struct Memory {
  std::vector<LayerMemory> layers;  // one per layer
  int64_t position = 0;             // stream position of the next segment's first token

  static Memory empty(int64_t n_layer);
  void reset();
  int64_t batch_size() const;
  // Appends a layer's input of the segment starting at `position` and keeps the newest `mem_len`.
  // kv_all, when not empty, holds the key/value projections [B, M + T, 2, H, d_head] of the old
  // memory and the input together (the attention's): they are kept in place of the input.
  static void append(LayerMemory* layer, const torch::Tensor& input, int64_t position, int64_t mem_len,
                     const RowWindow& kv_all = {});
  // Keeps each layer's newest `mem_len` slots.
  void trim(int64_t mem_len);
  // The same memory on `device`.
  void to(const torch::Device& device);
  // Mean over layers of the memory gap, in tokens.
  double mean_gap() const;

  // Streams [begin, end) of the batch (rows of every layer's memory).
  Memory rows(int64_t begin, int64_t end) const;
  // The memories of consecutive groups of streams as one (their positions and runs must agree:
  // batch chunks and data-parallel ranks of one step do).
  static Memory concat_rows(const std::vector<Memory>& parts);

  // As named tensors for a checkpoint: "position", and per layer l with a memory "l<l>.hidden"
  // [B, M, d_model] and "l<l>.runs" [R, 2] (start, length), all streams of the batch together.
  void to_tensors(checkpoint::TensorList* out) const;
  // Back from them (also from checkpoints of xl 0.1, which kept one memory per batch chunk as
  // "c<c>.*"); 65 naming `file` when the entries do not describe a memory of n_layer layers.
  static Memory from_tensors(const checkpoint::TensorList& list, int64_t n_layer, const std::string& file);
};

}  // namespace xl::model

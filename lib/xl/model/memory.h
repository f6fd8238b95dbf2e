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

namespace xl::model {

// A contiguous stretch of memory slots holding the inputs of stream positions [start, start+length).
struct MemoryRun {
  int64_t start = 0;
  int64_t length = 0;
};

struct LayerMemory {
  torch::Tensor hidden;   // [B, M, d_model], detached; undefined when empty
  std::vector<MemoryRun> runs;  // oldest first; lengths add up to M

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
  static void append(LayerMemory* layer, const torch::Tensor& input, int64_t position, int64_t mem_len);
  // Keeps each layer's newest `mem_len` slots.
  void trim(int64_t mem_len);
  // Mean over layers of the memory gap, in tokens.
  double mean_gap() const;

  // As named tensors for a checkpoint: PREFIX "position", and per layer l with a memory
  // PREFIX "l<l>.hidden" [B, M, d_model] and PREFIX "l<l>.runs" [R, 2] (start, length).
  void to_tensors(const std::string& prefix, checkpoint::TensorList* out) const;
  // Back from them; 65 naming `file` when the entries do not describe a memory of n_layer layers.
  static Memory from_tensors(const checkpoint::TensorList& list, const std::string& prefix, int64_t n_layer,
                             const std::string& file);
};

}  // namespace xl::model

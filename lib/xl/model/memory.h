// Segment-level recurrence state: for each layer, the inputs it saw in earlier segments (detached)
// and where in the stream they came from. Skip-Retain (phase 1) leaves a skipped layer's memory as
// it was, so its memory grows older than the other layers'; positions make the relative distances
// of such a memory exact.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
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
  // [B, C, d_model], detached, oldest first: the compressed memory of a Compressive Transformer
  // (model/compression.h), each slot made from cmem_rate inputs that left `hidden`; undefined
  // when empty. Attention reads it before the memory, each slot one position further back than
  // the one after it: the newest lies one position before the memory's oldest slot (before the
  // segment when the memory is empty), as Rae et al. and both public ports have it.
  torch::Tensor compressed;

  int64_t length() const;
  int64_t compressed_length() const { return compressed.defined() ? compressed.size(1) : 0; }
  // The keys attention reads, compressed memory included: `hidden` and `runs` with the compressed
  // slots as an older run before them (this memory itself when it has none).
  LayerMemory with_compressed(int64_t position) const;
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
  // The same, for a Compressive Transformer: the oldest inputs the memory drops, in whole groups of
  // `rate` (a remainder stays in the memory until its group is whole), are compressed by
  // `compress` into slots appended to the layer's compressed memory, which keeps its newest
  // `cmem_len`. Returns those dropped inputs [B, n * rate, d] (detached) and their compression
  // [B, n, d] (with its graph, for the training losses); both undefined when none left.
  static std::pair<torch::Tensor, torch::Tensor> append_compressing(
      LayerMemory* layer, const torch::Tensor& input, int64_t position, int64_t mem_len, int64_t cmem_len, int64_t rate,
      const std::function<torch::Tensor(const torch::Tensor&)>& compress);
  // Keeps each layer's newest `mem_len` slots (and `cmem_len` compressed ones; -1: all).
  void trim(int64_t mem_len, int64_t cmem_len = -1);
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
  // [B, M, d_model] and "l<l>.runs" [R, 2] (start, length), with a compressed one
  // "l<l>.compressed" [B, C, d_model], all streams of the batch together.
  void to_tensors(checkpoint::TensorList* out) const;
  // Back from them (also from checkpoints of xl 0.1, which kept one memory per batch chunk as
  // "c<c>.*"); 65 naming `file` when the entries do not describe a memory of n_layer layers.
  static Memory from_tensors(const checkpoint::TensorList& list, int64_t n_layer, const std::string& file);
};

}  // namespace xl::model

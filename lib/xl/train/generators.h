// The run's random streams, one generator each and seeded from --seed: the Skip-Retain draws, the
// SCH permutations and dropout. Separate streams pair runs: two runs that differ only in beta
// skip the same layers at the same steps, and two that differ only in the skip schedule draw the
// same dropout masks. (Data needs none: streams are read in order. The initial weights come from
// a generator of their own, see TransformerXL::reset_parameters.) Checkpoints carry each state.
#pragma once
#include <cstdint>
#include <string>

#include "xl/checkpoint/tensor_list.h"
#include "xl/util/rng.h"

namespace xl::train {

struct Generators {
  Rng skip;        // one Bernoulli draw per layer per step (model::draw_skips)
  Rng cross_head;  // one uniform per layer per step, and a permutation when it fires

  // Seeds all three streams; dropout draws from LibTorch's default generators (CPU and, where
  // there is one, the GPU's), seeded with `seed` and the data-parallel `rank` (masks differ per rank).
  static Generators seeded(uint64_t seed, int rank = 0);
  // "skip", "cross_head", "dropout_cpu" and, on a GPU, "dropout_cuda" (this process's dropout).
  void to_tensors(checkpoint::TensorList* out) const;
  // The name a data-parallel rank's dropout state has in a checkpoint: "dropout_cpu" for rank 0,
  // "dropout_cpu.r1" for rank 1, ...
  static std::string rank_name(const std::string& name, int rank);
  // The skip and SCH streams, and `rank`'s dropout stream; false when the checkpoint has no dropout
  // state for `rank` (written with fewer ranks): this rank's masks then draw afresh. 65 naming
  // `file` when a state is missing or malformed.
  bool load(const checkpoint::TensorList& states, const std::string& file, int rank = 0);

  // Every stream as it is now, to be put back (a training step undone): copies of the generators,
  // where to_tensors would cost each step a text round trip of two engines' states.
  struct Saved {
    Rng skip, cross_head;
    at::Generator dropout_cpu, dropout_cuda;  // the latter undefined without a GPU
  };
  Saved save() const;
  void put_back(const Saved& saved);
};

}  // namespace xl::train

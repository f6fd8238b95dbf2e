// The xl checkpoint (man 5 xl-checkpoint): one HDF5 file with the model and training configs,
// every parameter by dotted name, optimizer state, generator states, the data cursor, the current
// memories, the head mask and analysis results. Written to a temp file and renamed; `complete=1`
// is the last thing written, so a reader can tell a finished file from an interrupted one.
#pragma once
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "xl/checkpoint/run_state.h"
#include "xl/checkpoint/tensor_list.h"
#include "xl/h5/formats.h"
#include "xl/h5/h5.h"
#include "xl/text/vocab.h"

namespace xl::checkpoint {


struct Checkpoint {
  std::string phase;            // phase1, phase2, pruned, imported
  nlohmann::json model_config;  // ModelConfig as JSON
  nlohmann::json train_config;  // training settings (null when not trained by xl)
  RunState state;               // step, tokens, data cursor, schedule position, phases, validation history
  text::Vocab vocab;            // embedded; its sha256 identifies compatible token files
  TensorList model;             // /model/<name>: parameters and buffers
  TensorList optimizer;         // /optimizer/<name>: moments, step counts
  TensorList rng;               // /rng/<name>: generator states (uint8)
  TensorList memory;            // /memory/<name>: current memories and their ages
  TensorList analysis;          // /analysis/<name>: head_mask [L,H], head_importance, ...
};

// Writes atomically (PATH.tmp.PID then rename). Refuses an existing PATH without `force` (73).
void save(const std::string& path, const Checkpoint& ckpt, bool force);

// The vocab a checkpoint must have been trained on: that of the tokens file `file` (an empty sha256
// accepts any).
struct ExpectedVocab {
  std::string sha256;
  std::string file;
};

// Loads a checkpoint ("-" reads stdin). Fails with 65 and one line naming the file for: not an
// HDF5 file, another xl format, a newer format version, a missing `complete` flag, a corrupt or
// truncated file, or another vocab than `expected`.
// `with_training_state` false leaves /optimizer, /rng and /memory unread (empty lists): all that
// evaluation needs, in a third of the memory of a trained checkpoint.
Checkpoint load(const std::string& path, const ExpectedVocab& expected = {},
                           bool with_training_state = true);

// A checkpoint read in steps, so that a model built from its config takes its weights straight
// into its own tensors and never holds them twice (load reads every group as new tensors). Opening
// checks the file as load does and reads the configs, state and vocab.
class Reader {
 public:
  explicit Reader(const std::string& path, const ExpectedVocab& expected = {});
  const Checkpoint& header() const { return ckpt_; }  // no tensors yet
  const std::string& file() const { return file_.name(); }
  // Elements stored in /model/, from its datasets' shapes (nothing read).
  double model_elements() const;
  // Reads /model/ into `into`, each tensor from the dataset of its name (converted to its dtype).
  // Every one must be stored with its shape, and no stored one left over (65, naming the file and
  // the tensor).
  void read_model_into(const TensorList& into);
  // The checkpoint: the header and its tensor groups (/model/ empty once read_model_into has read
  // it; without training state, /optimizer, /rng and /memory empty too).
  Checkpoint finish(bool with_training_state);

 private:
  h5::File file_;
  Checkpoint ckpt_;
  bool model_read_ = false;
};

// One tensor as one dataset (also used by xl-inspect). write_tensor copies a non-contiguous or
// non-CPU tensor to contiguous CPU memory and writes it in one call; 0-d tensors become scalar
// datasets; bool, float16 and bfloat16 are stored as uint8/uint16 with attribute `torch_dtype`;
// `order` (>= 0) records the position in its list. read_tensor returns a CPU tensor of the
// stored dtype and fails with 65 naming `file` when the dataset cannot be read.
void write_tensor(hid_t loc, const std::string& path, const torch::Tensor& tensor, int64_t order,
                  const std::string& file);
torch::Tensor read_tensor(hid_t loc, const std::string& path, const std::string& file);

}  // namespace xl::checkpoint

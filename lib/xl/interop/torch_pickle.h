// PyTorch's torch.save files, read and written without Python. LibTorch 1.13's torch::pickle_load
// turns the OrderedDict of a state_dict into None (it only expects OrderedDicts as tensor hooks),
// so the zip archive's data.pkl is read here with a small unpickler that knows the objects
// torch.save writes for tensors, dicts and modules, and refuses anything else. Writing streams a
// state_dict as torch.save writes one, which torch.load(weights_only=True) reads.
#pragma once
#include <iosfwd>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "xl/checkpoint/tensor_list.h"

namespace xl::interop {

// What a torch.save file holds: the tensors of a state_dict (a dict or OrderedDict of name ->
// tensor), or of a whole pickled nn.Module (torch.save(model, f), as Transformer-XL's train.py
// writes model.pt) named as its state_dict() names them, or of another pickled object (its
// data_utils.py's corpus cache, cache.pt) named by attribute, or of a dict that holds no tensors
// (an object's __dict__: Hugging Face's vocab.bin) or names a "dataset" beside its "train" split (a
// Corpus's __dict__: Hugging Face's corpus.bin) taken as an object of class "dict". NumPy arrays of
// numbers are tensors too (numpy_array.h). For an object
// or module also the class of it and of each object and module inside, and their plain attributes
// (numbers, bools, strings, lists of them, dicts of str to them) by dotted name: {"same_length":
// true, "layers.0.dec_attn.pre_lnorm": false, "vocab.idx2sym": [...], ...}.
struct TorchFile {
  checkpoint::TensorList tensors;
  std::map<std::string, std::string> classes;  // "" (the root) -> "mem_transformer.MemTransformerLM"; empty for a state_dict
  std::map<std::string, nlohmann::json> attributes;
};

// Reads a file written by torch.save in the zip format (PyTorch 1.6 and later) or the legacy one
// before it (pickles back to back, then the storages), or by pickle.dump (objects without tensors:
// Hugging Face's vocab.pkl): a state_dict or a module, or with `key` the entry `key` of a dict
// holding one (NVIDIA's checkpoints keep a state_dict under model_state).
// Tensors come back on the CPU in their stored dtype, in file order (a module's in state_dict
// order); tensors sharing storage stay shared. "-" reads stdin. Nothing is executed: classes are
// names. Fails with 65 naming the file: not a torch.save file, objects other than tensors, dicts and
// modules where they sit, a missing key, storages that do not add up.
// A zip archive on disk is read record by record, holding only its tensors' bytes.
TorchFile read_torch_file(const std::string& path, const std::string& key = "");
// The same from the bytes of such a file; `display` names it in errors.
TorchFile parse_torch_file(const std::string& bytes, const std::string& key, const std::string& display);
// Whether PATH is a file on disk that read_torch_file reads record by record.
bool is_torch_zip_file(const std::string& path);

// Writes a torch.save-compatible file holding a dict name -> tensor to `out` (tensors are detached
// and written as they are; the same tensor under two names is stored once).
void write_torch_state_dict(const checkpoint::TensorList& tensors, std::ostream& out);

}  // namespace xl::interop

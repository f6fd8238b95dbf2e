// PyTorch's torch.save files, read and written without Python. LibTorch 1.13's torch::pickle_load
// turns the OrderedDict of a state_dict into None (it only expects OrderedDicts as tensor hooks),
// so the zip archive's data.pkl is read here with a small unpickler that knows the objects
// torch.save writes for tensors and dicts, and refuses anything else. Writing uses
// torch::pickle_save (a plain dict, which PyTorch's torch.load reads).
#pragma once
#include <string>

#include "xl/checkpoint/tensor_list.h"

namespace xl::interop {

// Reads a file written by torch.save in the zip format (PyTorch >= 1.6): a dict or OrderedDict of
// name -> tensor, or with `key` the entry `key` of a dict holding one (NVIDIA's checkpoints keep it
// under model_state). Tensors come back on the CPU in their stored dtype, in file order; tensors
// sharing storage stay shared. "-" reads stdin. Fails with 65 naming the file: not a zip archive
// (the legacy pre-1.6 format gets a hint), objects other than tensors and dicts, a missing key.
checkpoint::TensorList read_torch_state_dict(const std::string& path, const std::string& key = "");
// The same from the bytes of such a file; `display` names it in errors.
checkpoint::TensorList parse_torch_state_dict(const std::string& bytes, const std::string& key, const std::string& display);

// The bytes of a torch.save-compatible file holding a dict name -> tensor (tensors are detached
// and written as they are; the same tensor under two names is stored once).
std::string torch_state_dict_bytes(const checkpoint::TensorList& tensors);

}  // namespace xl::interop

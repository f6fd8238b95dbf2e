// A small unpickler for what torch.save writes (data.pkl in a zip archive, or the legacy format's
// pickles back to back): Python values as a tree of PyVal, tensors built over storages that come
// from the archive's records (or are allocated empty, to be filled by the legacy reader), NumPy
// arrays and dtypes, and no code ever run: a class is a name, a call builds an object.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace caffe2::serialize {
class PyTorchStreamReader;
}

namespace xl::interop {

struct PyVal;
using Val = std::shared_ptr<PyVal>;

struct PyVal {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kBytes, kTuple, kList, kDict, kGlobal, kObject, kStorage, kTensor };
  Kind kind = Kind::kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;                            // str, bytes, global "module.name", object's class
  std::vector<Val> items;                   // tuple, list
  std::vector<std::pair<Val, Val>> dict;    // dict (insertion order); an object's state (__dict__)
  torch::Tensor tensor;                     // storage (1-D, its dtype) or tensor
  // Where each str key of `dict` sits, for its first `indexed` entries (set_items keeps it).
  std::unique_ptr<std::unordered_map<std::string, size_t>> key_index;
  size_t indexed = 0;

  PyVal() = default;
  PyVal(const PyVal&) = delete;
  PyVal& operator=(const PyVal&) = delete;
  // Releases what it holds without recursion: a few bytes of pickle nest lists a million deep.
  ~PyVal() {
    std::vector<Val> pending;
    auto take = [&](PyVal& v) {
      for (auto& x : v.items) pending.push_back(std::move(x));
      for (auto& [k, x] : v.dict) {
        pending.push_back(std::move(k));
        pending.push_back(std::move(x));
      }
      v.items.clear();
      v.dict.clear();
    };
    take(*this);
    while (!pending.empty()) {
      Val v = std::move(pending.back());
      pending.pop_back();
      if (v && v.use_count() == 1) take(*v);
    }
  }
};

Val make(PyVal::Kind k);
Val make_int(int64_t i);
Val make_str(PyVal::Kind k, std::string s);
// "object mem_transformer.MemTransformerLM", "list", ...; after "a" or "an" with a_describe.
std::string describe(const Val& v);
std::string a_describe(const Val& v);

// The pickle at `start` of `data`, read to its STOP opcode. Storages come from the zip archive
// `reader`; without one (the legacy format) they are allocated empty. `file` and `what` name it
// in errors (65).
struct Unpickled {
  Val root;
  size_t end = 0;                         // where the pickle ended
  std::map<std::string, Val> storages;    // by key, as the pickle named them
};
Unpickled unpickle(const std::string& data, size_t start, caffe2::serialize::PyTorchStreamReader* reader,
                   const std::string& file, const std::string& what);

}  // namespace xl::interop

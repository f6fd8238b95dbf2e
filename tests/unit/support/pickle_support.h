// Writing the bytes of torch.save by hand for the torch.save reader's tests: pickle opcodes
// (protocol 2), zip archives as PyTorch writes them, raw storages, and what
// write_torch_state_dict writes.
#pragma once
#include <torch/torch.h>

#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "xl/interop/torch_pickle.h"

namespace xl::test {

// The bytes write_torch_state_dict writes.
inline std::string state_dict_bytes(const xl::checkpoint::TensorList& sd) {
  std::ostringstream os;
  xl::interop::write_torch_state_dict(sd, os);
  return os.str();
}

// Emits pickle opcodes (protocol 2, as torch.save).
struct Pickle {
  std::string s;
  void op(uint8_t c) { s += static_cast<char>(c); }
  void u32(uint32_t v) {
    for (int k = 0; k < 4; ++k) s += static_cast<char>((v >> (8 * k)) & 0xff);
  }
  void str(const std::string& x) {
    op('X');
    u32(static_cast<uint32_t>(x.size()));
    s += x;
  }
  void global(const std::string& module, const std::string& name) { s += "c" + module + "\n" + name + "\n"; }
  void int1(uint8_t v) {
    op('K');
    op(v);
  }
  void put(uint8_t k) {
    op('q');
    op(k);
  }
  void get(uint8_t k) {
    op('h');
    op(k);
  }
  void ints(const std::vector<uint8_t>& v) {
    op('(');
    for (auto x : v) int1(x);
    op('t');
  }
  // {key: value, ...}: `items` pushes the keys and values in turn.
  template <typename F>
  void dict(F items) {
    op('}');
    op('(');
    items();
    op('u');
  }
  void str_list(const std::vector<std::string>& v) {
    op(']');
    op('(');
    for (const auto& x : v) str(x);
    op('e');
  }
  void ordered_dict() {
    global("collections", "OrderedDict");
    op(')');
    op('R');
  }
  // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
  void tensor(const std::string& storage_type, const std::string& key, uint8_t numel, uint8_t offset,
              const std::vector<uint8_t>& size, const std::vector<uint8_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2");
    op('(');
    op('(');
    str("storage");
    global("torch", storage_type);
    str(key);
    str("cpu");
    int1(numel);
    op('t');
    op('Q');
    int1(offset);
    ints(size);
    ints(stride);
    op(0x89);
    ordered_dict();
    op('t');
    op('R');
  }
};

inline std::string zip(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
      out.append(static_cast<const char*>(p), n);
      return n;
    });
    for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
    writer.writeEndOfFile();
  }
  return out;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace xl::test

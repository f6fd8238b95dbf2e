#include "xl/model/torch_import.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "xl/model/model_io.h"
#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl::model {

// ================================================================================================
// A small unpickler for torch.save's data.pkl
// ================================================================================================
namespace {

struct PyVal;
using Val = std::shared_ptr<PyVal>;

struct PyVal {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kBytes, kTuple, kList, kDict, kGlobal, kObject, kStorage, kTensor };
  Kind kind = Kind::kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;                            // str, bytes, global "module.name", object's class
  std::vector<Val> items;                   // tuple, list
  std::vector<std::pair<Val, Val>> dict;    // dict (insertion order)
  torch::Tensor tensor;                     // storage (1-D, its dtype) or tensor
};

Val make(PyVal::Kind k) {
  auto v = std::make_shared<PyVal>();
  v->kind = k;
  return v;
}
Val make_int(int64_t i) {
  auto v = make(PyVal::Kind::kInt);
  v->i = i;
  return v;
}
Val make_str(PyVal::Kind k, std::string s) {
  auto v = make(k);
  v->s = std::move(s);
  return v;
}

const char* kind_name(PyVal::Kind k) {
  switch (k) {
    case PyVal::Kind::kNone: return "None";
    case PyVal::Kind::kBool: return "bool";
    case PyVal::Kind::kInt: return "int";
    case PyVal::Kind::kFloat: return "float";
    case PyVal::Kind::kStr: return "str";
    case PyVal::Kind::kBytes: return "bytes";
    case PyVal::Kind::kTuple: return "tuple";
    case PyVal::Kind::kList: return "list";
    case PyVal::Kind::kDict: return "dict";
    case PyVal::Kind::kGlobal: return "class or function";
    case PyVal::Kind::kObject: return "object";
    case PyVal::Kind::kStorage: return "storage";
    case PyVal::Kind::kTensor: return "tensor";
  }
  return "?";
}

std::string describe(const Val& v) {
  if (v->kind == PyVal::Kind::kObject || v->kind == PyVal::Kind::kGlobal) return std::string(kind_name(v->kind)) + " " + v->s;
  return kind_name(v->kind);
}

torch::Dtype storage_dtype(const std::string& type, const std::string& file) {
  static const std::map<std::string, torch::Dtype> types = {
      {"torch.FloatStorage", torch::kFloat32},   {"torch.DoubleStorage", torch::kFloat64},
      {"torch.HalfStorage", torch::kFloat16},    {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kInt64},      {"torch.IntStorage", torch::kInt32},
      {"torch.ShortStorage", torch::kInt16},     {"torch.CharStorage", torch::kInt8},
      {"torch.ByteStorage", torch::kUInt8},      {"torch.BoolStorage", torch::kBool},
      {"torch.UntypedStorage", torch::kUInt8},
  };
  auto it = types.find(type);
  XL_CHECK(it != types.end(), kExitDataErr, file << ": unsupported tensor storage type " << type);
  return it->second;
}

class Unpickler {
 public:
  Unpickler(const std::string& data, caffe2::serialize::PyTorchStreamReader& reader, std::string file)
      : data_(data), reader_(reader), file_(std::move(file)) {}

  Val run() {
    while (true) {
      XL_CHECK(pos_ < data_.size(), kExitDataErr, file_ << ": data.pkl ends without a STOP opcode");
      const size_t at = pos_;
      const uint8_t op = byte();
      switch (op) {
        case 0x80: byte(); break;                        // PROTO
        case 0x95: bytes(8); break;                      // FRAME
        case '.':                                        // STOP
          XL_CHECK(stack_.size() == 1, kExitDataErr, file_ << ": data.pkl leaves " << stack_.size() << " objects");
          return stack_.back();
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case '0': pop(); break;                          // POP
        case '1': pop_mark(); break;                     // POP_MARK
        case '2': push(top()); break;                    // DUP
        case 'N': push(make(PyVal::Kind::kNone)); break;
        case 0x88: case 0x89: {                          // NEWTRUE, NEWFALSE
          auto v = make(PyVal::Kind::kBool);
          v->i = op == 0x88;
          push(v);
          break;
        }
        case 'J': push(make_int(static_cast<int32_t>(le(4)))); break;  // BININT
        case 'K': push(make_int(static_cast<int64_t>(le(1)))); break;  // BININT1
        case 'M': push(make_int(static_cast<int64_t>(le(2)))); break;  // BININT2
        case 0x8a: push(make_int(long_int(le(1)))); break;             // LONG1
        case 0x8b: push(make_int(long_int(le(4)))); break;             // LONG4
        case 'G': {                                                    // BINFLOAT (big-endian)
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | byte();
          auto v = make(PyVal::Kind::kFloat);
          std::memcpy(&v->f, &bits, 8);
          push(v);
          break;
        }
        case 'X': push(make_str(PyVal::Kind::kStr, bytes(le(4)))); break;     // BINUNICODE
        case 0x8c: push(make_str(PyVal::Kind::kStr, bytes(le(1)))); break;    // SHORT_BINUNICODE
        case 0x8d: push(make_str(PyVal::Kind::kStr, bytes(le(8)))); break;    // BINUNICODE8
        case 'T': push(make_str(PyVal::Kind::kStr, bytes(le(4)))); break;     // BINSTRING
        case 'U': push(make_str(PyVal::Kind::kStr, bytes(le(1)))); break;     // SHORT_BINSTRING
        case 'B': push(make_str(PyVal::Kind::kBytes, bytes(le(4)))); break;   // BINBYTES
        case 'C': push(make_str(PyVal::Kind::kBytes, bytes(le(1)))); break;   // SHORT_BINBYTES
        case 0x8e: push(make_str(PyVal::Kind::kBytes, bytes(le(8)))); break;  // BINBYTES8
        case ')': push(make(PyVal::Kind::kTuple)); break;                     // EMPTY_TUPLE
        case 't': {                                                           // TUPLE
          auto v = make(PyVal::Kind::kTuple);
          v->items = pop_mark();
          push(v);
          break;
        }
        case 0x85: case 0x86: case 0x87: {                                    // TUPLE1..3
          auto v = make(PyVal::Kind::kTuple);
          v->items = pop_n(op - 0x84);
          push(v);
          break;
        }
        case ']': push(make(PyVal::Kind::kList)); break;                      // EMPTY_LIST
        case 'l': {                                                           // LIST
          auto v = make(PyVal::Kind::kList);
          v->items = pop_mark();
          push(v);
          break;
        }
        case 'a': {                                                           // APPEND
          Val x = pop();
          list_top()->items.push_back(x);
          break;
        }
        case 'e': {                                                           // APPENDS
          auto xs = pop_mark();
          auto& items = list_top()->items;
          items.insert(items.end(), xs.begin(), xs.end());
          break;
        }
        case '}': push(make(PyVal::Kind::kDict)); break;                      // EMPTY_DICT
        case 'd': {                                                           // DICT
          auto v = make(PyVal::Kind::kDict);
          set_items(v, pop_mark());
          push(v);
          break;
        }
        case 's': {                                                           // SETITEM
          Val value = pop(), key = pop();
          set_items(dict_top(), {key, value});
          break;
        }
        case 'u': {                                                           // SETITEMS
          auto xs = pop_mark();
          set_items(dict_top(), xs);
          break;
        }
        case 'c': {                                                           // GLOBAL
          std::string module = line(), name = line();
          push(make_str(PyVal::Kind::kGlobal, module + "." + name));
          break;
        }
        case 0x93: {                                                          // STACK_GLOBAL
          Val name = pop(), module = pop();
          XL_CHECK(name->kind == PyVal::Kind::kStr && module->kind == PyVal::Kind::kStr, kExitDataErr,
                   file_ << ": bad STACK_GLOBAL in data.pkl");
          push(make_str(PyVal::Kind::kGlobal, module->s + "." + name->s));
          break;
        }
        case 'q': memo_[le(1)] = top(); break;           // BINPUT
        case 'r': memo_[le(4)] = top(); break;           // LONG_BINPUT
        case 'p': memo_[std::stoull(line())] = top(); break;  // PUT
        case 0x94: memo_[memo_.size()] = top(); break;   // MEMOIZE
        case 'h': push(memo(le(1))); break;              // BINGET
        case 'j': push(memo(le(4))); break;              // LONG_BINGET
        case 'g': push(memo(std::stoull(line()))); break;  // GET
        case 'R': case 0x81: {                           // REDUCE, NEWOBJ
          Val args = pop(), callable = pop();
          push(call(callable, args));
          break;
        }
        case 'b': {                                      // BUILD: state of an object; not needed
          pop();
          top();
          break;
        }
        case 'Q': push(persistent(pop())); break;        // BINPERSID
        default:
          XL_FAIL(kExitDataErr, file_ << ": unsupported pickle opcode 0x" << std::hex << int(op) << std::dec
                                      << " at byte " << at << " of data.pkl");
      }
    }
  }

 private:
  uint8_t byte() {
    XL_CHECK(pos_ < data_.size(), kExitDataErr, file_ << ": data.pkl is truncated");
    return static_cast<uint8_t>(data_[pos_++]);
  }
  std::string bytes(uint64_t n) {
    XL_CHECK(n <= data_.size() - pos_, kExitDataErr, file_ << ": data.pkl is truncated");
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t le(int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v |= static_cast<uint64_t>(byte()) << (8 * k);
    return v;
  }
  int64_t long_int(uint64_t n) {  // little-endian two's complement of n bytes
    XL_CHECK(n <= 8, kExitDataErr, file_ << ": integer of " << n << " bytes in data.pkl is too large");
    if (n == 0) return 0;
    uint64_t v = le(static_cast<int>(n));
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);
    return static_cast<int64_t>(v);
  }
  std::string line() {
    auto end = data_.find('\n', pos_);
    XL_CHECK(end != std::string::npos, kExitDataErr, file_ << ": data.pkl is truncated");
    std::string s = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  void push(Val v) { stack_.push_back(std::move(v)); }
  Val pop() {
    XL_CHECK(!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()), kExitDataErr,
             file_ << ": malformed data.pkl (stack underflow)");
    Val v = stack_.back();
    stack_.pop_back();
    return v;
  }
  const Val& top() {
    XL_CHECK(!stack_.empty(), kExitDataErr, file_ << ": malformed data.pkl (stack underflow)");
    return stack_.back();
  }
  std::vector<Val> pop_n(size_t n) {
    XL_CHECK(stack_.size() >= n, kExitDataErr, file_ << ": malformed data.pkl (stack underflow)");
    std::vector<Val> out(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<Val> pop_mark() {
    XL_CHECK(!marks_.empty(), kExitDataErr, file_ << ": malformed data.pkl (no mark)");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Val> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Val memo(uint64_t k) {
    auto it = memo_.find(k);
    XL_CHECK(it != memo_.end(), kExitDataErr, file_ << ": malformed data.pkl (memo " << k << " unset)");
    return it->second;
  }
  Val list_top() {
    Val v = top();
    XL_CHECK(v->kind == PyVal::Kind::kList, kExitDataErr, file_ << ": malformed data.pkl (append to " << describe(v) << ")");
    return v;
  }
  Val dict_top() {
    Val v = top();
    XL_CHECK(v->kind == PyVal::Kind::kDict, kExitDataErr,
             file_ << ": data.pkl sets items of a " << describe(v) << ", not of a dict");
    return v;
  }
  void set_items(const Val& dict, const std::vector<Val>& kv) {
    XL_CHECK(kv.size() % 2 == 0, kExitDataErr, file_ << ": malformed data.pkl (odd SETITEMS)");
    for (size_t k = 0; k < kv.size(); k += 2) {
      bool replaced = false;
      if (kv[k]->kind == PyVal::Kind::kStr)
        for (auto& [key, value] : dict->dict)
          if (key->kind == PyVal::Kind::kStr && key->s == kv[k]->s) value = kv[k + 1], replaced = true;
      if (!replaced) dict->dict.emplace_back(kv[k], kv[k + 1]);
    }
  }

  // ('storage', storage_type, key, location, numel): the tensor data in record data/<key>.
  Val persistent(const Val& pid) {
    XL_CHECK(pid->kind == PyVal::Kind::kTuple && pid->items.size() >= 5 && pid->items[0]->kind == PyVal::Kind::kStr &&
                 pid->items[0]->s == "storage" && pid->items[1]->kind == PyVal::Kind::kGlobal &&
                 pid->items[2]->kind == PyVal::Kind::kStr && pid->items[4]->kind == PyVal::Kind::kInt,
             kExitDataErr, file_ << ": unsupported persistent object in data.pkl (not a tensor storage)");
    const std::string key = pid->items[2]->s;
    auto cached = storages_.find(key);
    if (cached != storages_.end()) return cached->second;
    torch::Dtype dtype = storage_dtype(pid->items[1]->s, file_);
    const int64_t numel = pid->items[4]->i;
    const std::string record = "data/" + key;
    XL_CHECK(reader_.hasRecord(record), kExitDataErr, file_ << ": the archive lacks record " << record);
    auto [ptr, size] = reader_.getRecord(record);
    const size_t want = static_cast<size_t>(numel) * c10::elementSize(dtype);
    XL_CHECK(size == want, kExitDataErr,
             file_ << ": record " << record << " holds " << size << " bytes, its storage needs " << want);
    auto v = make(PyVal::Kind::kStorage);
    v->tensor = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
    if (size) std::memcpy(v->tensor.data_ptr(), ptr.get(), size);
    storages_.emplace(key, v);
    return v;
  }

  std::vector<int64_t> ints(const Val& v, const char* what) {
    XL_CHECK(v->kind == PyVal::Kind::kTuple || v->kind == PyVal::Kind::kList, kExitDataErr,
             file_ << ": tensor " << what << " is a " << describe(v) << ", not a tuple");
    std::vector<int64_t> out;
    for (const auto& x : v->items) {
      XL_CHECK(x->kind == PyVal::Kind::kInt, kExitDataErr, file_ << ": tensor " << what << " holds a " << describe(x));
      out.push_back(x->i);
    }
    return out;
  }

  Val call(const Val& callable, const Val& args) {
    XL_CHECK(args->kind == PyVal::Kind::kTuple, kExitDataErr, file_ << ": malformed data.pkl (call without a tuple)");
    const auto& a = args->items;
    if (callable->kind != PyVal::Kind::kGlobal) return make_str(PyVal::Kind::kObject, "?");
    const std::string& fn = callable->s;
    if (fn == "collections.OrderedDict" || fn == "builtins.dict") {
      auto d = make(PyVal::Kind::kDict);
      if (!a.empty() && a[0]->kind == PyVal::Kind::kList)
        for (const auto& kv : a[0]->items)
          if (kv->kind == PyVal::Kind::kTuple && kv->items.size() == 2) set_items(d, kv->items);
      return d;
    }
    if (fn == "torch._utils._rebuild_tensor_v2" || fn == "torch._utils._rebuild_tensor") {
      XL_CHECK(a.size() >= 4 && a[0]->kind == PyVal::Kind::kStorage && a[1]->kind == PyVal::Kind::kInt, kExitDataErr,
               file_ << ": malformed " << fn << " call in data.pkl");
      const torch::Tensor& storage = a[0]->tensor;
      const int64_t offset = a[1]->i;
      auto size = ints(a[2], "size"), stride = ints(a[3], "stride");
      XL_CHECK(size.size() == stride.size(), kExitDataErr, file_ << ": tensor size and stride differ in length");
      int64_t last = offset, numel = 1;
      for (size_t d = 0; d < size.size(); ++d) {
        XL_CHECK(size[d] >= 0 && stride[d] >= 0, kExitDataErr, file_ << ": negative tensor size or stride");
        numel *= size[d];
        if (size[d] > 0) last += (size[d] - 1) * stride[d];
      }
      XL_CHECK(numel == 0 || (offset >= 0 && last < storage.numel()), kExitDataErr,
               file_ << ": a tensor reaches past the end of its storage");
      auto v = make(PyVal::Kind::kTensor);
      v->tensor = numel == 0 ? torch::empty(size, storage.options()) : storage.as_strided(size, stride, offset);
      return v;
    }
    if (fn == "torch.jit._pickle.restore_type_tag") {  // torch::pickle_save wraps its value in a type tag
      XL_CHECK(!a.empty(), kExitDataErr, file_ << ": malformed " << fn << " call");
      return a[0];
    }
    if (fn == "torch._utils._rebuild_parameter" || fn == "torch._utils._rebuild_parameter_with_state") {
      XL_CHECK(!a.empty() && a[0]->kind == PyVal::Kind::kTensor, kExitDataErr, file_ << ": malformed " << fn << " call");
      return a[0];
    }
    // Anything else (argparse.Namespace, numpy scalars...) is kept opaque: fine unless a tensor
    // is expected where it sits.
    return make_str(PyVal::Kind::kObject, fn);
  }

  const std::string& data_;
  caffe2::serialize::PyTorchStreamReader& reader_;
  std::string file_;
  size_t pos_ = 0;
  std::vector<Val> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Val> memo_;
  std::map<std::string, Val> storages_;
};

// The state_dict of a parsed file: `root` itself or its entry `key`.
h5::TensorList state_dict_of(const Val& root, const std::string& key, const std::string& file) {
  Val d = root;
  XL_CHECK(d->kind == PyVal::Kind::kDict, kExitDataErr,
           file << ": holds a " << describe(d) << ", not a state_dict (torch.save(model.state_dict(), f) writes one)");
  if (!key.empty()) {
    Val found;
    std::string keys;
    for (const auto& [k, v] : d->dict) {
      if (k->kind != PyVal::Kind::kStr) continue;
      if (k->s == key) found = v;
      keys += (keys.empty() ? "" : ", ") + k->s;
    }
    XL_CHECK(found, kExitDataErr, file << ": has no entry '" << key << "' (its entries: " << keys << ")");
    XL_CHECK(found->kind == PyVal::Kind::kDict, kExitDataErr, file << ": entry '" << key << "' is a " << describe(found) << ", not a state_dict");
    d = found;
  }
  h5::TensorList out;
  for (const auto& [k, v] : d->dict) {
    XL_CHECK(k->kind == PyVal::Kind::kStr, kExitDataErr, file << ": a state_dict key is a " << describe(k) << ", not a string");
    if (v->kind != PyVal::Kind::kTensor) {
      // A checkpoint dict around the state_dict: name the entries that could be it.
      std::string hint;
      for (const auto& [k2, v2] : d->dict)
        if (k2->kind == PyVal::Kind::kStr && v2->kind == PyVal::Kind::kDict) hint += (hint.empty() ? "" : ", ") + k2->s;
      XL_FAIL(kExitDataErr, file << ": entry '" << k->s << "' is a " << describe(v) << ", not a tensor"
                                 << (hint.empty() ? "" : " (a checkpoint? pick its state_dict with --key: " + hint + ")"));
    }
    out.emplace_back(k->s, v->tensor);
  }
  return out;
}

}  // namespace

h5::TensorList parse_torch_state_dict(const std::string& bytes, const std::string& key, const std::string& display) {
  XL_CHECK(!bytes.empty(), kExitDataErr, display << ": empty file, not a PyTorch state_dict");
  // Before PyTorch 1.6 torch.save wrote pickles back to back: magic number first (LONG1 10 bytes).
  static const std::string legacy("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14);
  XL_CHECK(bytes.compare(0, legacy.size(), legacy) != 0, kExitDataErr,
           display << ": a legacy (pre-1.6) torch.save file; re-save it with a newer PyTorch: "
                      "torch.save(torch.load(f), g, _use_new_zipfile_serialization=True)");
  XL_CHECK(bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0, kExitDataErr,
           display << ": not a PyTorch file (torch.save writes a zip archive)");
  std::istringstream in(bytes);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::string pkl;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(&in);
    XL_CHECK(reader->hasRecord("data.pkl"), kExitDataErr, display << ": a zip archive without data.pkl, not a torch.save file");
    if (reader->hasRecord("byteorder")) {
      auto [p, n] = reader->getRecord("byteorder");
      std::string order(static_cast<const char*>(p.get()), n);
      XL_CHECK(order == "little", kExitDataErr, display << ": tensors stored " << order << "-endian are not supported");
    }
    auto [ptr, size] = reader->getRecord("data.pkl");
    pkl.assign(static_cast<const char*>(ptr.get()), size);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    XL_FAIL(kExitDataErr, display << ": not a readable torch.save archive (" << what.substr(0, what.find('\n')) << ")");
  }
  try {
    Unpickler unpickler(pkl, *reader, display);
    return state_dict_of(unpickler.run(), key, display);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    XL_FAIL(kExitDataErr, display << ": cannot read a tensor (" << what.substr(0, what.find('\n')) << ")");
  }
}

h5::TensorList read_torch_state_dict(const std::string& path, const std::string& key) {
  return parse_torch_state_dict(io::read_raw(path), key, io::display_name(path));
}

std::string torch_state_dict_bytes(const h5::TensorList& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : tensors) {
    XL_CHECK(!dict.contains(name), kExitSoftware, "state_dict name " << name << " twice");
    dict.insert(name, t.detach().to(torch::kCPU));
  }
  std::vector<char> bytes = torch::pickle_save(dict);
  return std::string(bytes.begin(), bytes.end());
}

// ================================================================================================
// Names
// ================================================================================================

std::vector<std::pair<std::string, std::string>> torch_names(const TransformerXL& model) {
  auto tensors = model->named_tensors();
  std::map<const c10::TensorImpl*, std::string> by_impl;
  std::set<std::string> have;
  for (const auto& [name, t] : tensors) {
    by_impl.emplace(t.unsafeGetTensorImpl(), name);
    have.insert(name);
  }
  auto alias_of = [&](const torch::Tensor& t, const std::string& name) {
    auto it = by_impl.find(t.unsafeGetTensorImpl());
    XL_CHECK(it != by_impl.end(), kExitSoftware, "torch_names: " << name << " is tied to a tensor the model does not list");
    return it->second;
  };
  // The crit.out_projs block, every cluster that has a projection, own or tied.
  std::vector<std::pair<std::string, std::string>> projs;
  const auto& crit = model->crit;
  for (size_t i = 0; i < crit->projections.size(); ++i) {
    if (!crit->projections[i].defined()) continue;
    std::string name = "crit.out_projs." + std::to_string(i);
    projs.emplace_back(name, have.count(name) ? name : alias_of(crit->projections[i], name));
  }
  std::vector<std::pair<std::string, std::string>> out;
  size_t last_out_layer = 0;
  bool any_out_layer = false;
  for (const auto& [name, t] : tensors) {
    if (name.rfind("crit.out_projs.", 0) == 0) continue;
    static const std::regex bias_re(R"(crit\.out_layers\.(\d+)\.bias)");
    std::smatch m;
    if (std::regex_match(name, m, bias_re)) {
      size_t i = std::stoul(m[1].str());
      std::string w = "crit.out_layers." + std::to_string(i) + ".weight";
      if (!have.count(w)) out.emplace_back(w, alias_of(crit->layers[i]->weight, w));
    }
    out.emplace_back(name, name);
    if (name.rfind("crit.out_layers.", 0) == 0) {
      last_out_layer = out.size();
      any_out_layer = true;
    }
  }
  XL_CHECK(any_out_layer, kExitSoftware, "torch_names: the model has no crit.out_layers");
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(last_out_layer), projs.begin(), projs.end());
  return out;
}

// ================================================================================================
// Hyper-parameters
// ================================================================================================
namespace {

std::string shape_str(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

template <typename T>
std::string list_str(const std::vector<T>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

std::string bools_str(const std::vector<bool>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += std::string(i ? "," : "") + (v[i] ? "1" : "0");
  return s;
}

std::string summary(const ModelConfig& c) {
  std::ostringstream os;
  os << "n_layer " << c.n_layer << ", d_model " << c.d_model << ", n_head " << c.n_head << ", d_head " << c.d_head
     << ", d_inner " << c.d_inner << ", n_token " << c.n_token << ", d_embed " << c.embed_dim();
  if (!c.cutoffs.empty()) os << ", cutoffs " << list_str(c.cutoffs) << ", div_val " << c.div_val;
  return os.str();
}

bool same_values(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && torch::equal(a, b);
}

}  // namespace

ModelConfig torch_config(const h5::TensorList& sd, const TorchHyperParams& given, const std::string& file) {
  std::map<std::string, torch::Tensor> t(sd.begin(), sd.end());
  auto has = [&](const std::string& n) { return t.count(n) > 0; };
  auto need = [&](const std::string& n, int64_t dims) {
    auto it = t.find(n);
    XL_CHECK(it != t.end(), kExitDataErr, file << ": lacks tensor '" << n << "' (not a PyTorch Transformer-XL state_dict?)");
    XL_CHECK(it->second.dim() == dims, kExitDataErr,
             file << ": tensor '" << n << "' has shape " << shape_str(it->second) << ", expected " << dims << " dimensions");
    return it->second;
  };
  auto check = [&](const char* flag, const std::optional<int64_t>& want, int64_t found, const std::string& evidence) {
    XL_CHECK(!want || *want == found, kExitDataErr,
             file << ": --" << flag << " " << *want << " does not match the state_dict, which has " << found << " ("
                  << evidence << ")");
  };

  ModelConfig c;
  // Layers.
  static const std::regex layer_re(R"(layers\.(\d+)\..*)");
  int64_t n_layer = 0;
  for (const auto& [name, x] : sd) {
    std::smatch m;
    if (std::regex_match(name, m, layer_re)) n_layer = std::max<int64_t>(n_layer, std::stoll(m[1].str()) + 1);
  }
  XL_CHECK(n_layer > 0, kExitDataErr, file << ": has no layers.N.* tensors (not a PyTorch Transformer-XL state_dict?)");
  check("n-layer", given.n_layer, n_layer, "layers.0 to layers." + std::to_string(n_layer - 1));
  c.n_layer = n_layer;

  torch::Tensor o = need("layers.0.dec_attn.o_net.weight", 2);
  c.d_model = o.size(0);
  check("d-model", given.d_model, c.d_model, "layers.0.dec_attn.o_net.weight " + shape_str(o));

  // u, v: shared, or per layer (untie_r).
  const bool shared = has("r_w_bias"), per_layer = has("layers.0.dec_attn.r_w_bias");
  c.untie_r = given.untie_r.value_or(!shared && per_layer);
  XL_CHECK(!c.untie_r || per_layer, kExitDataErr,
           file << ": --untie-r but the state_dict has no per-layer layers.0.dec_attn.r_w_bias"
                << (shared ? " (it has shared r_w_bias)" : ""));
  XL_CHECK(c.untie_r || shared, kExitDataErr,
           file << ": lacks tensor 'r_w_bias'" << (per_layer ? " (its u, v biases are per layer: give --untie-r)" : ""));
  const std::string u_name = c.untie_r ? "layers.0.dec_attn.r_w_bias" : "r_w_bias";
  torch::Tensor u = need(u_name, 2);
  c.n_head = u.size(0);
  c.d_head = u.size(1);
  check("n-head", given.n_head, c.n_head, u_name + " " + shape_str(u));
  check("d-head", given.d_head, c.d_head, u_name + " " + shape_str(u));
  XL_CHECK(o.size(1) == c.n_head * c.d_head, kExitDataErr,
           file << ": layers.0.dec_attn.o_net.weight has shape " << shape_str(o) << " but " << u_name << " "
                << shape_str(u) << " means n_head*d_head = " << c.n_head * c.d_head);

  torch::Tensor ff = need("layers.0.pos_ff.CoreNet.0.weight", 2);
  c.d_inner = ff.size(0);
  check("d-inner", given.d_inner, c.d_inner, "layers.0.pos_ff.CoreNet.0.weight " + shape_str(ff));

  // Embedding clusters.
  std::vector<int64_t> rows, widths;
  for (size_t i = 0;; ++i) {
    std::string n = "word_emb.emb_layers." + std::to_string(i) + ".weight";
    if (!has(n)) break;
    torch::Tensor e = need(n, 2);
    rows.push_back(e.size(0));
    widths.push_back(e.size(1));
  }
  XL_CHECK(!rows.empty(), kExitDataErr, file << ": lacks tensor 'word_emb.emb_layers.0.weight' (not a PyTorch Transformer-XL state_dict?)");
  const int64_t d_embed = widths[0];
  const size_t k = rows.size();
  const int64_t clusters = has("crit.cluster_weight") ? need("crit.cluster_weight", 2).size(0) : 0;
  int64_t n_token = 0;
  for (int64_t r : rows) n_token += r;
  check("n-token", given.n_token, n_token, "rows of word_emb.emb_layers.*.weight");
  check("d-embed", given.d_embed, d_embed, "word_emb.emb_layers.0.weight " + shape_str(t.at("word_emb.emb_layers.0.weight")));
  c.n_token = n_token;
  c.d_embed = d_embed == c.d_model ? 0 : d_embed;

  if (k > 1) {
    std::vector<int64_t> cutoffs;
    int64_t sum = 0;
    for (size_t i = 0; i + 1 < k; ++i) cutoffs.push_back(sum += rows[i]);
    XL_CHECK(!given.cutoffs || *given.cutoffs == cutoffs, kExitDataErr,
             file << ": --cutoffs " << list_str(*given.cutoffs) << " does not match the state_dict, whose "
                  << k << " embedding clusters give cutoffs " << list_str(cutoffs));
    auto fits = [&](int64_t dv) {
      int64_t d = d_embed;
      for (size_t i = 0; i < k; ++i, d /= dv)
        if (widths[i] != d) return false;
      return true;
    };
    std::string evidence = "embedding widths " + list_str(widths);
    if (given.div_val) {
      XL_CHECK(*given.div_val > 1 && fits(*given.div_val), kExitDataErr,
               file << ": --div-val " << *given.div_val << " does not match the state_dict (" << evidence
                    << ", which need d_embed // div_val^i)");
      c.div_val = *given.div_val;
    } else {
      c.div_val = 0;
      for (int64_t dv = 2; dv <= std::max<int64_t>(2, d_embed) && !c.div_val; ++dv)
        if (fits(dv)) c.div_val = dv;
      XL_CHECK(c.div_val, kExitDataErr, file << ": " << evidence << " do not follow d_embed // div_val^i for any div_val");
    }
    c.cutoffs = cutoffs;
  } else {
    c.div_val = given.div_val.value_or(1);
    XL_CHECK(c.div_val >= 1, kExitDataErr, file << ": --div-val must be at least 1");
    if (c.div_val > 1) {
      XL_CHECK(!given.cutoffs || given.cutoffs->empty(), kExitDataErr,
               file << ": --cutoffs " << list_str(*given.cutoffs) << " with --div-val " << c.div_val
                    << " needs one embedding per cluster, but the state_dict has only word_emb.emb_layers.0");
    } else {
      if (clusters > 0) {
        XL_CHECK(given.cutoffs, kExitUsage,
                 file << ": give --cutoffs: the state_dict has " << clusters
                      << " tail clusters (crit.cluster_weight) over one embedding, which does not show where they start");
      }
      c.cutoffs = given.cutoffs.value_or(std::vector<int64_t>{});
      XL_CHECK(static_cast<int64_t>(c.cutoffs.size()) == clusters, kExitDataErr,
               file << ": --cutoffs " << list_str(c.cutoffs) << " makes " << c.cutoffs.size()
                    << " tail clusters but the state_dict has " << clusters
                    << (clusters ? " (crit.cluster_weight " + shape_str(t.at("crit.cluster_weight")) + ")" : " (no crit.cluster_weight)"));
    }
  }

  // Tying, read off equal twins.
  const size_t out_layers = c.div_val == 1 ? 1 : k;
  bool tied = true;
  std::string untied_evidence;
  for (size_t i = 0; i < out_layers; ++i) {
    std::string w = "crit.out_layers." + std::to_string(i) + ".weight", e = "word_emb.emb_layers." + std::to_string(i) + ".weight";
    if (has(w) && !same_values(t.at(w), t.at(e))) {
      if (tied) untied_evidence = w + " differs from " + e;
      tied = false;
    }
  }
  XL_CHECK(!given.tie_weight || !*given.tie_weight || tied, kExitDataErr,
           file << ": --tie-weight but " << untied_evidence);
  c.tie_weight = given.tie_weight.value_or(tied);

  const size_t n_clusters = c.cutoffs.size() + 1;
  std::vector<bool> tie_projs(n_clusters, false);
  bool any_proj = false;
  for (size_t i = 0; i < n_clusters; ++i) {
    std::string out = "crit.out_projs." + std::to_string(i);
    std::string emb = "word_emb.emb_projs." + std::to_string(c.div_val == 1 ? 0 : i);
    if (!has(emb)) continue;
    any_proj = true;
    tie_projs[i] = !has(out) || same_values(t.at(out), t.at(emb));
  }
  if (!any_proj) tie_projs.clear();  // no projections (char level): nothing to tie
  if (given.tie_projs) {
    XL_CHECK(given.tie_projs->size() == n_clusters, kExitDataErr,
             file << ": --tie-projs " << bools_str(*given.tie_projs) << " needs " << n_clusters << " entries, one per cluster");
    for (size_t i = 0; i < n_clusters; ++i) {
      std::string out = "crit.out_projs." + std::to_string(i);
      std::string emb = "word_emb.emb_projs." + std::to_string(c.div_val == 1 ? 0 : i);
      XL_CHECK(!(*given.tie_projs)[i] || !has(out) || !has(emb) || tie_projs[i], kExitDataErr,
               file << ": --tie-projs says cluster " << i << " is tied but " << out << " differs from " << emb);
    }
    c.tie_projs = *given.tie_projs;
  } else {
    c.tie_projs = tie_projs;
  }

  c.pre_lnorm = given.pre_lnorm.value_or(false);
  c.same_length = given.same_length.value_or(false);
  c.clamp_len = std::max<int64_t>(0, given.clamp_len.value_or(0));  // PyTorch's -1 means off
  if (given.dropout) c.dropout = *given.dropout;
  if (given.dropatt) c.dropatt = *given.dropatt;
  c.validate(file + " (hyper-parameters)");
  return c;
}

// ================================================================================================
// Import
// ================================================================================================

h5::TensorList import_torch_tensors(const h5::TensorList& sd, const ModelConfig& cfg, const std::string& file) {
  TransformerXL model(cfg);
  std::map<std::string, torch::Tensor> xl_tensors;
  for (const auto& [name, x] : model->named_tensors()) xl_tensors.emplace(name, x);
  auto names = torch_names(model);
  std::map<std::string, std::string> expected(names.begin(), names.end());

  std::map<std::string, torch::Tensor> given;
  for (const auto& [name, x] : sd) {
    XL_CHECK(expected.count(name), kExitDataErr,
             file << ": unknown tensor '" << name << "' (no such tensor in a Transformer-XL with " << summary(cfg) << ")");
    given.emplace(name, x);
  }
  std::map<std::string, std::pair<std::string, torch::Tensor>> seen;  // xl name -> first PyTorch name, value
  for (const auto& [tname, xname] : names) {
    auto it = given.find(tname);
    XL_CHECK(it != given.end(), kExitDataErr, file << ": lacks tensor '" << tname << "' (" << summary(cfg) << ")");
    const torch::Tensor& x = it->second;
    const torch::Tensor& target = xl_tensors.at(xname);
    XL_CHECK(x.sizes() == target.sizes(), kExitDataErr,
             file << ": tensor '" << tname << "' has shape " << shape_str(x) << ", the model (" << summary(cfg)
                  << ") needs " << shape_str(target));
    XL_CHECK(x.is_floating_point(), kExitDataErr,
             file << ": tensor '" << tname << "' has dtype " << x.dtype() << ", expected floating point");
    auto first = seen.find(xname);
    if (first == seen.end()) {
      seen.emplace(xname, std::make_pair(tname, x));
    } else {
      XL_CHECK(same_values(x, first->second.second), kExitDataErr,
               file << ": tensor '" << tname << "' is tied to '" << first->second.first
                    << "' in this model but their values differ (untied? see --tie-weight/--tie-projs)");
    }
  }
  // inv_freq is the sinusoid's 1/10000^(2i/d_model): another value means another d_model or model.
  const torch::Tensor& inv = seen.at("pos_emb.inv_freq").second;
  torch::Tensor want = xl_tensors.at("pos_emb.inv_freq");
  XL_CHECK(torch::allclose(inv.to(torch::kFloat64), want.to(torch::kFloat64), 1e-5, 0), kExitDataErr,
           file << ": tensor 'pos_emb.inv_freq' is not 1/10000^(2i/d_model) for d_model " << cfg.d_model);

  h5::TensorList out;
  for (const auto& [xname, target] : model->named_tensors())
    out.emplace_back(xname, seen.at(xname).second.to(target.scalar_type()).contiguous().clone());
  return out;
}

h5::Checkpoint import_torch_checkpoint(const h5::TensorList& sd, const TorchHyperParams& given, const text::Vocab& vocab,
                                       const std::string& file) {
  ModelConfig cfg = torch_config(sd, given, file);
  XL_CHECK(static_cast<int64_t>(vocab.size()) == cfg.n_token, kExitDataErr,
           file << ": the vocab has " << vocab.size() << " entries but the model has n_token " << cfg.n_token
                << " (the vocab must list the PyTorch model's symbols in its id order)");
  h5::Checkpoint ckpt;
  ckpt.phase = "imported";
  ckpt.model_config = cfg.to_json();
  ckpt.train_config = nullptr;
  ckpt.state = {{"step", 0}, {"tokens_seen", 0}, {"imported_from", file}};
  ckpt.vocab = vocab;
  ckpt.model = import_torch_tensors(sd, cfg, file);
  return ckpt;
}

// ================================================================================================
// Export
// ================================================================================================

TorchExport export_torch(const TransformerXL& src, bool untie_r, const std::string& file) {
  const ModelConfig& cfg = src->config;
  ModelConfig target = cfg;
  if (!cfg.heads_per_layer.empty()) {
    const auto& h = cfg.heads_per_layer;
    XL_CHECK(std::all_of(h.begin(), h.end(), [&](int64_t x) { return x == h[0]; }), kExitDataErr,
             file << ": its layers keep different numbers of heads (" << list_str(h)
                  << "); a PyTorch Transformer-XL has the same n_head in every layer");
    XL_CHECK(h[0] > 0, kExitDataErr, file << ": every attention head was pruned; a PyTorch Transformer-XL needs n_head >= 1");
    target.n_head = h[0];
    target.heads_per_layer.clear();
  }
  torch::NoGradGuard no_grad;
  if (cfg.per_layer_biases() && !untie_r) {
    bool equal = true;
    for (int64_t l = 1; l < cfg.n_layer && equal; ++l) {
      auto [u0, v0] = src->biases(0);
      auto [u, v] = src->biases(l);
      equal = same_values(u, u0) && same_values(v, v0);
    }
    XL_CHECK(equal, kExitDataErr,
             file << ": its u, v biases are per layer (" << (cfg.untie_r ? "untie_r" : "pruned heads")
                  << ") and differ between layers, which the PyTorch Transformer-XL cannot hold (it shares one "
                     "r_w_bias, r_r_bias); give --untie-r for a target with per-layer biases (HF TransfoXL's untie_r)");
  }
  target.untie_r = untie_r;
  target.validate(file + " (export)");

  auto src_list = src->named_tensors();
  std::map<std::string, torch::Tensor> from(src_list.begin(), src_list.end());
  TransformerXL dst(target);
  const torch::Tensor& any = from.at("word_emb.emb_layers.0.weight");
  dst->to(any.scalar_type());
  std::map<std::string, torch::Tensor> values;
  static const std::regex bias_re(R"(layers\.(\d+)\.dec_attn\.(r_w_bias|r_r_bias))");
  for (auto& [name, x] : dst->named_tensors()) {
    std::smatch m;
    torch::Tensor value;
    if (name == "r_w_bias" || name == "r_r_bias") {
      auto uv = src->biases(0);
      value = name == "r_w_bias" ? uv.first : uv.second;
    } else if (std::regex_match(name, m, bias_re)) {
      auto uv = src->biases(std::stoll(m[1].str()));
      value = m[2] == "r_w_bias" ? uv.first : uv.second;
    } else {
      value = from.at(name);
    }
    XL_CHECK(value.sizes() == x.sizes(), kExitSoftware, "export: " << name << " has shape " << value.sizes() << ", expected " << x.sizes());
    x.copy_(value);
    values.emplace(name, x.detach());
  }
  TorchExport out;
  out.config = target;
  for (const auto& [tname, xname] : torch_names(dst)) out.state_dict.emplace_back(tname, values.at(xname));
  return out;
}

TorchExport export_torch(const h5::Checkpoint& ckpt, bool untie_r, const std::string& file) {
  TransformerXL model = model_from_checkpoint(ckpt, file);
  return export_torch(model, untie_r, file);
}

std::string import_flags(const ModelConfig& c) {
  std::ostringstream os;
  os << "--n-token " << c.n_token << " --n-layer " << c.n_layer << " --d-model " << c.d_model << " --n-head " << c.n_head
     << " --d-head " << c.d_head << " --d-inner " << c.d_inner;
  if (c.embed_dim() != c.d_model) os << " --d-embed " << c.embed_dim();
  if (!c.cutoffs.empty()) os << " --cutoffs " << list_str(c.cutoffs);
  os << " --div-val " << c.div_val;
  if (!c.tie_weight) os << " --not-tied";
  if (!c.tie_projs.empty()) os << " --tie-projs " << bools_str(c.tie_projs);
  if (c.pre_lnorm) os << " --pre-lnorm";
  if (c.same_length) os << " --same-length";
  if (c.clamp_len > 0) os << " --clamp-len " << c.clamp_len;
  if (c.untie_r) os << " --untie-r";
  return os.str();
}

std::string pytorch_constructor(const ModelConfig& c) {
  auto py = [](bool b) { return b ? "True" : "False"; };
  std::ostringstream os;
  os << "MemTransformerLM(" << c.n_token << ", " << c.n_layer << ", " << c.n_head << ", " << c.d_model << ", " << c.d_head
     << ", " << c.d_inner << ", dropout=" << c.dropout << ", dropatt=" << c.dropatt << ", tie_weight=" << py(c.tie_weight)
     << ", d_embed=" << c.embed_dim() << ", div_val=" << c.div_val << ", tie_projs=[";
  std::vector<bool> tp = c.tie_projs.empty() ? std::vector<bool>(c.cutoffs.size() + 1, false) : c.tie_projs;
  for (size_t i = 0; i < tp.size(); ++i) os << (i ? ", " : "") << py(tp[i]);
  os << "], pre_lnorm=" << py(c.pre_lnorm) << ", cutoffs=[" << list_str(c.cutoffs) << "], same_length=" << py(c.same_length)
     << ", attn_type=0, clamp_len=" << (c.clamp_len > 0 ? c.clamp_len : -1) << ")";
  if (c.untie_r) os << "  # with per-layer r_w_bias/r_r_bias (untie_r)";
  return os.str();
}

}  // namespace xl::model

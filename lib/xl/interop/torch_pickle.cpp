#include "xl/interop/torch_pickle.h"

#include <caffe2/serialize/file_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <unordered_map>

#include "xl/interop/numpy_array.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/torch_save_signature.h"
#include "xl/util/utf8.h"

namespace xl::interop {

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
// describe() after "a" or "an".
std::string a_describe(const Val& v) {
  const std::string d = describe(v);
  return (std::string("aeiou").find(d[0]) == std::string::npos ? "a " : "an ") + d;
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
  // Reads the pickle at `start` of `data`. Storages come from the zip archive `reader`; without one
  // (the legacy format) they are allocated empty, to be filled from the bytes after the pickles.
  Unpickler(const std::string& data, size_t start, caffe2::serialize::PyTorchStreamReader* reader, std::string file,
            std::string pkl_name)
      : data_(data), reader_(reader), file_(std::move(file)), pkl_(std::move(pkl_name)), pos_(start) {}

  size_t end() const { return pos_; }  // where the pickle read by run() ended
  const std::map<std::string, Val>& storages() const { return storages_; }

  Val run() {
    while (true) {
      XL_CHECK(pos_ < data_.size(), kExitDataErr, file_ << ": " << pkl_ << " ends without a STOP opcode");
      const size_t at = pos_;
      const uint8_t op = byte();
      switch (op) {
        case 0x80: byte(); break;                        // PROTO
        case 0x95: bytes(8); break;                      // FRAME
        case '.':                                        // STOP
          XL_CHECK(stack_.size() == 1, kExitDataErr, file_ << ": " << pkl_ << " leaves " << stack_.size() << " objects");
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
        // Sets (of a pickled object's attributes) are kept as lists.
        case 0x8f: push(make(PyVal::Kind::kList)); break;                     // EMPTY_SET
        case 0x90: {                                                          // ADDITEMS
          auto xs = pop_mark();
          auto& items = list_top()->items;
          items.insert(items.end(), xs.begin(), xs.end());
          break;
        }
        case 0x91: {                                                          // FROZENSET
          auto v = make(PyVal::Kind::kList);
          v->items = pop_mark();
          push(v);
          break;
        }
        case 0x96: push(make_str(PyVal::Kind::kBytes, bytes(le(8)))); break;  // BYTEARRAY8
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
                   file_ << ": bad STACK_GLOBAL in " << pkl_);
          push(make_str(PyVal::Kind::kGlobal, module->s + "." + name->s));
          break;
        }
        case 'q': memo_[le(1)] = top(); break;           // BINPUT
        case 'r': memo_[le(4)] = top(); break;           // LONG_BINPUT
        case 'p': memo_[memo_index(line())] = top(); break;  // PUT
        case 0x94: memo_[memo_.size()] = top(); break;   // MEMOIZE
        case 'h': push(memo(le(1))); break;              // BINGET
        case 'j': push(memo(le(4))); break;              // LONG_BINGET
        case 'g': push(memo(memo_index(line()))); break;  // GET
        case 'R': case 0x81: {                           // REDUCE, NEWOBJ
          Val args = pop(), callable = pop();
          push(call(callable, args));
          break;
        }
        case 0x92: {                                     // NEWOBJ_EX: its keyword arguments unused
          pop();
          Val args = pop(), callable = pop();
          push(call(callable, args));
          break;
        }
        case 'b': {                                      // BUILD: an object's state
          Val state = pop();
          const Val& object = top();
          if (object->kind == PyVal::Kind::kObject && object->s == "numpy.dtype") {
            build_numpy_dtype(object, state);
            break;
          }
          if (object->kind == PyVal::Kind::kObject && object->s == "numpy.ndarray") {
            build_numpy_array(object, state);
            break;
          }
          // (dict, slots) or a dict: kept for a module's parameters, buffers, submodules, attributes.
          if (state->kind == PyVal::Kind::kTuple && !state->items.empty()) state = state->items[0];
          if (object->kind == PyVal::Kind::kObject && state->kind == PyVal::Kind::kDict) object->dict = state->dict;
          break;
        }
        case 'Q': push(persistent(pop())); break;        // BINPERSID
        default:
          XL_FAIL(kExitDataErr, file_ << ": unsupported pickle opcode 0x" << std::hex << int(op) << std::dec
                                      << " at byte " << at << " of " << pkl_);
      }
    }
  }

 private:
  uint8_t byte() {
    XL_CHECK(pos_ < data_.size(), kExitDataErr, file_ << ": " << pkl_ << " is truncated");
    return static_cast<uint8_t>(data_[pos_++]);
  }
  std::string bytes(uint64_t n) {
    XL_CHECK(n <= data_.size() - pos_, kExitDataErr, file_ << ": " << pkl_ << " is truncated");
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
    XL_CHECK(n <= 8, kExitDataErr, file_ << ": integer of " << n << " bytes in " << pkl_ << " is too large");
    if (n == 0) return 0;
    uint64_t v = le(static_cast<int>(n));
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);
    return static_cast<int64_t>(v);
  }
  // The decimal memo index of a text-mode PUT or GET.
  uint64_t memo_index(const std::string& text) {
    XL_CHECK(!text.empty() && text.size() <= 18 && text.find_first_not_of("0123456789") == std::string::npos, kExitDataErr,
             file_ << ": bad memo index in " << pkl_);
    return std::stoull(text);
  }
  std::string line() {
    auto end = data_.find('\n', pos_);
    XL_CHECK(end != std::string::npos, kExitDataErr, file_ << ": " << pkl_ << " is truncated");
    std::string s = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  void push(Val v) { stack_.push_back(std::move(v)); }
  Val pop() {
    XL_CHECK(!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()), kExitDataErr,
             file_ << ": malformed " << pkl_ << " (stack underflow)");
    Val v = stack_.back();
    stack_.pop_back();
    return v;
  }
  const Val& top() {
    XL_CHECK(!stack_.empty(), kExitDataErr, file_ << ": malformed " << pkl_ << " (stack underflow)");
    return stack_.back();
  }
  std::vector<Val> pop_n(size_t n) {
    XL_CHECK(stack_.size() >= n, kExitDataErr, file_ << ": malformed " << pkl_ << " (stack underflow)");
    std::vector<Val> out(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<Val> pop_mark() {
    XL_CHECK(!marks_.empty(), kExitDataErr, file_ << ": malformed " << pkl_ << " (no mark)");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Val> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Val memo(uint64_t k) {
    auto it = memo_.find(k);
    XL_CHECK(it != memo_.end(), kExitDataErr, file_ << ": malformed " << pkl_ << " (memo " << k << " unset)");
    return it->second;
  }
  Val list_top() {
    Val v = top();
    XL_CHECK(v->kind == PyVal::Kind::kList, kExitDataErr, file_ << ": malformed " << pkl_ << " (append to " << a_describe(v) << ")");
    return v;
  }
  Val dict_top() {
    Val v = top();
    XL_CHECK(v->kind == PyVal::Kind::kDict, kExitDataErr,
             file_ << ": " << pkl_ << " sets items of " << a_describe(v) << ", not of a dict");
    return v;
  }
  // dict[key] = value for each pair: a str key already there keeps its place (as in Python).
  void set_items(const Val& dict, const std::vector<Val>& kv) {
    XL_CHECK(kv.size() % 2 == 0, kExitDataErr, file_ << ": malformed " << pkl_ << " (odd SETITEMS)");
    auto& entries = dict->dict;
    if (!dict->key_index || dict->indexed > entries.size()) {  // new, or replaced by BUILD
      dict->key_index = std::make_unique<std::unordered_map<std::string, size_t>>();
      dict->indexed = 0;
    }
    auto& index = *dict->key_index;
    for (; dict->indexed < entries.size(); ++dict->indexed)
      if (entries[dict->indexed].first->kind == PyVal::Kind::kStr) index.emplace(entries[dict->indexed].first->s, dict->indexed);
    for (size_t k = 0; k < kv.size(); k += 2) {
      if (kv[k]->kind == PyVal::Kind::kStr) {
        auto [it, added] = index.emplace(kv[k]->s, entries.size());
        if (!added) {
          entries[it->second].second = kv[k + 1];
          continue;
        }
      }
      entries.emplace_back(kv[k], kv[k + 1]);
      dict->indexed = entries.size();
    }
  }

  // ('storage', storage_type, key, location, numel[, view_metadata]): the tensor data in record
  // data/<key>, or (legacy format) in the storage section after the pickles. The legacy format's
  // module classes are persistent too.
  Val persistent(const Val& pid) {
    // The legacy format names a module's class as ('module', class, source file, source).
    if (!reader_ && pid->kind == PyVal::Kind::kTuple && pid->items.size() >= 2 && pid->items[0]->kind == PyVal::Kind::kStr &&
        pid->items[0]->s == "module" && pid->items[1]->kind == PyVal::Kind::kGlobal)
      return pid->items[1];
    XL_CHECK(pid->kind == PyVal::Kind::kTuple && pid->items.size() >= 5 && pid->items[0]->kind == PyVal::Kind::kStr &&
                 pid->items[0]->s == "storage" && pid->items[1]->kind == PyVal::Kind::kGlobal &&
                 pid->items[2]->kind == PyVal::Kind::kStr && pid->items[4]->kind == PyVal::Kind::kInt,
             kExitDataErr, file_ << ": unsupported persistent object in " << pkl_ << " (not a tensor storage)");
    const std::string key = pid->items[2]->s;
    auto cached = storages_.find(key);
    if (cached != storages_.end()) return cached->second;
    torch::Dtype dtype = storage_dtype(pid->items[1]->s, file_);
    const int64_t numel = pid->items[4]->i;
    const size_t element = c10::elementSize(dtype);
    auto v = make(PyVal::Kind::kStorage);
    if (!reader_) {
      XL_CHECK(pid->items.size() < 6 || pid->items[5]->kind == PyVal::Kind::kNone, kExitDataErr,
               file_ << ": storage " << key << " is a view of another storage, which is not supported");
      XL_CHECK(numel >= 0 && static_cast<uint64_t>(numel) <= data_.size() / element, kExitDataErr,
               file_ << ": storage " << key << " of " << numel << " elements is larger than the file");
      v->tensor = torch::empty({numel}, torch::TensorOptions().dtype(dtype));  // parse_legacy fills it
      storages_.emplace(key, v);
      return v;
    }
    const std::string record = "data/" + key;
    XL_CHECK(reader_->hasRecord(record), kExitDataErr, file_ << ": the archive lacks record " << record);
    auto [ptr, size] = reader_->getRecord(record);
    const size_t want = static_cast<size_t>(numel) * element;
    XL_CHECK(size == want, kExitDataErr,
             file_ << ": record " << record << " holds " << size << " bytes, its storage needs " << want);
    // The record's buffer becomes the storage: no second copy of the model's bytes.
    v->tensor = torch::empty({size ? 0 : numel}, torch::TensorOptions().dtype(dtype));
    if (size)
      v->tensor.set_(c10::Storage(c10::Storage::use_byte_size_t(), size, std::move(ptr), nullptr, false), 0, {numel}, {1});
    storages_.emplace(key, v);
    return v;
  }

  std::vector<int64_t> ints(const Val& v, const char* what) {
    XL_CHECK(v->kind == PyVal::Kind::kTuple || v->kind == PyVal::Kind::kList, kExitDataErr,
             file_ << ": tensor " << what << " is " << a_describe(v) << ", not a tuple");
    std::vector<int64_t> out;
    for (const auto& x : v->items) {
      XL_CHECK(x->kind == PyVal::Kind::kInt, kExitDataErr, file_ << ": tensor " << what << " holds " << a_describe(x));
      out.push_back(x->i);
    }
    return out;
  }

  // NumPy's objects (numpy_array.h): numpy.dtype(type, align, copy) is an object holding its type,
  // to which BUILD adds its byte order: (3, '<', ...).
  void build_numpy_dtype(const Val& dtype, const Val& state) {
    if (state->kind == PyVal::Kind::kTuple && state->items.size() >= 2 && state->items[1]->kind == PyVal::Kind::kStr &&
        state->items[1]->s.size() == 1) {
      dtype->items.resize(1);
      dtype->items.push_back(state->items[1]);
    }
  }
  NumpyDtype numpy_dtype(const Val& v) {
    XL_CHECK(v->kind == PyVal::Kind::kObject && v->s == "numpy.dtype" && !v->items.empty() &&
                 v->items[0]->kind == PyVal::Kind::kStr,
             kExitDataErr, file_ << ": a NumPy array in " << pkl_ << " has " << a_describe(v) << " for its dtype");
    return {v->items[0]->s, v->items.size() > 1 ? v->items[1]->s[0] : '='};
  }
  // ndarray.__reduce__ makes an empty array (_reconstruct) whose BUILD gives ([1,] shape, dtype,
  // fortran order, bytes); the object becomes that tensor in place, where the memo holds it too.
  void build_numpy_array(const Val& array, const Val& state) {
    XL_CHECK(state->kind == PyVal::Kind::kTuple && (state->items.size() == 4 || state->items.size() == 5), kExitDataErr,
             file_ << ": a NumPy array in " << pkl_ << " has " << a_describe(state) << " for its state");
    const auto& s = state->items;
    const size_t at = s.size() - 4;  // after the version
    const NumpyDtype dtype = numpy_dtype(s[at + 1]);
    const Val& data = s[at + 3];
    // Bytes (a Python 2 pickle's str is its bytes); an array of objects holds a list.
    XL_CHECK(data->kind == PyVal::Kind::kBytes || data->kind == PyVal::Kind::kStr || dtype.type[0] == 'O', kExitDataErr,
             file_ << ": a NumPy array in " << pkl_ << " holds " << a_describe(data) << ", not its bytes");
    const bool fortran = (s[at + 2]->kind == PyVal::Kind::kBool || s[at + 2]->kind == PyVal::Kind::kInt) && s[at + 2]->i;
    array->tensor = numpy_array_tensor(dtype, ints(s[at], "shape"), fortran, data->s, file_, data);
    array->kind = PyVal::Kind::kTensor;
    array->s.clear();
  }

  // What protocol 2 pickles bytes as: _codecs.encode(str, "latin1"), each code point one byte.
  std::string latin1_bytes(const std::string& utf8, const std::string& encoding) {
    XL_CHECK(encoding == "latin1" || encoding == "latin-1", kExitDataErr,
             file_ << ": " << pkl_ << " encodes bytes as " << encoding << ", not latin1");
    std::string out;
    out.reserve(utf8.size());
    for (size_t i = 0; i < utf8.size();) {
      uint32_t cp = 0;
      const int n = utf8_decode(utf8, i, &cp);
      XL_CHECK(n > 0 && cp <= 0xff, kExitDataErr, file_ << ": " << pkl_ << " holds bytes that are not latin1 text");
      out.push_back(static_cast<char>(cp));
      i += static_cast<size_t>(n);
    }
    return out;
  }

  Val call(const Val& callable, const Val& args) {
    XL_CHECK(args->kind == PyVal::Kind::kTuple, kExitDataErr, file_ << ": malformed " << pkl_ << " (call without a tuple)");
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
               file_ << ": malformed " << fn << " call in " << pkl_);
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
    if (fn == "collections.Counter") {  // Counter.__reduce__: (Counter, (dict(self),))
      return !a.empty() && a[0]->kind == PyVal::Kind::kDict ? a[0] : make(PyVal::Kind::kDict);
    }
    if (fn == "builtins.set" || fn == "builtins.frozenset") {  // a module's non-persistent buffer names
      auto v = make(PyVal::Kind::kList);
      if (!a.empty() && a[0]->kind == PyVal::Kind::kList) v->items = a[0]->items;
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
    if (fn == "_codecs.encode") {
      XL_CHECK(a.size() == 2 && a[0]->kind == PyVal::Kind::kStr && a[1]->kind == PyVal::Kind::kStr, kExitDataErr,
               file_ << ": malformed " << fn << " call in " << pkl_);
      return make_str(PyVal::Kind::kBytes, latin1_bytes(a[0]->s, a[1]->s));
    }
    // NumPy 1 and 2 name their modules differently.
    if (fn == "numpy.core.multiarray._reconstruct" || fn == "numpy._core.multiarray._reconstruct")
      return make_str(PyVal::Kind::kObject, "numpy.ndarray");
    if (fn == "numpy.dtype") {
      XL_CHECK(!a.empty() && a[0]->kind == PyVal::Kind::kStr, kExitDataErr, file_ << ": malformed " << fn << " call in " << pkl_);
      auto v = make_str(PyVal::Kind::kObject, fn);
      v->items = {a[0]};
      return v;
    }
    if (fn == "numpy.core.numeric._frombuffer" || fn == "numpy._core.numeric._frombuffer") {  // protocol 5
      XL_CHECK(a.size() == 4 && a[0]->kind == PyVal::Kind::kBytes && a[3]->kind == PyVal::Kind::kStr, kExitDataErr,
               file_ << ": malformed " << fn << " call in " << pkl_);
      auto v = make(PyVal::Kind::kTensor);
      v->tensor = numpy_array_tensor(numpy_dtype(a[1]), ints(a[2], "shape"), a[3]->s == "F", a[0]->s, file_, a[0]);
      return v;
    }
    // Anything else (a module's class, argparse.Namespace, numpy scalars...) is an object of that
    // class whose state BUILD may fill in: fine unless a tensor is expected where it sits.
    return make_str(PyVal::Kind::kObject, fn);
  }

  const std::string& data_;
  caffe2::serialize::PyTorchStreamReader* reader_;
  std::string file_, pkl_;
  size_t pos_ = 0;
  std::vector<Val> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Val> memo_;
  std::map<std::string, Val> storages_;
};

Val state_entry(const Val& object, const std::string& name) {
  for (const auto& [k, v] : object->dict)
    if (k->kind == PyVal::Kind::kStr && k->s == name) return v;
  return nullptr;
}

bool is_module(const Val& v) {
  return v->kind == PyVal::Kind::kObject && state_entry(v, "_parameters") && state_entry(v, "_modules");
}

// A scalar as JSON; null for anything else.
nlohmann::json scalar_value(const Val& v) {
  switch (v->kind) {
    case PyVal::Kind::kBool: return v->i != 0;
    case PyVal::Kind::kInt: return v->i;
    case PyVal::Kind::kFloat: return v->f;
    case PyVal::Kind::kStr: return v->s;
    default: return nullptr;
  }
}

// A scalar, a list or tuple of scalars, or a dict of str -> scalar, as JSON; null for anything
// else. Containers are looked into one level only: a pickle may hold one that contains itself.
nlohmann::json plain_value(const Val& v) {
  switch (v->kind) {
    case PyVal::Kind::kTuple:
    case PyVal::Kind::kList: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& x : v->items) {
        nlohmann::json item = scalar_value(x);
        if (item.is_null()) return nullptr;
        out.push_back(item);
      }
      return out;
    }
    case PyVal::Kind::kDict: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& [k, x] : v->dict) {
        nlohmann::json item = scalar_value(x);
        if (k->kind != PyVal::Kind::kStr || item.is_null()) return nullptr;
        out[k->s] = item;
      }
      return out;
    }
    default: return scalar_value(v);
  }
}

void walk_module(const Val& m, const std::string& prefix, int depth, TorchFile* out, const std::string& file);

// Records the class of the object or module at `prefix` ("a.b." or "" for the root), within bounds
// on depth and count that cycles and shared objects in a pickle could otherwise break.
void enter(const Val& o, const std::string& prefix, int depth, TorchFile* out, const std::string& file) {
  XL_CHECK(depth < 64, kExitDataErr, file << ": objects nested more than 64 deep");
  XL_CHECK(out->classes.size() < 100000, kExitDataErr, file << ": more than 100000 objects");
  out->classes[prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1)] = o->s;
}

// Any other pickled object (a corpus cache's Corpus and its Vocab): its tensors, plain attributes
// and nested objects and modules, by dotted name.
void walk_object(const Val& o, const std::string& prefix, int depth, TorchFile* out, const std::string& file) {
  enter(o, prefix, depth, out, file);
  for (const auto& [k, v] : o->dict) {
    if (k->kind != PyVal::Kind::kStr) continue;
    if (is_module(v)) walk_module(v, prefix + k->s + ".", depth + 1, out, file);
    else if (v->kind == PyVal::Kind::kTensor) out->tensors.emplace_back(prefix + k->s, v->tensor);
    else if (v->kind == PyVal::Kind::kObject && !v->dict.empty()) walk_object(v, prefix + k->s + ".", depth + 1, out, file);
    else if (nlohmann::json value = plain_value(v); !value.is_null()) out->attributes[prefix + k->s] = value;
  }
}

// A pickled nn.Module as Module.state_dict() names it: its parameters, its persistent buffers,
// then each submodule's under "name."; with its class and plain attributes by dotted name.
void walk_module(const Val& m, const std::string& prefix, int depth, TorchFile* out, const std::string& file) {
  enter(m, prefix, depth, out, file);
  std::set<std::string> transient;
  if (Val names = state_entry(m, "_non_persistent_buffers_set"); names && names->kind == PyVal::Kind::kList)
    for (const auto& n : names->items)
      if (n->kind == PyVal::Kind::kStr) transient.insert(n->s);
  for (const char* group : {"_parameters", "_buffers"}) {
    const Val d = state_entry(m, group);
    XL_CHECK(d && d->kind == PyVal::Kind::kDict, kExitDataErr, file << ": module " << m->s << " has no " << group << " dict");
    for (const auto& [k, v] : d->dict) {
      XL_CHECK(k->kind == PyVal::Kind::kStr, kExitDataErr, file << ": a " << group << " key of " << m->s << " is " << a_describe(k));
      if (v->kind == PyVal::Kind::kNone || transient.count(k->s)) continue;
      XL_CHECK(v->kind == PyVal::Kind::kTensor, kExitDataErr,
               file << ": " << prefix << k->s << " is " << a_describe(v) << ", not a tensor");
      out->tensors.emplace_back(prefix + k->s, v->tensor);
    }
  }
  for (const auto& [k, v] : m->dict)
    if (k->kind == PyVal::Kind::kStr && !k->s.empty() && k->s[0] != '_' && k->s != "training")
      if (nlohmann::json value = plain_value(v); !value.is_null()) out->attributes[prefix + k->s] = value;
  const Val children = state_entry(m, "_modules");
  XL_CHECK(children->kind == PyVal::Kind::kDict, kExitDataErr, file << ": module " << m->s << " has no _modules dict");
  for (const auto& [k, v] : children->dict) {
    XL_CHECK(k->kind == PyVal::Kind::kStr, kExitDataErr, file << ": a submodule name of " << m->s << " is " << a_describe(k));
    if (v->kind == PyVal::Kind::kNone) continue;
    XL_CHECK(is_module(v), kExitDataErr, file << ": submodule " << prefix << k->s << " is " << a_describe(v) << ", not a module");
    walk_module(v, prefix + k->s + ".", depth + 1, out, file);
  }
}

// Whether a dict holds tensors or modules, itself or one level down (a checkpoint around a state_dict).
bool holds_tensors(const Val& d) {
  return std::any_of(d->dict.begin(), d->dict.end(), [](const auto& kv) {
    const Val& v = kv.second;
    if (v->kind == PyVal::Kind::kTensor || is_module(v)) return true;
    return v->kind == PyVal::Kind::kDict && std::any_of(v->dict.begin(), v->dict.end(), [](const auto& kv2) {
             return kv2.second->kind == PyVal::Kind::kTensor || is_module(kv2.second);
           });
  });
}

// What a parsed file holds: a pickled module, an object or a dict of plain values, or a
// state_dict (`root` itself or its entry `key`).
TorchFile torch_file_of(const Val& root, const std::string& key, const std::string& file) {
  TorchFile out;
  if (key.empty() && is_module(root)) {
    walk_module(root, "", 0, &out, file);
    return out;
  }
  if (key.empty() && root->kind == PyVal::Kind::kObject && !root->dict.empty()) {
    walk_object(root, "", 0, &out, file);
    return out;
  }
  // An object's __dict__ saved as a dict: Hugging Face's vocab.bin (a Transformer-XL Vocab's), and
  // its corpus.bin (a Corpus's without the vocab: the dataset's name beside the splits' ids).
  const Val dataset = root->kind == PyVal::Kind::kDict ? state_entry(root, "dataset") : nullptr;
  const bool corpus = dataset && dataset->kind == PyVal::Kind::kStr && state_entry(root, "train");
  if (key.empty() && root->kind == PyVal::Kind::kDict && !root->dict.empty() && (!holds_tensors(root) || corpus)) {
    walk_object(root, "", 0, &out, file);
    out.classes[""] = "dict";
    return out;
  }
  Val d = root;
  XL_CHECK(d->kind == PyVal::Kind::kDict, kExitDataErr,
           file << ": holds " << a_describe(d) << ", not a state_dict or a module (torch.save(model.state_dict(), f) and torch.save(model, f) write those)");
  if (!key.empty()) {
    Val found;
    std::string keys;
    for (const auto& [k, v] : d->dict) {
      if (k->kind != PyVal::Kind::kStr) continue;
      if (k->s == key) found = v;
      keys += (keys.empty() ? "" : ", ") + k->s;
    }
    XL_CHECK(found, kExitDataErr, file << ": has no entry '" << key << "' (its entries: " << keys << ")");
    if (is_module(found)) {
      walk_module(found, "", 0, &out, file);
      return out;
    }
    XL_CHECK(found->kind == PyVal::Kind::kDict, kExitDataErr, file << ": entry '" << key << "' is " << a_describe(found) << ", not a state_dict");
    d = found;
  }
  for (const auto& [k, v] : d->dict) {
    XL_CHECK(k->kind == PyVal::Kind::kStr, kExitDataErr, file << ": a state_dict key is " << a_describe(k) << ", not a string");
    if (v->kind != PyVal::Kind::kTensor) {
      // A checkpoint dict around the state_dict: name the entries that could be it.
      std::string hint;
      for (const auto& [k2, v2] : d->dict)
        if (k2->kind == PyVal::Kind::kStr && (v2->kind == PyVal::Kind::kDict || is_module(v2))) hint += (hint.empty() ? "" : ", ") + k2->s;
      XL_FAIL(kExitDataErr, file << ": entry '" << k->s << "' is " << a_describe(v) << ", not a tensor"
                                 << (hint.empty() ? "" : " (a checkpoint? pick its state_dict or model with --key: " + hint + ")"));
    }
    out.tensors.emplace_back(k->s, v->tensor);
  }
  return out;
}

// Before PyTorch 1.6 torch.save wrote pickles back to back: the magic number, the protocol version,
// the machine's sizes, the object (storages by key), the sorted storage keys, then each storage as
// its element count (int64, little-endian) and its bytes.
Val parse_legacy(const std::string& bytes, const std::string& display) {
  // The magic number's pickle (PROTO 2, LONG1 of 10 bytes, STOP), matched by the caller.
  XL_CHECK(bytes.size() > 15 && bytes[14] == '.', kExitDataErr, display << ": a legacy torch.save file cut short");
  size_t pos = 15;
  auto next = [&]() {
    Unpickler u(bytes, pos, nullptr, display, "the legacy file's header");
    Val v = u.run();
    pos = u.end();
    return v;
  };
  const Val version = next(), sys_info = next();
  XL_CHECK(version->kind == PyVal::Kind::kInt && version->i == 1001, kExitDataErr,
           display << ": legacy torch.save protocol " << (version->kind == PyVal::Kind::kInt ? std::to_string(version->i) : "?")
                   << ", not 1001");
  Val little = sys_info->kind == PyVal::Kind::kDict ? state_entry(sys_info, "little_endian") : nullptr;
  XL_CHECK(little && little->kind == PyVal::Kind::kBool && little->i == 1, kExitDataErr,
           display << ": tensors stored big-endian (or of unknown order) are not supported");
  Unpickler main(bytes, pos, nullptr, display, "the pickle");
  const Val root = main.run();
  pos = main.end();
  Unpickler keys_reader(bytes, pos, nullptr, display, "the storage keys");
  const Val keys = keys_reader.run();
  pos = keys_reader.end();
  XL_CHECK(keys->kind == PyVal::Kind::kList, kExitDataErr, display << ": the storage keys are " << a_describe(keys) << ", not a list");
  for (const Val& k : keys->items) {
    XL_CHECK(k->kind == PyVal::Kind::kStr, kExitDataErr, display << ": a storage key is " << a_describe(k));
    auto it = main.storages().find(k->s);
    XL_CHECK(it != main.storages().end(), kExitDataErr, display << ": storage " << k->s << " is stored but not used");
    torch::Tensor& t = it->second->tensor;
    const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    XL_CHECK(bytes.size() - pos >= 8 + n, kExitDataErr, display << ": the file ends inside storage " << k->s);
    int64_t count = 0;
    for (int b = 0; b < 8; ++b) count |= static_cast<int64_t>(static_cast<uint8_t>(bytes[pos + b])) << (8 * b);
    XL_CHECK(count == t.numel(), kExitDataErr,
             display << ": storage " << k->s << " holds " << count << " elements, its tensors need " << t.numel());
    if (n) std::memcpy(t.data_ptr(), bytes.data() + pos + 8, n);
    pos += 8 + n;
  }
  XL_CHECK(keys->items.size() == main.storages().size(), kExitDataErr, display << ": a storage the pickle uses is not stored");
  return root;
}

// An archive's bytes read in place (an istringstream over them would hold the whole file twice),
// every read checked against their end.
class BytesReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReadAdapter(std::string_view bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what) const override {
    TORCH_CHECK(pos <= bytes_.size() && n <= bytes_.size() - pos, "reading ", what, " past the archive's end");
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  std::string_view bytes_;
};

// A torch.save zip archive: data.pkl, and each storage's record as the pickle asks for it.
TorchFile parse_zip(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> archive, const std::string& key,
                    const std::string& display) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::string pkl;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::move(archive));
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
    Unpickler unpickler(pkl, 0, reader.get(), display, "data.pkl");
    return torch_file_of(unpickler.run(), key, display);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    XL_FAIL(kExitDataErr, display << ": cannot read a tensor (" << what.substr(0, what.find('\n')) << ")");
  }
}

}  // namespace

TorchFile parse_torch_file(const std::string& bytes, const std::string& key, const std::string& display) {
  XL_CHECK(!bytes.empty(), kExitDataErr, display << ": empty file, not a PyTorch state_dict");
  if (is_plain_pickle(bytes)) {
    Unpickler unpickler(bytes, 0, nullptr, display, "the pickle");
    TorchFile out = torch_file_of(unpickler.run(), key, display);
    XL_CHECK(unpickler.storages().empty(), kExitDataErr, display << ": a plain pickle with tensor storages, which only torch.save writes");
    return out;
  }
  if (is_torch_legacy(bytes)) {
    try {
      return torch_file_of(parse_legacy(bytes, display), key, display);
    } catch (const c10::Error& e) {
      std::string what = e.what_without_backtrace();
      XL_FAIL(kExitDataErr, display << ": cannot read a tensor (" << what.substr(0, what.find('\n')) << ")");
    }
  }
  XL_CHECK(is_torch_zip(bytes), kExitDataErr,
           display << ": not a PyTorch file (torch.save writes a zip archive, or before PyTorch 1.6 pickles)");
  return parse_zip(std::make_shared<BytesReadAdapter>(bytes), key, display);
}

bool is_torch_zip_file(const std::string& path) {
  return !io::is_stdio(path) && io::is_file(path) && is_torch_zip(io::read_head(path, 4));
}

TorchFile read_torch_file(const std::string& path, const std::string& key) {
  // A corpus cache or a model is mostly tensors: its whole bytes held beside them doubled the peak.
  if (is_torch_zip_file(path)) {
    std::shared_ptr<caffe2::serialize::ReadAdapterInterface> archive;
    try {
      archive = std::make_shared<caffe2::serialize::FileAdapter>(path);
    } catch (const c10::Error&) {
      XL_FAIL(kExitNoInput, path << ": cannot be opened");
    }
    return parse_zip(std::move(archive), key, io::display_name(path));
  }
  return parse_torch_file(io::read_raw(path), key, io::display_name(path));
}

namespace {

// data.pkl as Python's torch.save writes a state_dict (protocol 2): an OrderedDict of name ->
// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()), each storage
// a persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel). Only globals that
// torch.load(weights_only=True), PyTorch 2.6's default, allows: LibTorch's own Pickler tags a
// typed dict with torch.jit._pickle.restore_type_tag, which that loader refuses.
class StateDictPickle {
 public:
  StateDictPickle() { bytes_ += "\x80\x02"; }  // PROTO 2
  void begin_dict() { ordered_dict(); }
  void entry(const std::string& name, const at::Tensor& t, size_t storage_key) {
    unicode(name);
    global("torch._utils", "_rebuild_tensor_v2");
    op('(');
    op('(');
    unicode("storage");
    global("torch", storage_class(t.scalar_type()));
    unicode(std::to_string(storage_key));
    unicode("cpu");
    integer(static_cast<int64_t>(t.storage().nbytes() / t.element_size()));
    op('t');
    op('Q');  // BINPERSID
    integer(t.storage_offset());
    ints(t.sizes());
    ints(t.strides());
    op('\x89');  // NEWFALSE: requires_grad
    ordered_dict();  // backward hooks
    op('t');
    op('R');
    op('s');  // SETITEM
  }
  std::string finish() {
    op('.');
    return std::move(bytes_);
  }

 private:
  void op(char c) { bytes_ += c; }
  void global(const char* module, const char* name) { bytes_ += std::string("c") + module + "\n" + name + "\n"; }
  void ordered_dict() {
    global("collections", "OrderedDict");
    op(')');
    op('R');
  }
  void unicode(const std::string& s) {
    op('X');
    little_endian(s.size(), 4);
    bytes_ += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op('K');
      little_endian(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      op('M');
      little_endian(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      little_endian(static_cast<uint64_t>(v), 4);
    } else {
      op('\x8a');  // LONG1: 8 bytes of two's complement
      op('\x08');
      little_endian(static_cast<uint64_t>(v), 8);
    }
  }
  void ints(at::IntArrayRef values) {
    op('(');
    for (int64_t v : values) integer(v);
    op('t');
  }
  void little_endian(uint64_t v, int n) {
    for (int k = 0; k < n; ++k) bytes_ += static_cast<char>((v >> (8 * k)) & 0xff);
  }
  static const char* storage_class(at::ScalarType type) {
    switch (type) {
      case at::kFloat: return "FloatStorage";
      case at::kDouble: return "DoubleStorage";
      case at::kHalf: return "HalfStorage";
      case at::kBFloat16: return "BFloat16Storage";
      case at::kLong: return "LongStorage";
      case at::kInt: return "IntStorage";
      case at::kShort: return "ShortStorage";
      case at::kChar: return "CharStorage";
      case at::kByte: return "ByteStorage";
      case at::kBool: return "BoolStorage";
      default: XL_FAIL(kExitSoftware, "a state_dict tensor of type " << type << " cannot be written");
    }
  }
  std::string bytes_;
};

}  // namespace

void write_torch_state_dict(const checkpoint::TensorList& tensors, std::ostream& out) {
  std::set<std::string> names;
  std::vector<at::Tensor> storages;  // one tensor per distinct storage, in first-use order
  std::map<const void*, size_t> storage_key;
  StateDictPickle pickle;
  pickle.begin_dict();
  for (const auto& [name, tensor] : tensors) {
    XL_CHECK(names.insert(name).second, kExitSoftware, "state_dict name " << name << " twice");
    const at::Tensor t = tensor.detach().to(torch::kCPU);
    const auto [it, added] = storage_key.emplace(t.storage().unsafeGetStorageImpl(), storages.size());
    if (added) storages.push_back(t);
    pickle.entry(name, t, it->second);
  }
  const std::string pickled = pickle.finish();
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t n) -> size_t {
    out.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
    // A failed write stays on the stream for its owner to report (a full disk: 74); a short count
    // would throw from the writer, whose destructor then aborts the process.
    return n;
  });
  // As torch.save: the pickle, then each storage as record data/<key>.
  writer.writeRecord("data.pkl", pickled.data(), pickled.size());
  for (size_t i = 0; i < storages.size(); ++i) {
    const c10::Storage& storage = storages[i].storage();
    writer.writeRecord("data/" + std::to_string(i), storage.data(), storage.nbytes());
  }
  writer.writeEndOfFile();
}

}  // namespace xl::interop

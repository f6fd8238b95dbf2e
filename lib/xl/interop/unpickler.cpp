#include "xl/interop/unpickler.h"

#include <caffe2/serialize/inline_container.h>

#include <cstring>

#include "xl/interop/numpy_array.h"
#include "xl/util/error.h"
#include "xl/util/utf8.h"

namespace xl::interop {

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
std::string a_describe(const Val& v) {
  const std::string d = describe(v);
  return (std::string("aeiou").find(d[0]) == std::string::npos ? "a " : "an ") + d;
}

namespace {

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
      if (op == '.') {  // STOP
        XL_CHECK(stack_.size() == 1, kExitDataErr, file_ << ": " << pkl_ << " leaves " << stack_.size() << " objects");
        return stack_.back();
      }
      if (!(stack_op(op) || scalar_op(op) || container_op(op) || object_op(op)))
        XL_FAIL(kExitDataErr, file_ << ": unsupported pickle opcode 0x" << std::hex << int(op) << std::dec
                                    << " at byte " << at << " of " << pkl_);
    }
  }

 private:
  // The opcodes by what they do, each family a switch that says whether it knew the opcode.
  // Protocol, frames, marks and the stack.
  bool stack_op(uint8_t op) {
    switch (op) {
    case 0x80: byte(); return true;                        // PROTO
    case 0x95: bytes(8); return true;                      // FRAME
    case '(': marks_.push_back(stack_.size()); return true;  // MARK
    case '0': pop(); return true;                          // POP
    case '1': pop_mark(); return true;                     // POP_MARK
    case '2': push(top()); return true;                    // DUP
      default: return false;
    }
  }

  // None, booleans, numbers, strings and bytes.
  bool scalar_op(uint8_t op) {
    switch (op) {
    case 'N': push(make(PyVal::Kind::kNone)); return true;
    case 0x88: case 0x89: {                          // NEWTRUE, NEWFALSE
      auto v = make(PyVal::Kind::kBool);
      v->i = op == 0x88;
      push(v);
      return true;
    }
    case 'J': push(make_int(static_cast<int32_t>(le(4)))); return true;  // BININT
    case 'K': push(make_int(static_cast<int64_t>(le(1)))); return true;  // BININT1
    case 'M': push(make_int(static_cast<int64_t>(le(2)))); return true;  // BININT2
    case 0x8a: push(make_int(long_int(le(1)))); return true;             // LONG1
    case 0x8b: push(make_int(long_int(le(4)))); return true;             // LONG4
    case 'G': {                                                    // BINFLOAT (big-endian)
      uint64_t bits = 0;
      for (int k = 0; k < 8; ++k) bits = (bits << 8) | byte();
      auto v = make(PyVal::Kind::kFloat);
      std::memcpy(&v->f, &bits, 8);
      push(v);
      return true;
    }
    case 'X': push(make_str(PyVal::Kind::kStr, bytes(le(4)))); return true;     // BINUNICODE
    case 0x8c: push(make_str(PyVal::Kind::kStr, bytes(le(1)))); return true;    // SHORT_BINUNICODE
    case 0x8d: push(make_str(PyVal::Kind::kStr, bytes(le(8)))); return true;    // BINUNICODE8
    case 'T': push(make_str(PyVal::Kind::kStr, bytes(le(4)))); return true;     // BINSTRING
    case 'U': push(make_str(PyVal::Kind::kStr, bytes(le(1)))); return true;     // SHORT_BINSTRING
    case 'B': push(make_str(PyVal::Kind::kBytes, bytes(le(4)))); return true;   // BINBYTES
    case 'C': push(make_str(PyVal::Kind::kBytes, bytes(le(1)))); return true;   // SHORT_BINBYTES
    case 0x8e: push(make_str(PyVal::Kind::kBytes, bytes(le(8)))); return true;  // BINBYTES8
      default: return false;
    }
  }

  // Tuples, lists, sets and dicts.
  bool container_op(uint8_t op) {
    switch (op) {
    case ')': push(make(PyVal::Kind::kTuple)); return true;                     // EMPTY_TUPLE
    case 't': {                                                           // TUPLE
      auto v = make(PyVal::Kind::kTuple);
      v->items = pop_mark();
      push(v);
      return true;
    }
    case 0x85: case 0x86: case 0x87: {                                    // TUPLE1..3
      auto v = make(PyVal::Kind::kTuple);
      v->items = pop_n(op - 0x84);
      push(v);
      return true;
    }
    case ']': push(make(PyVal::Kind::kList)); return true;                      // EMPTY_LIST
    case 'l': {                                                           // LIST
      auto v = make(PyVal::Kind::kList);
      v->items = pop_mark();
      push(v);
      return true;
    }
    case 'a': {                                                           // APPEND
      Val x = pop();
      list_top()->items.push_back(x);
      return true;
    }
    case 'e': {                                                           // APPENDS
      auto xs = pop_mark();
      auto& items = list_top()->items;
      items.insert(items.end(), xs.begin(), xs.end());
      return true;
    }
    // Sets (of a pickled object's attributes) are kept as lists.
    case 0x8f: push(make(PyVal::Kind::kList)); return true;                     // EMPTY_SET
    case 0x90: {                                                          // ADDITEMS
      auto xs = pop_mark();
      auto& items = list_top()->items;
      items.insert(items.end(), xs.begin(), xs.end());
      return true;
    }
    case 0x91: {                                                          // FROZENSET
      auto v = make(PyVal::Kind::kList);
      v->items = pop_mark();
      push(v);
      return true;
    }
    case 0x96: push(make_str(PyVal::Kind::kBytes, bytes(le(8)))); return true;  // BYTEARRAY8
    case '}': push(make(PyVal::Kind::kDict)); return true;                      // EMPTY_DICT
    case 'd': {                                                           // DICT
      auto v = make(PyVal::Kind::kDict);
      set_items(v, pop_mark());
      push(v);
      return true;
    }
    case 's': {                                                           // SETITEM
      Val value = pop(), key = pop();
      set_items(dict_top(), {key, value});
      return true;
    }
    case 'u': {                                                           // SETITEMS
      auto xs = pop_mark();
      set_items(dict_top(), xs);
      return true;
    }
      default: return false;
    }
  }

  // Classes, the memo, calls, object state and storages.
  bool object_op(uint8_t op) {
    switch (op) {
    case 'c': {                                                           // GLOBAL
      std::string module = line(), name = line();
      push(make_str(PyVal::Kind::kGlobal, module + "." + name));
      return true;
    }
    case 0x93: {                                                          // STACK_GLOBAL
      Val name = pop(), module = pop();
      XL_CHECK(name->kind == PyVal::Kind::kStr && module->kind == PyVal::Kind::kStr, kExitDataErr,
               file_ << ": bad STACK_GLOBAL in " << pkl_);
      push(make_str(PyVal::Kind::kGlobal, module->s + "." + name->s));
      return true;
    }
    case 'q': memo_[le(1)] = top(); return true;           // BINPUT
    case 'r': memo_[le(4)] = top(); return true;           // LONG_BINPUT
    case 'p': memo_[memo_index(line())] = top(); return true;  // PUT
    case 0x94: memo_[memo_.size()] = top(); return true;   // MEMOIZE
    case 'h': push(memo(le(1))); return true;              // BINGET
    case 'j': push(memo(le(4))); return true;              // LONG_BINGET
    case 'g': push(memo(memo_index(line()))); return true;  // GET
    case 'R': case 0x81: {                           // REDUCE, NEWOBJ
      Val args = pop(), callable = pop();
      push(call(callable, args));
      return true;
    }
    case 0x92: {                                     // NEWOBJ_EX: its keyword arguments unused
      pop();
      Val args = pop(), callable = pop();
      push(call(callable, args));
      return true;
    }
    case 'b': {                                      // BUILD: an object's state
      Val state = pop();
      const Val& object = top();
      if (object->kind == PyVal::Kind::kObject && object->s == "numpy.dtype") {
        build_numpy_dtype(object, state);
        return true;
      }
      if (object->kind == PyVal::Kind::kObject && object->s == "numpy.ndarray") {
        build_numpy_array(object, state);
        return true;
      }
      // (dict, slots) or a dict: kept for a module's parameters, buffers, submodules, attributes.
      if (state->kind == PyVal::Kind::kTuple && !state->items.empty()) state = state->items[0];
      if (object->kind == PyVal::Kind::kObject && state->kind == PyVal::Kind::kDict) object->dict = state->dict;
      return true;
    }
    case 'Q': push(persistent(pop())); return true;        // BINPERSID
      default: return false;
    }
  }

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

}  // namespace

Unpickled unpickle(const std::string& data, size_t start, caffe2::serialize::PyTorchStreamReader* reader,
                   const std::string& file, const std::string& what) {
  Unpickler u(data, start, reader, file, what);
  Unpickled out;
  out.root = u.run();
  out.end = u.end();
  out.storages = u.storages();
  return out;
}

}  // namespace xl::interop

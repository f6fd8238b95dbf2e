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
#include "xl/interop/unpickler.h"
#include "xl/interop/zip_check.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/torch_save_signature.h"
#include "xl/util/utf8.h"

namespace xl::interop {
namespace {

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
    Unpickled u = unpickle(bytes, pos, nullptr, display, "the legacy file's header");
    pos = u.end;
    return u.root;
  };
  const Val version = next(), sys_info = next();
  XL_CHECK(version->kind == PyVal::Kind::kInt && version->i == 1001, kExitDataErr,
           display << ": legacy torch.save protocol " << (version->kind == PyVal::Kind::kInt ? std::to_string(version->i) : "?")
                   << ", not 1001");
  Val little = sys_info->kind == PyVal::Kind::kDict ? state_entry(sys_info, "little_endian") : nullptr;
  XL_CHECK(little && little->kind == PyVal::Kind::kBool && little->i == 1, kExitDataErr,
           display << ": tensors stored big-endian (or of unknown order) are not supported");
  const Unpickled main = unpickle(bytes, pos, nullptr, display, "the pickle");
  const Val& root = main.root;
  pos = main.end;
  const Unpickled keys_read = unpickle(bytes, pos, nullptr, display, "the storage keys");
  const Val& keys = keys_read.root;
  pos = keys_read.end;
  XL_CHECK(keys->kind == PyVal::Kind::kList, kExitDataErr, display << ": the storage keys are " << a_describe(keys) << ", not a list");
  for (const Val& k : keys->items) {
    XL_CHECK(k->kind == PyVal::Kind::kStr, kExitDataErr, display << ": a storage key is " << a_describe(k));
    auto it = main.storages.find(k->s);
    XL_CHECK(it != main.storages.end(), kExitDataErr, display << ": storage " << k->s << " is stored but not used");
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
  XL_CHECK(keys->items.size() == main.storages.size(), kExitDataErr, display << ": a storage the pickle uses is not stored");
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
  check_zip_archive(archive->size(),
                    [&](uint64_t pos, void* buf, size_t n) { archive->read(pos, buf, n, "the zip check"); }, display);
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
    return torch_file_of(unpickle(pkl, 0, reader.get(), display, "data.pkl").root, key, display);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    XL_FAIL(kExitDataErr, display << ": cannot read a tensor (" << what.substr(0, what.find('\n')) << ")");
  }
}

}  // namespace

TorchFile parse_torch_file(const std::string& bytes, const std::string& key, const std::string& display) {
  XL_CHECK(!bytes.empty(), kExitDataErr, display << ": empty file, not a PyTorch state_dict");
  if (is_plain_pickle(bytes)) {
    const Unpickled pickle = unpickle(bytes, 0, nullptr, display, "the pickle");
    TorchFile out = torch_file_of(pickle.root, key, display);
    XL_CHECK(pickle.storages.empty(), kExitDataErr, display << ": a plain pickle with tensor storages, which only torch.save writes");
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

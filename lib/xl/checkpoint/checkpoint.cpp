#include "xl/checkpoint/checkpoint.h"

#include <ctime>
#include <limits>
#include <set>
#include <sstream>

#include "xl/h5/checksum.h"
#include "xl/h5/tokens_file.h"
#include "xl/util/clock.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"

namespace xl::checkpoint {

using namespace xl::h5;  // the HDF5 layer this format is written with
namespace {

// The tensor groups, in file order, with the Checkpoint member each one holds.
struct GroupSlot {
  const char* name;
  TensorList Checkpoint::*list;
};
constexpr GroupSlot kGroups[] = {{"model", &Checkpoint::model},
                                 {"optimizer", &Checkpoint::optimizer},
                                 {"rng", &Checkpoint::rng},
                                 {"memory", &Checkpoint::memory},
                                 {"analysis", &Checkpoint::analysis}};

// How a torch dtype is stored: on-disk type, native memory type, and the `torch_dtype` tag for
// dtypes HDF5 (and numpy) cannot represent directly (empty when the stored type says it all).
struct Storage {
  hid_t file_type;
  hid_t mem_type;
  const char* tag;
};

Storage storage_of(torch::ScalarType dtype, const std::string& file, const std::string& path) {
  switch (dtype) {
    case torch::kFloat: return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, ""};
    case torch::kDouble: return {H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, ""};
    case torch::kLong: return {H5T_STD_I64LE, H5T_NATIVE_INT64, ""};
    case torch::kInt: return {H5T_STD_I32LE, H5T_NATIVE_INT32, ""};
    case torch::kShort: return {H5T_STD_I16LE, H5T_NATIVE_INT16, ""};
    case torch::kChar: return {H5T_STD_I8LE, H5T_NATIVE_INT8, ""};
    case torch::kByte: return {H5T_STD_U8LE, H5T_NATIVE_UINT8, ""};
    case torch::kBool: return {H5T_STD_U8LE, H5T_NATIVE_UINT8, "bool"};
    case torch::kHalf: return {H5T_STD_U16LE, H5T_NATIVE_UINT16, "float16"};
    case torch::kBFloat16: return {H5T_STD_U16LE, H5T_NATIVE_UINT16, "bfloat16"};
    default:
      fail(file, kExitSoftware, "cannot store tensor " + path + " of dtype " +
                                    std::string(c10::toString(dtype)) + " in a checkpoint");
  }
}

// How a stored element type is read: the buffer's dtype and native HDF5 type, and the dtype the
// caller gets (they differ for bool and IEEE half). mem_type < 0: not readable.
struct ReadAs {
  torch::ScalarType buffer;
  hid_t mem_type;
  torch::ScalarType result;
};

ReadAs read_as(H5T_class_t cls, size_t size, bool is_signed, const std::string& tag) {
  auto same = [](torch::ScalarType d, hid_t m) { return ReadAs{d, m, d}; };
  if (cls == H5T_FLOAT) {
    if (size == 4) return same(torch::kFloat, H5T_NATIVE_FLOAT);
    if (size == 8) return same(torch::kDouble, H5T_NATIVE_DOUBLE);
    if (size == 2) return {torch::kFloat, H5T_NATIVE_FLOAT, torch::kHalf};  // numpy float16
  } else if (cls == H5T_INTEGER) {
    if (size == 1 && is_signed) return same(torch::kChar, H5T_NATIVE_INT8);
    if (size == 1) return {torch::kByte, H5T_NATIVE_UINT8, tag == "bool" ? torch::kBool : torch::kByte};
    if (size == 2 && is_signed) return same(torch::kShort, H5T_NATIVE_INT16);
    if (size == 2 && tag == "float16") return same(torch::kHalf, H5T_NATIVE_UINT16);
    if (size == 2 && tag == "bfloat16") return same(torch::kBFloat16, H5T_NATIVE_UINT16);
    if (size == 2) return same(torch::kInt, H5T_NATIVE_INT32);  // torch has no uint16
    if (size == 4 && is_signed) return same(torch::kInt, H5T_NATIVE_INT32);
    if (size == 4 || size == 8) return same(torch::kLong, H5T_NATIVE_INT64);
  } else if (cls == H5T_ENUM && size == 1) {  // h5py stores numpy bool as an int8 enum
    return {torch::kByte, 0, torch::kBool};  // mem_type: the enum's native type, set by the caller
  }
  return {torch::kFloat, -1, torch::kFloat};
}

void check_names(const TensorList& list, const std::string& group, const std::string& file) {
  std::set<std::string> seen;
  for (const auto& [name, t] : list) {
    const std::string path = "/" + group + "/" + name;
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      fail(file, kExitSoftware, "bad tensor name '" + name + "' in /" + group);
    if (!seen.insert(name).second) fail(file, kExitSoftware, "duplicate tensor " + path);
    if (!t.defined()) fail(file, kExitSoftware, "tensor " + path + " is undefined");
    storage_of(t.scalar_type(), file, path);
  }
}

// A group that remembers link creation order, so that h5py and h5ls list tensors as stored.
Handle create_ordered_group(hid_t loc, const std::string& name, const std::string& file) {
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  hid_t g = H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT);
  if (g < 0) fail(file, kExitIoErr, "cannot create group /" + name);
  return Handle(g);
}

nlohmann::json read_json_attr(hid_t root, const std::string& key, const std::string& file, bool required) {
  auto text = read_attr_string(root, key);
  if (!text) {
    if (required) fail(file, kExitDataErr, "malformed checkpoint: no " + key + " attribute");
    return nullptr;
  }
  auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(file, kExitDataErr, "malformed checkpoint: attribute " + key + " is not JSON");
  return j;
}

TensorList read_group(hid_t root, const std::string& group, const std::string& file) {
  TensorList out;
  if (!exists(root, group)) return out;
  std::vector<std::pair<int64_t, std::string>> entries;
  for (const auto& name : list(root, group)) {
    const std::string path = group + "/" + name;
    H5O_info_t info;
    if (H5Oget_info_by_name(root, path.c_str(), &info, H5P_DEFAULT) < 0 || info.type != H5O_TYPE_DATASET)
      fail(file, kExitDataErr, "malformed checkpoint: /" + path + " is not a dataset");
    int64_t order = std::numeric_limits<int64_t>::max();  // unordered entries follow, by name
    Handle ds(H5Dopen2(root, path.c_str(), H5P_DEFAULT));
    if (ds.valid()) order = read_attr_int(ds, "order").value_or(order);
    entries.emplace_back(order, name);
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  out.reserve(entries.size());
  for (const auto& [order, name] : entries)
    out.emplace_back(name, read_tensor(root, group + "/" + name, file));
  return out;
}

}  // namespace

void write_tensor(hid_t loc, const std::string& path, const torch::Tensor& tensor, int64_t order,
                  const std::string& file) {
  const Storage st = storage_of(tensor.scalar_type(), file, "/" + path);
  torch::NoGradGuard no_grad;  // a parameter's copy needs no autograd history
  torch::Tensor t = tensor.device().is_cpu() ? tensor.contiguous() : tensor.to(torch::kCPU).contiguous();
  std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  // Contiguous layout, same type in memory and on disk: HDF5 writes straight from the tensor.
  Handle ds(H5Dcreate2(loc, path.c_str(), st.file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!ds.valid()) fail(file, kExitIoErr, "cannot create dataset /" + path);
  if (t.numel() > 0 && H5Dwrite(ds, st.mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0)
    fail(file, kExitIoErr, "cannot write dataset /" + path + " (disk full?)");
  if (order >= 0) write_attr(ds, "order", order);
  if (*st.tag) write_attr(ds, "torch_dtype", std::string(st.tag));
  write_attr(ds, kChecksumAttr, data_checksum(t.data_ptr(), t.nbytes()));
}

namespace {

// A dataset about to be read as a tensor: its shape, and how its elements are read.
struct StoredTensor {
  std::string where;  // "/group/name", for errors
  Handle ds;
  std::vector<int64_t> sizes;
  size_t element_size = 0;
  ReadAs r;
  Handle native;  // h5py's bool enum is read in its own (native) type
  hid_t mem_type() const { return native.valid() ? native.id() : r.mem_type; }
};

// Opens and checks a dataset; reads nothing.
StoredTensor open_stored(hid_t loc, const std::string& path, const std::string& file) {
  StoredTensor st;
  st.where = "/" + path;
  const std::string& where = st.where;
  st.ds = Handle(H5Dopen2(loc, path.c_str(), H5P_DEFAULT));
  const Handle& ds = st.ds;
  if (!ds.valid()) fail(file, kExitDataErr, "cannot open dataset " + where + " (truncated or corrupt file?)");
  Handle space(H5Dget_space(ds));
  Handle ftype(H5Dget_type(ds));
  if (!space.valid() || !ftype.valid())
    fail(file, kExitDataErr, "cannot read dataset " + where + " (corrupt file?)");
  switch (H5Sget_simple_extent_type(space)) {
    case H5S_SCALAR: break;
    case H5S_SIMPLE: {
      int rank = H5Sget_simple_extent_ndims(space);
      std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
      if (rank < 0 || H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0)
        fail(file, kExitDataErr, "cannot read the shape of " + where + " (corrupt file?)");
      st.sizes.assign(dims.begin(), dims.end());
      break;
    }
    default: fail(file, kExitDataErr, "dataset " + where + " has no shape");
  }

  // The stored type picks the tensor dtype; `torch_dtype` refines uint8/uint16 storage.
  const std::string tag = read_attr_string(ds, "torch_dtype").value_or("");
  const H5T_class_t cls = H5Tget_class(ftype);
  st.element_size = H5Tget_size(ftype);
  const bool is_signed = cls == H5T_INTEGER && H5Tget_sign(ftype) == H5T_SGN_2;
  st.r = read_as(cls, st.element_size, is_signed, tag);
  if (st.r.mem_type < 0)
    fail(file, kExitDataErr, "dataset " + where + " has an element type this program cannot read");
  if (cls == H5T_ENUM) st.native = Handle(H5Tget_native_type(ftype, H5T_DIR_ASCEND));

  // A contiguous dataset must own all its bytes: a damaged header could claim any shape.
  int64_t numel = 1;
  for (int64_t d : st.sizes) numel *= d;
  Handle dcpl(H5Dget_create_plist(ds));
  if (numel > 0 && dcpl.valid() && H5Pget_layout(dcpl) == H5D_CONTIGUOUS &&
      H5Dget_storage_size(ds) < static_cast<hsize_t>(numel) * st.element_size)
    fail(file, kExitDataErr, "dataset " + where + " is shorter than its shape (truncated or corrupt?)");
  return st;
}

// Reads the dataset into `buffer` (contiguous, its shape, dtype st.r.buffer) and checks its bytes.
void read_stored(const StoredTensor& st, const torch::Tensor& buffer, const std::string& file) {
  if (buffer.numel() > 0 && H5Dread(st.ds, st.mem_type(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data_ptr()) < 0)
    fail(file, kExitDataErr, "cannot read dataset " + st.where + " (truncated or corrupt file?)");
  // The buffer has the stored element type, so its bytes are those that were written.
  if (buffer.element_size() == static_cast<int64_t>(st.element_size))
    check_data(st.ds, buffer.data_ptr(), buffer.nbytes(), st.where, file);
}

torch::Tensor read_stored(const StoredTensor& st, const std::string& file) {
  torch::Tensor t;
  try {
    t = torch::empty(st.sizes, torch::TensorOptions().dtype(st.r.buffer));
  } catch (const std::exception&) {
    fail(file, kExitDataErr, "dataset " + st.where + " is too large to read (corrupt file?)");
  }
  read_stored(st, t, file);
  if (st.r.result == torch::kBool) t = t.ne(0);  // any nonzero byte is true
  else if (st.r.result != st.r.buffer) t = t.to(st.r.result);
  return t;
}

}  // namespace

torch::Tensor read_tensor(hid_t loc, const std::string& path, const std::string& file) {
  return read_stored(open_stored(loc, path, file), file);
}

void save(const std::string& path, const Checkpoint& ckpt, bool force) {
  const std::string display = io::is_stdio(path) ? "<stdout>" : path;
  // Refuse a malformed list before creating anything.
  for (const auto& g : kGroups) check_names(ckpt.*(g.list), g.name, display);

  OutputFile out(path, force);
  File& f = out.file();
  const std::string& name = f.name();
  hid_t root = f.id();
  write_attr(root, "xl_format", std::string(kCheckpointFormat));
  write_attr(root, "xl_format_version", kCheckpointFormatVersion);
  write_attr(root, "created_by", std::string("xl " XL_VERSION));
  write_attr(root, "created_utc", utc_now());
  write_attr(root, "phase", ckpt.phase);
  write_attr(root, "model_config", json_line(ckpt.model_config));
  write_attr(root, "train_config", json_line(ckpt.train_config));
  write_attr(root, "state", json_line(ckpt.state.to_json()));
  // Copies of the two numbers people look for first (h5py, `xl-inspect --json | jq`); the state
  // JSON stays authoritative.
  write_attr(root, "step", ckpt.state.step);
  write_attr(root, "tokens_seen", ckpt.state.tokens_seen);
  write_attr(root, "vocab_sha256", ckpt.vocab.sha256());
  write_vocab(root, "vocab", ckpt.vocab);
  for (const auto& g : kGroups) {
    Handle group = create_ordered_group(root, g.name, name);
    const TensorList& tensors = ckpt.*(g.list);
    for (size_t i = 0; i < tensors.size(); ++i)
      write_tensor(group, tensors[i].first, tensors[i].second, static_cast<int64_t>(i), name);
  }
  // Everything else reaches the file before the flag that says it is there.
  f.flush();
  write_attr(root, "complete", int64_t{1});
  out.commit();
}

Reader::Reader(const std::string& path, const ExpectedVocab& expected)
    : file_(File::open(path, "an xl checkpoint")) {
  const std::string& name = file_.name();
  hid_t root = file_.id();
  auto format = read_attr_string(root, "xl_format");
  if (!format) fail(name, kExitDataErr, "not an xl checkpoint (no xl_format attribute)");
  if (*format != kCheckpointFormat)
    fail(name, kExitDataErr, "is an '" + *format + "' file, not an xl checkpoint" +
                                 (*format == h5::kTokensFormat ? " (where a tool takes both, the checkpoint comes first)" : ""));
  auto version = read_attr_int(root, "xl_format_version");
  if (!version || *version < 1) fail(name, kExitDataErr, "not an xl checkpoint (no valid xl_format_version)");
  if (*version > kCheckpointFormatVersion)
    fail(name, kExitDataErr, "format version " + std::to_string(*version) +
                                 " is newer than this program reads (" +
                                 std::to_string(kCheckpointFormatVersion) + ")");
  if (read_attr_int(root, "complete").value_or(0) != 1)
    fail(name, kExitDataErr, "incomplete checkpoint (its writer was interrupted)");

  ckpt_.vocab = read_vocab(root, "vocab", name);
  const std::string sha = ckpt_.vocab.sha256();
  auto stored_sha = read_attr_string(root, "vocab_sha256");
  if (stored_sha && *stored_sha != sha)
    fail(name, kExitDataErr, "malformed checkpoint: vocab_sha256 does not match the embedded vocab");
  if (!expected.sha256.empty() && expected.sha256 != sha)
    fail(name, kExitDataErr, "vocab mismatch: trained on vocab " + sha.substr(0, 12) + ", but " +
                                 io::display_name(expected.file) + " holds vocab " + expected.sha256.substr(0, 12) +
                                 (io::is_stdio(path) ? "" : " (tokenize the text with this model's: xl-tokenize --vocab " + path + ")"));
  ckpt_.phase = read_attr_string(root, "phase").value_or("");
  ckpt_.model_config = read_json_attr(root, "model_config", name, /*required=*/true);
  ckpt_.train_config = read_json_attr(root, "train_config", name, false);
  ckpt_.state = RunState::from_json(read_json_attr(root, "state", name, false), name);
}

double Reader::model_elements() const {
  double total = 0;
  if (!exists(file_.id(), "model")) return total;
  for (const auto& name : list(file_.id(), "model")) {
    double n = 1;
    for (int64_t d : open_stored(file_.id(), "model/" + name, file()).sizes) n *= static_cast<double>(d);
    total += n;
  }
  return total;
}

void Reader::read_model_into(const TensorList& into) {
  torch::NoGradGuard no_grad;  // parameters are written in place
  const std::string& name = file();
  std::set<std::string> stored;
  if (exists(file_.id(), "model"))
    for (const auto& n : list(file_.id(), "model")) stored.insert(n);
  for (const auto& [tensor, target] : into) {
    if (!stored.erase(tensor)) fail(name, kExitDataErr, "checkpoint lacks tensor '" + tensor + "'");
    const StoredTensor st = open_stored(file_.id(), "model/" + tensor, name);
    if (target.sizes() != c10::IntArrayRef(st.sizes)) {
      std::ostringstream os;
      os << "tensor '" << tensor << "' has shape " << c10::IntArrayRef(st.sizes) << ", the model expects "
         << target.sizes();
      fail(name, kExitDataErr, os.str());
    }
    // Straight into the target when it holds the stored elements as they are; else through a copy.
    if (target.device().is_cpu() && target.is_contiguous() && target.scalar_type() == st.r.buffer &&
        st.r.result == st.r.buffer)
      read_stored(st, target, name);
    else
      target.copy_(read_stored(st, name));
  }
  if (!stored.empty()) fail(name, kExitDataErr, "checkpoint has tensor '" + *stored.begin() + "' that the model does not");
  model_read_ = true;
}

Checkpoint Reader::finish(bool with_training_state) {
  for (const auto& g : kGroups) {
    const bool training_state = g.list == &Checkpoint::optimizer || g.list == &Checkpoint::rng ||
                                g.list == &Checkpoint::memory;
    if ((training_state && !with_training_state) || (g.list == &Checkpoint::model && model_read_)) continue;
    ckpt_.*(g.list) = read_group(file_.id(), g.name, file());
  }
  return std::move(ckpt_);
}

Checkpoint load(const std::string& path, const ExpectedVocab& expected, bool with_training_state) {
  return Reader(path, expected).finish(with_training_state);
}

torch::Tensor find_tensor(const TensorList& list, const std::string& name) {
  for (const auto& [n, t] : list)
    if (n == name) return t;
  return {};
}

}  // namespace xl::checkpoint

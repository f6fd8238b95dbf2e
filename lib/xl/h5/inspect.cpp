#include "xl/h5/inspect.h"

#include <sstream>

#include "xl/h5/tokens_file.h"

namespace xl::h5 {
namespace {

nlohmann::json attributes_of(hid_t obj) {
  nlohmann::json attrs = nlohmann::json::object();
  H5O_info_t info;
  H5Oget_info(obj, &info);
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    Handle a(H5Aopen_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT));
    ssize_t n = H5Aget_name(a, 0, nullptr);
    std::string name(static_cast<size_t>(n) + 1, '\0');
    H5Aget_name(a, name.size(), name.data());
    name.resize(static_cast<size_t>(n));
    Handle t(H5Aget_type(a));
    switch (H5Tget_class(t)) {
      case H5T_STRING: attrs[name] = read_attr_string(obj, name).value_or(""); break;
      case H5T_INTEGER: attrs[name] = read_attr_int(obj, name).value_or(0); break;
      case H5T_FLOAT: attrs[name] = read_attr_double(obj, name).value_or(0.0); break;
      default: attrs[name] = "(unsupported type)";
    }
  }
  return attrs;
}

const char* type_name(Type t) {
  switch (t) {
    case Type::kU8: return "uint8";
    case Type::kU16: return "uint16";
    case Type::kI32: return "int32";
    case Type::kI64: return "int64";
    case Type::kF32: return "float32";
    case Type::kF64: return "float64";
  }
  return "?";
}

struct VisitState {
  nlohmann::json* datasets;
  std::string file;
};

herr_t visit(hid_t obj, const char* name, const H5O_info_t* info, void* data) {
  auto* st = static_cast<VisitState*>(data);
  if (info->type != H5O_TYPE_DATASET) return 0;
  nlohmann::json d;
  d["path"] = std::string("/") + name;
  d["shape"] = dataset_dims(obj, name, st->file);
  d["dtype"] = type_name(dataset_type(obj, name, st->file));
  st->datasets->push_back(d);
  return 0;
}

}  // namespace

nlohmann::json describe(const File& file) {
  nlohmann::json j;
  j["file"] = file.name();
  j["attributes"] = attributes_of(file.id());
  std::string format = read_attr_string(file.id(), "xl_format").value_or("");
  j["format"] = format.empty() ? "unknown (not written by xl)" : format;
  if (format == kTokensFormat) {
    text::Vocab vocab = read_vocab(file.id(), "vocab", file.name());
    j["vocab"] = {{"type", text::to_string(vocab.type())}, {"size", vocab.size()},
                  {"specials", vocab.specials()}, {"sha256", vocab.sha256()}};
    nlohmann::json splits = nlohmann::json::array();
    int64_t total = 0;
    for (const auto& name : list(file.id(), "splits")) {
      auto dims = dataset_dims(file.id(), "splits/" + name, file.name());
      int64_t n = dims.empty() ? 0 : static_cast<int64_t>(dims[0]);
      total += n;
      Handle ds(H5Dopen2(file.id(), ("splits/" + name).c_str(), H5P_DEFAULT));
      splits.push_back({{"name", name}, {"tokens", n}, {"attributes", attributes_of(ds)}});
    }
    // Canonical order: train, valid, test, then the rest.
    auto rank = [](const std::string& s) { return s == "train" ? 0 : s == "valid" ? 1 : s == "test" ? 2 : 3; };
    std::stable_sort(splits.begin(), splits.end(), [&](const auto& a, const auto& b) {
      return rank(a["name"].template get<std::string>()) < rank(b["name"].template get<std::string>());
    });
    j["splits"] = splits;
    j["total_tokens"] = total;
  }
  nlohmann::json datasets = nlohmann::json::array();
  VisitState st{&datasets, file.name()};
  H5Ovisit(file.id(), H5_INDEX_NAME, H5_ITER_INC, visit, &st);
  j["datasets"] = datasets;
  return j;
}

std::string describe_text(const nlohmann::json& j) {
  std::ostringstream os;
  os << j["file"].get<std::string>() << ": " << j["format"].get<std::string>();
  if (j["attributes"].contains("xl_format_version")) os << " version " << j["attributes"]["xl_format_version"];
  os << "\n";
  for (const auto& [k, v] : j["attributes"].items()) {
    if (k == "xl_format" || k == "xl_format_version") continue;
    std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    if (text.size() > 200) text = text.substr(0, 197) + "...";
    os << "  " << k << ": " << text << "\n";
  }
  if (j.contains("vocab")) {
    const auto& v = j["vocab"];
    os << "vocab: " << v["type"].get<std::string>() << ", " << v["size"] << " entries (" << v["specials"]
       << " special), sha256 " << v["sha256"].get<std::string>() << "\n";
  }
  if (j.contains("splits")) {
    os << "splits:\n";
    for (const auto& s : j["splits"]) {
      os << "  " << s["name"].get<std::string>() << ": " << s["tokens"] << " tokens";
      const auto& a = s["attributes"];
      if (a.contains("unknown") && a["unknown"].get<int64_t>() > 0) os << ", " << a["unknown"] << " <unk>";
      if (a.contains("source")) os << " (from " << a["source"].get<std::string>() << ")";
      os << "\n";
    }
    os << "  total: " << j["total_tokens"] << " tokens\n";
  }
  if (!j.contains("splits")) {
    os << "datasets:\n";
    for (const auto& d : j["datasets"]) os << "  " << d["path"].get<std::string>() << " " << d["dtype"].get<std::string>() << " " << d["shape"].dump() << "\n";
  }
  return os.str();
}

}  // namespace xl::h5

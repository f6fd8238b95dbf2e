#include "xl/h5/inspect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <iomanip>
#include <limits>
#include <sstream>

#include "xl/h5/formats.h"
#include "xl/h5/tokens_file.h"
#include "xl/util/error.h"
#include "xl/util/json_io.h"

namespace xl::h5 {
namespace {

herr_t collect_attr_name(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

nlohmann::json attributes_of(hid_t obj) {
  // Names in one walk (asking by index made a crafted file claim any name length: the resize
  // threw length_error, found by fuzz/checkpoint_h5), then each attribute by name.
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, collect_attr_name, &names) < 0)
    fail(file_name(obj), kExitDataErr, "cannot list attributes (corrupt file?)");
  std::sort(names.begin(), names.end());
  nlohmann::json attrs = nlohmann::json::object();
  for (const auto& name : names) {
    Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
    Handle t(a.valid() ? H5Aget_type(a) : -1);
    switch (t.valid() ? H5Tget_class(t) : H5T_NO_CLASS) {
      case H5T_STRING: attrs[name] = read_attr_string(obj, name).value_or(""); break;
      case H5T_INTEGER: attrs[name] = read_attr_int(obj, name).value_or(0); break;
      case H5T_FLOAT: attrs[name] = read_attr_double(obj, name).value_or(0.0); break;
      default: attrs[name] = "(unsupported type)";
    }
  }
  return attrs;
}

// The stored element type, named as numpy would ("float16", "uint32", "bool" for h5py's enum).
std::string dtype_name(hid_t ds) {
  Handle t(H5Dget_type(ds));
  if (!t.valid()) return "?";
  const size_t bits = 8 * H5Tget_size(t);
  switch (H5Tget_class(t)) {
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_INTEGER: return (H5Tget_sign(t) == H5T_SGN_2 ? "int" : "uint") + std::to_string(bits);
    case H5T_ENUM: return bits == 8 ? "bool" : "enum";
    case H5T_STRING: return "string";
    default: return "other";
  }
}

struct VisitState {
  nlohmann::json* datasets;
  std::string file;
  std::exception_ptr error;  // exceptions must not unwind through HDF5's C frames
};

herr_t visit(hid_t obj, const char* name, const H5O_info_t* info, void* data) {
  auto* st = static_cast<VisitState*>(data);
  if (info->type != H5O_TYPE_DATASET) return 0;
  try {
    nlohmann::json d;
    d["path"] = std::string("/") + name;
    d["shape"] = dataset_dims(obj, name, st->file);
    Handle ds(H5Dopen2(obj, name, H5P_DEFAULT));
    d["dtype"] = dtype_name(ds);
    if (auto tag = read_attr_string(ds, "torch_dtype")) d["torch_dtype"] = *tag;
    st->datasets->push_back(d);
    return 0;
  } catch (...) {
    st->error = std::current_exception();
    return 1;  // stops the walk
  }
}

// The checkpoint summary: phase, training position, model configuration, parameter count,
// groups, completeness and the head mask. Reads attributes and shapes only (plus the head mask),
// and works on incomplete files too.
nlohmann::json describe_checkpoint(const File& file) {
  hid_t root = file.id();
  nlohmann::json k;
  k["phase"] = read_attr_string(root, "phase").value_or("");
  k["complete"] = read_attr_int(root, "complete").value_or(0) == 1;
  auto json_attr = [&](const char* key) -> nlohmann::json {
    auto text = read_attr_string(root, key);
    if (!text) return nullptr;
    auto j = nlohmann::json::parse(*text, nullptr, false);
    return j.is_discarded() ? nlohmann::json(*text) : j;
  };
  nlohmann::json state = json_attr("state");
  for (const char* key : {"step", "tokens_seen", "epoch"})
    if (state.is_object() && state.contains(key)) k[key] = state[key];
  k["model_config"] = json_attr("model_config");
  k["train_config"] = json_attr("train_config");
  k["state"] = state;
  nlohmann::json groups = nlohmann::json::object();
  int64_t buffer_elements = 0;
  for (const char* g : {"model", "optimizer", "rng", "memory", "analysis"}) {
    if (!exists(root, g)) continue;
    int64_t count = 0, elements = 0;
    std::vector<std::pair<int64_t, nlohmann::json>> tensors;
    for (const auto& name : list(root, g)) {
      const std::string path = std::string(g) + "/" + name;
      H5O_info_t info;
      if (H5Oget_info_by_name(root, path.c_str(), &info, H5P_DEFAULT) < 0 || info.type != H5O_TYPE_DATASET)
        continue;
      auto dims = dataset_dims(root, path, file.name());
      int64_t n = 1;
      for (auto d : dims) n *= static_cast<int64_t>(d);
      ++count;
      elements += n;
      if (std::string(g) == "model") {
        // The sinusoid's inverse frequencies are stored, as Transformer-XL's state_dict has them,
        // but are not trained: not a parameter.
        if (name == "pos_emb.inv_freq") buffer_elements += n;
        Handle ds(H5Dopen2(root, path.c_str(), H5P_DEFAULT));
        int64_t order = read_attr_int(ds, "order").value_or(std::numeric_limits<int64_t>::max());
        std::string dtype = read_attr_string(ds, "torch_dtype").value_or(dtype_name(ds));
        tensors.emplace_back(order, nlohmann::json{{"name", name}, {"dtype", dtype}, {"shape", dims}});
      }
    }
    if (std::string(g) == "model") {
      // In stored order, which is the model's own.
      std::stable_sort(tensors.begin(), tensors.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      nlohmann::json params = nlohmann::json::array();
      for (auto& t : tensors) params.push_back(std::move(t.second));
      k["model_tensors"] = params;
    }
    groups[g] = {{"datasets", count}, {"elements", elements}};
  }
  k["groups"] = groups;
  k["parameters"] = groups.contains("model") ? groups["model"]["elements"].get<int64_t>() - buffer_elements : 0;
  if (exists(root, "analysis/head_mask")) {
    std::vector<hsize_t> dims;
    const auto mask = read_dataset<double>(root, "analysis/head_mask", file.name(), &dims);
    if (dims.size() == 2) {
      nlohmann::json rows = nlohmann::json::array();
      for (hsize_t l = 0; l < dims[0]; ++l)
        rows.push_back(std::vector<double>(mask.begin() + static_cast<ptrdiff_t>(l * dims[1]),
                                           mask.begin() + static_cast<ptrdiff_t>((l + 1) * dims[1])));
      k["head_mask"] = rows;
    }
  }
  // Adaptive span: each head's learned span z S (z clamped to [0, 1], as the model uses it).
  const auto& mc = k["model_config"];
  if (mc.is_object() && mc.value("adaptive_span", false) && mc.contains("n_layer") && mc["n_layer"].is_number_integer()) {
    const double span_max = mc.value("span_max", 0.0);
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t l = 0; l < mc["n_layer"].get<int64_t>(); ++l) {
      const std::string path = "model/layers." + std::to_string(l) + ".dec_attn.span_z";
      if (!exists(root, path)) break;
      nlohmann::json row = nlohmann::json::array();
      for (double z : read_dataset<double>(root, path, file.name())) row.push_back(std::min(1.0, std::max(0.0, z)) * span_max);
      rows.push_back(row);
    }
    k["spans"] = rows;
  }
  return k;
}

std::string short_value(const nlohmann::json& v) {
  std::string text = v.is_string() ? v.get<std::string>() : json_line(v);
  return text.size() > 200 ? text.substr(0, 197) + "..." : text;
}

void checkpoint_text(std::ostream& os, const nlohmann::json& k) {
  os << "checkpoint: " << (k["phase"].get<std::string>().empty() ? "(no phase)" : k["phase"].get<std::string>())
     << ", " << (k["complete"].get<bool>() ? "complete" : "INCOMPLETE (its writer was interrupted)") << "\n";
  std::string position;
  for (const char* key : {"step", "tokens_seen", "epoch"})
    if (k.contains(key))
      position += std::string(position.empty() ? "" : ", ") + key + " " + short_value(k[key]);
  if (!position.empty()) os << "  " << position << "\n";
  const auto& state = k["state"];
  // A model trained elsewhere, and every phase trained on it since, say where it came from.
  if (state.is_object() && state.contains("imported_from")) os << "  imported from " << short_value(state["imported_from"]) << "\n";
  // Each phase of the run: its steps and the learning-rate schedule it trained with.
  if (state.is_object() && state.contains("phases") && state["phases"].is_array()) {
    const auto& phases = state["phases"];
    for (size_t i = 0; i < phases.size(); ++i) {
      const auto& p = phases[i];
      if (!p.is_object()) continue;
      const nlohmann::json end = i + 1 < phases.size() ? phases[i + 1].value("start_step", nlohmann::json()) : state.value("step", nlohmann::json());
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.1f s", p.value("elapsed", 0.0));
      os << "  " << p.value("phase", "?") << ": steps " << short_value(p.value("start_step", nlohmann::json())) << " to "
         << short_value(end) << ", " << seconds;
      const auto& sc = p.value("schedule", nlohmann::json());
      if (sc.is_object())
        os << ", " << sc.value("kind", "?") << " lr " << short_value(sc.value("lr", nlohmann::json())) << " to "
           << short_value(sc.value("eta_min", nlohmann::json())) << " over " << short_value(sc.value("steps", nlohmann::json()))
           << " steps from run step " << short_value(sc.value("origin", nlohmann::json())) << ", warm-up "
           << short_value(sc.value("warmup", nlohmann::json()));
      os << "\n";
    }
  }
  const auto& mc = k["model_config"];
  if (mc.is_object()) {
    // The shape-defining keys first, then the rest by name.
    static const char* first[] = {"n_layer", "d_model", "n_head", "d_head", "d_inner", "vocab_size", "n_vocab",
                                  "tgt_len", "mem_len", "ext_len", "same_length", "clamp_len"};
    std::vector<std::string> keys;
    for (const char* key : first)
      if (mc.contains(key)) keys.push_back(key);
    for (const auto& [key, v] : mc.items())
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    os << "  model:";
    for (const auto& key : keys) os << " " << key << " " << short_value(mc[key]);
    os << "\n";
  }
  const auto& tc = k["train_config"];
  if (tc.is_object()) {
    // The run's segments and memories, and how phase 1 drew its layers and heads.
    os << "  run:";
    for (const char* key : {"tgt_len", "mem_len", "cmem_len", "batch_size", "skip_schedule", "sch_beta"})
      if (tc.contains(key) && !(std::string(key) == "cmem_len" && tc[key] == 0)) os << " " << key << " " << short_value(tc[key]);
    if (tc.value("cmem_len", 0) > 0)
      for (const char* key : {"cmem_ar_weight", "cmem_ae_weight", "cmem_lr"}) os << " " << key << " " << short_value(tc[key]);
    os << "\n";
  }
  os << "  parameters: " << k["parameters"].get<int64_t>() << "\n";
  os << "groups:\n";
  for (const char* g : {"model", "optimizer", "rng", "memory", "analysis"}) {
    if (!k["groups"].contains(g)) continue;
    const int64_t n = k["groups"][g]["datasets"].get<int64_t>();
    os << "  /" << g << ": " << n << (n == 1 ? " dataset, " : " datasets, ")
       << k["groups"][g]["elements"].get<int64_t>() << " elements\n";
  }
}

void head_mask_text(std::ostream& os, const nlohmann::json& k) {
  if (k.contains("head_mask")) {
    const auto& rows = k["head_mask"];
    size_t heads = rows.empty() ? 0 : rows[0].size(), kept = 0, total = 0;
    for (const auto& r : rows)
      for (const auto& x : r) {
        if (x.get<double>() != 0) ++kept;
        ++total;
      }
    os << "head mask [" << rows.size() << " x " << heads << "]: " << kept << " of " << total << " heads kept\n";
    for (size_t l = 0; l < rows.size(); ++l) {
      os << "  layer " << std::setw(2) << l << ":";
      for (const auto& x : rows[l]) os << " " << x.get<double>();
      os << "\n";
    }
  }
}

nlohmann::json describe_vocab(const File& file) {
  const text::Vocab vocab = read_vocab(file.id(), "vocab", file.name());
  nlohmann::json v = {{"type", text::to_string(vocab.type())}, {"size", vocab.size()},
                      {"specials", vocab.specials()}, {"sha256", vocab.sha256()}};
  if (vocab.type() == text::VocabType::kWord) v["pretokenize"] = text::to_string(vocab.pretokenizer());
  return v;
}

}  // namespace

nlohmann::json describe(const File& file) {
  nlohmann::json j;
  j["file"] = file.name();
  j["attributes"] = attributes_of(file.id());
  std::string format = read_attr_string(file.id(), "xl_format").value_or("");
  j["format"] = format.empty() ? "unknown (not written by xl)" : format;
  if (format == kTokensFormat) {
    j["vocab"] = describe_vocab(file);
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
  if (format == kCheckpointFormat) {
    j["checkpoint"] = describe_checkpoint(file);
    if (exists(file.id(), "vocab")) j["vocab"] = describe_vocab(file);
  }
  nlohmann::json datasets = nlohmann::json::array();
  VisitState st{&datasets, file.name(), nullptr};
  const herr_t walked = H5Ovisit(file.id(), H5_INDEX_NAME, H5_ITER_INC, visit, &st);
  if (st.error) std::rethrow_exception(st.error);
  if (walked < 0) fail(file.name(), kExitDataErr, "cannot walk the file's objects (corrupt file?)");
  j["datasets"] = datasets;
  return j;
}

std::string describe_text(const nlohmann::json& j) {
  std::ostringstream os;
  os << j["file"].get<std::string>() << ": " << j["format"].get<std::string>();
  if (j["attributes"].contains("xl_format_version")) os << " version " << j["attributes"]["xl_format_version"];
  os << "\n";
  const bool is_checkpoint = j.contains("checkpoint");
  for (const auto& [k, v] : j["attributes"].items()) {
    if (k == "xl_format" || k == "xl_format_version") continue;
    // A checkpoint's configs and state are shown below (in full with --json).
    if (is_checkpoint && (k == "model_config" || k == "train_config" || k == "state" || k == "phase" ||
                          k == "complete" || k == "step" || k == "tokens_seen"))
      continue;
    os << "  " << k << ": " << short_value(v) << "\n";
  }
  if (is_checkpoint) checkpoint_text(os, j["checkpoint"]);
  if (j.contains("vocab")) {
    const auto& v = j["vocab"];
    os << "vocab: " << v["type"].get<std::string>() << ", " << v["size"] << " entries (" << v["specials"]
       << " special)";
    if (v.value("pretokenize", "none") != "none") os << ", pretokenize " << v["pretokenize"].get<std::string>();
    os << ", sha256 " << v["sha256"].get<std::string>() << "\n";
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
  if (is_checkpoint) {
    // The parameters with their shapes; the other groups are summarized above (all in --json).
    os << "model:\n";
    for (const auto& t : j["checkpoint"]["model_tensors"])
      os << "  " << t["name"].get<std::string>() << " " << t["dtype"].get<std::string>() << " "
         << json_line(t["shape"]) << "\n";
    head_mask_text(os, j["checkpoint"]);
    if (j["checkpoint"].contains("spans")) {
      os << "adaptive spans (positions, per head):\n";
      const auto& rows = j["checkpoint"]["spans"];
      for (size_t l = 0; l < rows.size(); ++l) {
        os << "  layer " << std::setw(2) << l << ":";
        for (const auto& x : rows[l]) os << " " << std::lround(x.get<double>());
        os << "\n";
      }
    }
  } else if (!j.contains("splits")) {
    os << "datasets:\n";
    for (const auto& d : j["datasets"]) os << "  " << d["path"].get<std::string>() << " " << d["dtype"].get<std::string>() << " " << json_line(d["shape"]) << "\n";
  }
  return os.str();
}

}  // namespace xl::h5

#include "xl/interop/hf_model_dir.h"

#include <set>

#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"
#include "xl/util/parse.h"

namespace xl::interop {

namespace {

// DIR/NAME ("" is the current directory).
std::string in_dir(const std::string& dir, const std::string& name) {
  return (dir.empty() ? "./" : dir.back() == '/' ? dir : dir + "/") + name;
}

// The index transformers writes beside shards: {"metadata": ..., "weight_map": {tensor: file}}.
void read_shard_index(const std::string& base, HfModelDir* out) {
  const nlohmann::json index = read_json_file(out->weights, "a Hugging Face shard index (JSON)");
  const auto map = index.is_object() ? index.find("weight_map") : index.end();
  XL_CHECK(index.is_object() && map != index.end() && map->is_object() && !map->empty(), kExitDataErr,
           out->weights << ": no weight_map (each tensor's name -> its shard's file name)");
  std::set<std::string> shards;
  for (const auto& [name, file] : map->items()) {
    const std::string f = file.is_string() ? file.get<std::string>() : "";
    XL_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", kExitDataErr,
             out->weights << ": weight_map puts '" << name << "' in " << json_line(file) << ", not a file name in the directory");
    shards.insert(base + f);
    out->shard_of.emplace(name, base + f);
  }
  out->shards.assign(shards.begin(), shards.end());
}

}  // namespace

HfModelDir hf_model_dir(const std::string& dir) {
  const std::string base = dir.back() == '/' ? dir : dir + "/";
  HfModelDir out;
  // One file before shards, model.safetensors before pytorch_model.bin, as transformers loads them.
  for (const char* name : {"model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json"})
    if (out.weights.empty() && io::is_file(base + name)) out.weights = base + name;
  XL_CHECK(!out.weights.empty(), kExitNoInput,
           dir << ": no model.safetensors or pytorch_model.bin (nor an index of their shards), so not a Hugging Face model directory");
  if (parse::ends_with(out.weights, ".index.json")) read_shard_index(base, &out);
  out.vocab = hf_vocab_file(dir);
  out.lower_case = hf_lower_case(dir);
  out.config_file = base + "config.json";
  if (io::is_file(out.config_file)) {
    out.config = read_json_file(out.config_file, "a Hugging Face config (JSON)");
    XL_CHECK(out.config.is_object(), kExitDataErr, out.config_file << ": not a Hugging Face config (a JSON object)");
    const auto type = out.config.find("model_type");
    XL_CHECK(type == out.config.end() || *type == "transfo-xl", kExitDataErr,
             out.config_file << ": model_type " << json_line(*type) << ", not Hugging Face's TransfoXL (transfo-xl)");
  }
  return out;
}

std::string hf_vocab_file(const std::string& dir) {
  for (const char* name : {"vocab.bin", "vocab.pkl"})
    if (io::is_file(in_dir(dir, name))) return in_dir(dir, name);
  return "";
}

bool hf_lower_case(const std::string& dir) {
  const std::string path = in_dir(dir, "tokenizer_config.json");
  if (!io::is_file(path)) return false;
  const nlohmann::json config = read_json_file(path, "a Hugging Face tokenizer config (JSON)");
  XL_CHECK(config.is_object(), kExitDataErr, path << ": not a Hugging Face tokenizer config (a JSON object)");
  const auto it = config.find("lower_case");
  if (it == config.end() || it->is_null()) return false;
  XL_CHECK(it->is_boolean(), kExitDataErr, path << ": lower_case is " << json_line(*it) << ", not true or false");
  return it->get<bool>();
}

std::string hf_corpus_file(const std::string& dir) {
  const std::string path = in_dir(dir, "corpus.bin");
  XL_CHECK(io::is_file(path), kExitNoInput, dir << ": no corpus.bin, so not a Hugging Face TransfoXL corpus directory");
  return path;
}

WeightsFile read_hf_weights(const HfModelDir& dir, const std::string& key) {
  if (dir.shards.empty()) return read_weights_file(dir.weights, key);
  XL_CHECK(key.empty(), kExitUsage, "--key does not apply to " << dir.weights << " (the shards of one flat state_dict)");
  WeightsFile out;
  std::set<std::string> found;
  for (const std::string& shard : dir.shards) {
    // One shard's bytes at a time.
    WeightsFile w = read_weights_file(shard, "");
    XL_CHECK(w.contents.classes.empty(), kExitDataErr, shard << ": a pickled " << w.contents.classes.begin()->second
                                                              << ", not a shard of a state_dict");
    if (shard == dir.shards.front()) out.tied = w.tied;
    XL_CHECK(w.tied == out.tied, kExitDataErr,
             shard << ": not in the format of " << dir.shards.front() << " (safetensors and torch.save shards mixed)");
    for (auto& [name, t] : w.contents.tensors) {
      const auto it = dir.shard_of.find(name);
      XL_CHECK(it != dir.shard_of.end() && it->second == shard, kExitDataErr,
               shard << ": holds tensor '" << name << "', which " << dir.weights
                     << (it == dir.shard_of.end() ? " does not list" : " puts in " + it->second));
      found.insert(name);
      out.contents.tensors.emplace_back(name, std::move(t));
    }
  }
  for (const auto& [name, shard] : dir.shard_of)
    XL_CHECK(found.count(name), kExitDataErr, shard << ": lacks tensor '" << name << "', which " << dir.weights << " puts there");
  return out;
}

void hf_config_params(const nlohmann::json& config, TorchHyperParams* given, const std::string& file) {
  if (!config.is_object()) return;
  auto saved = SavedHyperParams::read("config.json", [&](const std::string& field) {
    return config.contains(field) ? config.at(field) : nlohmann::json();
  });
  // transformers ties the output layers unless config.json says otherwise (save_pretrained leaves
  // the default out).
  if (saved.tie_weight.is_null()) {
    saved.tie_weight = true;
    saved.tie_weight_name = "tie_word_embeddings (absent: transformers' default, true)";
  }
  apply_saved_hyper_params(saved, given, file);
}

}  // namespace xl::interop

#include "xl/interop/hf_model_dir.h"

#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"

namespace xl::interop {

HfModelDir hf_model_dir(const std::string& dir) {
  const std::string base = dir.back() == '/' ? dir : dir + "/";
  HfModelDir out;
  // model.safetensors first, as transformers loads it.
  for (const char* name : {"model.safetensors", "pytorch_model.bin"})
    if (out.weights.empty() && io::is_file(base + name)) out.weights = base + name;
  const bool sharded = io::exists(base + "model.safetensors.index.json") || io::exists(base + "pytorch_model.bin.index.json");
  XL_CHECK(!out.weights.empty(), kExitNoInput,
           dir << ": no model.safetensors or pytorch_model.bin, so not a Hugging Face model directory"
               << (sharded ? " (weights split into shards are not read: save them with a max_shard_size above the model's size)" : ""));
  for (const char* name : {"vocab.bin", "vocab.pkl"})
    if (out.vocab.empty() && io::is_file(base + name)) out.vocab = base + name;
  out.config_file = base + "config.json";
  if (io::is_file(out.config_file)) {
    out.config = read_json_file(out.config_file, "a Hugging Face config (JSON)");
    XL_CHECK(out.config.is_object(), kExitDataErr, out.config_file << ": not a Hugging Face config (a JSON object)");
    const auto type = out.config.find("model_type");
    XL_CHECK(type == out.config.end() || *type == "transfo-xl", kExitDataErr,
             out.config_file << ": model_type " << type->dump() << ", not Hugging Face's TransfoXL (transfo-xl)");
  }
  return out;
}

void hf_config_params(const nlohmann::json& config, TorchHyperParams* given, const std::string& file) {
  if (!config.is_object()) return;
  const auto saved = SavedHyperParams::read("config.json", [&](const std::string& field) {
    return config.contains(field) ? config.at(field) : nlohmann::json();
  });
  apply_saved_hyper_params(saved, given, file);
}

}  // namespace xl::interop

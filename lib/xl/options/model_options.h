// The model's hyper-parameters as flags and INI keys, defined once for every tool that takes them
// (xl-train-phase1 builds a model from them; xl-train-phase2 checks them against its checkpoint, so
// one config file serves both phases; xl-import-torch checks them against a state_dict).
#pragma once
#include <set>
#include <string>

#include "xl/cli/options.h"
#include "xl/model/config.h"

namespace xl::options {

enum class ModelDefaults {
  kShown,  // ModelConfig's defaults apply and --help shows them (a new model)
  kUnset,  // only what is given counts (the model comes from a file)
};

void add_model_options(cli::Options& cli, ModelDefaults defaults);

// What the command line and config files say about the model.
struct GivenModel {
  model::ModelConfig config;         // ModelConfig's defaults, overridden by every option given
  std::set<std::string> fields;      // the ModelConfig fields given ("n_layer", "pre_lnorm", ...)
  bool has(const std::string& field) const { return fields.count(field) > 0; }
};
GivenModel given_model(const cli::Options& cli);

}  // namespace xl::options

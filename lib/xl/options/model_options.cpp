#include "xl/options/model_options.h"

#include "xl/util/parse.h"

namespace xl::options {
namespace po = cli::po;

namespace {

// A value whose default shows in --help only for a new model.
template <typename T>
po::typed_value<T>* value(const T& fallback, ModelDefaults d) {
  return d == ModelDefaults::kShown ? po::value<T>()->default_value(fallback) : po::value<T>();
}

po::typed_value<double>* real(double fallback, ModelDefaults d) {
  return d == ModelDefaults::kShown ? cli::real_value(fallback) : po::value<double>();
}

po::typed_value<bool>* boolean(bool fallback, ModelDefaults d) {
  return d == ModelDefaults::kShown ? po::value<bool>()->default_value(fallback, fallback ? "true" : "false")
                                    : po::value<bool>();
}

}  // namespace

void add_model_options(cli::Options& cli, ModelDefaults d) {
  const model::ModelConfig m;
  const std::string title = d == ModelDefaults::kShown ? "Model" : "Model (given ones are checked against the model read)";
  cli.add(title)
      ("n-layer", value(m.n_layer, d), "layers")
      ("d-model", value(m.d_model, d), "model width")
      ("n-head", value(m.n_head, d), "attention heads per layer")
      ("d-head", value(m.d_head, d), "width of each head")
      ("d-inner", value(m.d_inner, d), "feed-forward width")
      ("d-embed", value(m.d_embed, d), "embedding width (0: d-model)")
      ("dropout", real(m.dropout, d), "dropout on embeddings, attention output and feed-forward")
      ("dropatt", real(m.dropatt, d), "dropout on attention probabilities (above 0, training takes the slower full-matrix attention)")
      ("pre-lnorm", boolean(m.pre_lnorm, d), "layer norm before each sublayer (true/false)")
      ("untie-r", boolean(m.untie_r, d), "u, v biases per layer (true/false)")
      ("clamp-len", value(m.clamp_len, d), "clamp relative distances (0: off)")
      ("same-length", boolean(m.same_length, d), "every query sees mem-len keys (true/false; off with mem-len 0)")
      ("cutoffs", value(std::string(), d), "adaptive softmax cutoffs, e.g. 20000,40000,200000")
      ("div-val", value(m.div_val, d), "adaptive embedding width divisor")
      ("tie-weight", boolean(m.tie_weight, d), "tie output and input embeddings (true/false)")
      ("tie-projs", value(std::string(), d), "per cluster: tie output projections, e.g. false,true,true,true")
      ("init-std", real(m.init_std, d), "N(0, init-std) weights")
      ("proj-init-std", real(m.proj_init_std, d), "N(0, proj-init-std) adaptive projections");
  cli.add(d == ModelDefaults::kShown ? "Attention variants (README: Attention variants)" : "Attention variants")
      ("attention", value(m.attention, d), "rel (Transformer-XL), mgk (mixture of Gaussian keys) or smgk (shifted keys)")
      ("mgk-keys", value(m.mgk_keys, d), "MGK: Gaussian keys per head")
      ("mgk-estep", value(m.mgk_estep, d), "MGK: soft (mixture) or hard (the most likely key)")
      ("persistent-mem", value(m.persistent_mem, d), "learned key/value vectors per head and layer in the softmax (0: none)")
      ("ff", boolean(m.ff, d), "feed-forward sublayer (false/off needs --persistent-mem)")
      ("adaptive-span", boolean(m.adaptive_span, d), "learn each head's attention span (true/on)")
      ("span-max", value(m.span_max, d), "adaptive span: the longest span (0: mem-len + tgt-len)")
      ("span-ramp", value(m.span_ramp, d), "adaptive span: width of the mask's ramp")
      ("span-loss", real(m.span_loss, d), "adaptive span: loss coefficient per position of span");
  // A compressed memory is a new model's choice: an imported Transformer-XL has none.
  if (d != ModelDefaults::kShown) return;
  cli.add("Compressive memory (Rae et al.; --cmem-len sizes it)")
      ("cmem-rate", value(m.cmem_rate, d), "compress the inputs that leave each layer's memory this many at a time (0: no compressed memory)")
      ("cmem-fn", value(m.cmem_fn, d), "the compression: conv (kernel = stride = rate), dilated, max or mean (pooling)");
}

GivenModel given_model(const cli::Options& cli) {
  GivenModel g;
  model::ModelConfig& m = g.config;
  auto take = [&](const char* option, auto& field) {
    using T = std::decay_t<decltype(field)>;
    if (!cli.has(option)) return;
    field = cli.get<T>(option);
    if (cli.given(option)) g.fields.insert(parse::snake_case(option));
  };
  take("n-layer", m.n_layer);
  take("d-model", m.d_model);
  take("n-head", m.n_head);
  take("d-head", m.d_head);
  take("d-inner", m.d_inner);
  take("d-embed", m.d_embed);
  take("dropout", m.dropout);
  take("dropatt", m.dropatt);
  take("pre-lnorm", m.pre_lnorm);
  take("untie-r", m.untie_r);
  take("clamp-len", m.clamp_len);
  take("same-length", m.same_length);
  take("div-val", m.div_val);
  take("tie-weight", m.tie_weight);
  take("init-std", m.init_std);
  take("proj-init-std", m.proj_init_std);
  take("attention", m.attention);
  take("mgk-keys", m.mgk_keys);
  take("mgk-estep", m.mgk_estep);
  take("persistent-mem", m.persistent_mem);
  take("ff", m.ff);
  take("adaptive-span", m.adaptive_span);
  take("span-max", m.span_max);
  take("span-ramp", m.span_ramp);
  take("span-loss", m.span_loss);
  take("cmem-rate", m.cmem_rate);
  take("cmem-fn", m.cmem_fn);
  if (cli.has("cutoffs")) {
    m.cutoffs = cli.int_list("cutoffs");
    if (cli.given("cutoffs")) g.fields.insert("cutoffs");
  }
  if (cli.has("tie-projs")) {
    m.tie_projs = cli.parsed("tie-projs", [&](const std::string& what) {
      std::vector<bool> ties;
      for (const auto& s : parse::list_items(cli.get<std::string>("tie-projs"), what)) ties.push_back(parse::boolean(s, what));
      return ties;
    });
    if (cli.given("tie-projs")) g.fields.insert("tie_projs");
  }
  return g;
}

}  // namespace xl::options

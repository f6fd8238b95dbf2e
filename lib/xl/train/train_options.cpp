#include "xl/train/train_options.h"

#include <sstream>

#include "xl/util/error.h"

namespace xl::train {

namespace po = cli::po;

namespace {

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    try {
      size_t pos;
      out.push_back(std::stoll(part, &pos));
      XL_CHECK(pos == part.size(), kExitUsage, "");
    } catch (...) {
      XL_FAIL(kExitUsage, "--" << what << ": not a list of integers: '" << text << "'");
    }
  }
  return out;
}

// Option name (kebab-case) -> TrainConfig field (snake_case).
std::string field_of(const std::string& option) {
  std::string f = option;
  for (auto& c : f)
    if (c == '-') c = '_';
  return f;
}

}  // namespace

double parse_duration(const std::string& text, const std::string& what) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    XL_FAIL(kExitUsage, what << ": not a duration: '" << text << "' (use e.g. 90s, 15m, 2h)");
  }
  std::string unit = text.substr(pos);
  double mult = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : -1;
  XL_CHECK(mult > 0 && v >= 0, kExitUsage, what << ": not a duration: '" << text << "' (use e.g. 90s, 15m, 2h)");
  return v * mult;
}

void add_training_options(cli::Options& cli, Phase phase) {
  TrainConfig d;
  model::ModelConfig m;
  cli.add("Input")
      ("tokens", po::value<std::string>()->default_value("-"), "tokens file from xl-tokenize (- reads a pipe)")
      ("train-split", po::value<std::string>()->default_value(d.train_split), "split to train on")
      ("valid-split", po::value<std::string>()->default_value(d.valid_split), "split to validate on");
  if (phase == Phase::kOne) {
    cli.add("Model (phase 1; phase 2 takes the model from --init)")
        ("n-layer", po::value<int64_t>()->default_value(m.n_layer), "layers")
        ("d-model", po::value<int64_t>()->default_value(m.d_model), "model width")
        ("n-head", po::value<int64_t>()->default_value(m.n_head), "attention heads per layer")
        ("d-head", po::value<int64_t>()->default_value(m.d_head), "width of each head")
        ("d-inner", po::value<int64_t>()->default_value(m.d_inner), "feed-forward width")
        ("d-embed", po::value<int64_t>()->default_value(m.d_embed), "embedding width (0: d-model)")
        ("dropout", cli::real_value(m.dropout), "dropout on embeddings, attention output and feed-forward")
        ("dropatt", cli::real_value(m.dropatt), "dropout on attention probabilities (above 0, training takes the slower full-matrix attention)")
        ("pre-lnorm", po::value<bool>()->default_value(m.pre_lnorm), "layer norm before each sublayer")
        ("untie-r", po::value<bool>()->default_value(m.untie_r), "u, v biases per layer")
        ("clamp-len", po::value<int64_t>()->default_value(m.clamp_len), "clamp relative distances (0: off)")
        ("same-length", po::value<bool>()->default_value(m.same_length), "every query sees mem-len keys")
        ("cutoffs", po::value<std::string>()->default_value(""), "adaptive softmax cutoffs, e.g. 20000,40000,200000")
        ("div-val", po::value<int64_t>()->default_value(m.div_val), "adaptive embedding width divisor")
        ("tie-weight", po::value<bool>()->default_value(m.tie_weight), "tie output and input embeddings")
        ("tie-projs", po::value<std::string>()->default_value(""), "per cluster 0/1: tie output projections, e.g. 0,1,1,1")
        ("init-std", cli::real_value(m.init_std), "N(0, init-std) weights")
        ("proj-init-std", cli::real_value(m.proj_init_std), "N(0, proj-init-std) adaptive projections");
  }
  cli.add("Batching")
      ("tgt-len", po::value<int64_t>()->default_value(d.tgt_len), "segment length")
      ("mem-len", po::value<int64_t>()->default_value(d.mem_len), "memory length")
      ("batch-size", po::value<int64_t>()->default_value(d.batch_size), "parallel streams")
      ("batch-chunk", po::value<int64_t>()->default_value(d.batch_chunk), "gradient accumulation chunks (each keeps its own memory)");
  cli.add("Optimization")
      ("lr", cli::real_value(d.lr), "Adam learning rate")
      ("lr-schedule", po::value<std::string>()->default_value(d.lr_schedule), "cosine, constant or cyclic-cosine")
      ("warmup-steps", po::value<int64_t>()->default_value(d.warmup_steps), "linear warm-up steps")
      ("schedule-steps", po::value<int64_t>()->default_value(d.schedule_steps), "cosine period (0: max-steps)")
      ("eta-min", cli::real_value(d.eta_min), "final learning rate of the cosine")
      ("clip", cli::real_value(d.clip), "global gradient-norm clipping (0: off)")
      ("adam-beta1", cli::real_value(d.adam_beta1), "Adam beta1")
      ("adam-beta2", cli::real_value(d.adam_beta2), "Adam beta2")
      ("adam-eps", cli::real_value(d.adam_eps), "Adam epsilon");
  if (phase == Phase::kOne) {
    cli.add("Skip-Retain and cross-head attention")
        ("skip-schedule", po::value<std::string>()->default_value(d.skip_schedule),
         "none, linear (eq. 1), uniform (eq. 2), no-first (3), no-last (4), no-first-last (5)")
        ("skip-p", cli::real_value(d.skip_p), "p of the uniform and no-* schedules")
        ("sch-beta", cli::real_value(d.sch_beta), "stochastic cross-head attention probability (0: off)");
  } else {
    cli.add("Phase 2")
        ("init", po::value<std::string>(), "phase-1 checkpoint to start from (required; - reads a pipe)")
        ("reset-optimizer", po::bool_switch(), "start with fresh Adam moments")
        ("reset-schedule", po::bool_switch(), "restart the learning-rate schedule")
        ("sch-beta", cli::real_value(d.sch_beta), "stochastic cross-head attention probability (default: phase 1's)");
  }
  cli.add("Budget and stopping")
      ("max-steps", po::value<int64_t>()->default_value(d.max_steps), "stop at this step (counted from phase 1's start; 0: none)")
      ("max-tokens", po::value<std::string>()->default_value("0"), "stop after this many training tokens (K/M/G suffixes)")
      ("time-budget", po::value<std::string>()->default_value("0"), "stop after this much wall time of this phase (90s, 15m, 2h)")
      ("stop-window", po::value<int64_t>()->default_value(d.stop_window), "the paper's rule: stop when validation improves by")
      ("stop-min-delta", cli::real_value(d.stop_min_delta), "  less than this over stop-window steps");
  cli.add("Validation and logging")
      ("eval-interval", po::value<int64_t>()->default_value(d.eval_interval), "validate and checkpoint every N steps (0: at the end only)")
      ("eval-tgt-len", po::value<int64_t>()->default_value(d.eval_tgt_len), "validation segment length (0: tgt-len)")
      ("eval-mem-len", po::value<int64_t>()->default_value(d.eval_mem_len), "validation memory (-1: mem-len + tgt-len - eval-tgt-len)")
      ("eval-batch-size", po::value<int64_t>()->default_value(d.eval_batch_size), "validation streams")
      ("eval-max-tokens", po::value<std::string>()->default_value("0"), "score at most this many validation tokens (0: all)")
      ("save-every", po::value<int64_t>()->default_value(d.save_every), "also checkpoint every N steps")
      ("log-interval", po::value<int64_t>()->default_value(d.log_interval), "log every N steps")
      ("metrics", po::value<std::string>()->default_value(""), "write JSON Lines events to FILE")
      ("progress", po::value<std::string>()->default_value("auto"), "auto (live line on a terminal), always or never")
      ("resume", po::bool_switch(), "continue the run whose latest checkpoint is -o");
  cli.positional("tokens", 1);
  cli.add_output(true, "the checkpoint (the best one goes to NAME.best.h5)");
  cli.add_compute();
}

TrainRequest training_request(const cli::Options& cli, Phase phase, int argc, char** argv) {
  TrainRequest r;
  r.tool = cli.info().name;
  r.command_line = cli::command_line(argc, argv);
  r.tokens = cli.get<std::string>("tokens");
  r.output = cli.output();
  r.force = cli.force();
  r.resume = cli.get<bool>("resume");
  r.metrics = cli.get<std::string>("metrics");
  r.progress = cli.get<std::string>("progress");
  TrainConfig& t = r.train;
  t.phase = phase == Phase::kOne ? "phase1" : "phase2";
  t.train_split = cli.get<std::string>("train-split");
  t.valid_split = cli.get<std::string>("valid-split");
  t.tgt_len = cli.get<int64_t>("tgt-len");
  t.mem_len = cli.get<int64_t>("mem-len");
  t.batch_size = cli.get<int64_t>("batch-size");
  t.batch_chunk = cli.get<int64_t>("batch-chunk");
  t.lr = cli.get<double>("lr");
  t.lr_schedule = cli.get<std::string>("lr-schedule");
  t.warmup_steps = cli.get<int64_t>("warmup-steps");
  t.schedule_steps = cli.get<int64_t>("schedule-steps");
  t.eta_min = cli.get<double>("eta-min");
  t.clip = cli.get<double>("clip");
  t.adam_beta1 = cli.get<double>("adam-beta1");
  t.adam_beta2 = cli.get<double>("adam-beta2");
  t.adam_eps = cli.get<double>("adam-eps");
  t.sch_beta = cli.get<double>("sch-beta");
  t.max_steps = cli.get<int64_t>("max-steps");
  t.max_tokens = static_cast<int64_t>(cli::parse_count(cli.get<std::string>("max-tokens"), "--max-tokens"));
  t.time_budget = parse_duration(cli.get<std::string>("time-budget"), "--time-budget");
  t.stop_window = cli.get<int64_t>("stop-window");
  t.stop_min_delta = cli.get<double>("stop-min-delta");
  t.eval_interval = cli.get<int64_t>("eval-interval");
  t.eval_tgt_len = cli.get<int64_t>("eval-tgt-len");
  t.eval_mem_len = cli.get<int64_t>("eval-mem-len");
  t.eval_batch_size = cli.get<int64_t>("eval-batch-size");
  t.eval_max_tokens = static_cast<int64_t>(cli::parse_count(cli.get<std::string>("eval-max-tokens"), "--eval-max-tokens"));
  t.save_every = cli.get<int64_t>("save-every");
  t.log_interval = cli.get<int64_t>("log-interval");
  t.seed = cli.seed();
  for (const auto& [name, value] : cli.vm())
    if (!value.defaulted()) r.given.insert(field_of(name));
  if (cli.given("seed")) r.given.insert("seed");
  if (phase == Phase::kOne) {
    t.skip_schedule = cli.get<std::string>("skip-schedule");
    t.skip_p = cli.get<double>("skip-p");
    model::ModelConfig& m = r.model;
    m.n_layer = cli.get<int64_t>("n-layer");
    m.d_model = cli.get<int64_t>("d-model");
    m.n_head = cli.get<int64_t>("n-head");
    m.d_head = cli.get<int64_t>("d-head");
    m.d_inner = cli.get<int64_t>("d-inner");
    m.d_embed = cli.get<int64_t>("d-embed");
    m.dropout = cli.get<double>("dropout");
    m.dropatt = cli.get<double>("dropatt");
    m.pre_lnorm = cli.get<bool>("pre-lnorm");
    m.untie_r = cli.get<bool>("untie-r");
    m.clamp_len = cli.get<int64_t>("clamp-len");
    m.same_length = cli.get<bool>("same-length");
    m.cutoffs = parse_int_list(cli.get<std::string>("cutoffs"), "cutoffs");
    m.div_val = cli.get<int64_t>("div-val");
    m.tie_weight = cli.get<bool>("tie-weight");
    for (int64_t v : parse_int_list(cli.get<std::string>("tie-projs"), "tie-projs")) m.tie_projs.push_back(v != 0);
    m.init_std = cli.get<double>("init-std");
    m.proj_init_std = cli.get<double>("proj-init-std");
  } else {
    XL_CHECK(cli.has("init") || r.resume, kExitUsage, "phase 2 needs --init PHASE1.h5 (or --resume)");
    if (cli.has("init")) r.init = cli.get<std::string>("init");
    r.reset_optimizer = cli.get<bool>("reset-optimizer");
    r.reset_schedule = cli.get<bool>("reset-schedule");
  }
  return r;
}

}  // namespace xl::train

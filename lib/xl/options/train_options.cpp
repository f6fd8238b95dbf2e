#include "xl/options/train_options.h"

#include "xl/compute/parallel.h"
#include "xl/options/compute_options.h"
#include "xl/options/model_options.h"
#include "xl/train/distributed.h"
#include "xl/train/trainer.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/parse.h"

namespace xl::options {
namespace po = cli::po;

void add_training_options(cli::Options& cli, Phase phase) {
  const train::TrainConfig d;
  cli.add("Input")
      ("tokens", po::value<std::string>()->default_value("-"), "tokens file from xl-tokenize (- reads a pipe)")
      ("train-split", po::value<std::string>()->default_value(d.train_split), "split to train on")
      ("valid-split", po::value<std::string>()->default_value(d.valid_split), "split to validate on");
  add_model_options(cli, phase == Phase::kOne ? ModelDefaults::kShown : ModelDefaults::kUnset);
  cli.add("Batching")
      ("tgt-len", po::value<int64_t>()->default_value(d.tgt_len), "segment length")
      ("mem-len", po::value<int64_t>()->default_value(d.mem_len), "memory length")
      ("batch-size", po::value<int64_t>()->default_value(d.batch_size), "parallel streams")
      ("batch-chunk", po::value<int64_t>()->default_value(d.batch_chunk), "gradient accumulation chunks (each keeps its own memory)");
  cli.add("Optimization")
      ("lr", cli::real_value(d.lr), "Adam learning rate (phase 2: where its own schedule starts; default: where phase 1 ended)")
      ("lr-schedule", po::value<std::string>()->default_value(d.lr_schedule), "cosine, constant or cyclic-cosine")
      ("warmup-steps", po::value<int64_t>()->default_value(d.warmup_steps), "linear warm-up steps")
      ("schedule-steps", po::value<int64_t>()->default_value(d.schedule_steps), "cosine length (0: the phase's --max-steps)")
      ("eta-min", cli::real_value(d.eta_min), "final learning rate of the cosine (0: the phase ends with the cosine)")
      ("lr-step-count", po::value<std::string>()->default_value(d.lr_step_count),
       "txl: update k uses the schedule at k-1 (Transformer-XL's train.py); ahead: at k")
      ("clip", cli::real_value(d.clip), "global gradient-norm clipping (0: off)")
      ("adam-beta1", cli::real_value(d.adam_beta1), "Adam beta1")
      ("adam-beta2", cli::real_value(d.adam_beta2), "Adam beta2")
      ("adam-eps", cli::real_value(d.adam_eps), "Adam epsilon");
  // Phase 2 never skips layers; it takes phase 1's Skip-Retain keys so that one config file
  // serves both phases.
  cli.add(phase == Phase::kOne ? "Skip-Retain and cross-head attention"
                               : "Skip-Retain (phase 1's settings: phase 2 never skips) and cross-head attention")
      ("skip-schedule", po::value<std::string>()->default_value(d.skip_schedule),
       "none, linear (eq. 1), uniform (eq. 2), no-first (3), no-last (4), no-first-last (5)")
      ("skip-p", cli::real_value(d.skip_p), "p of the uniform and no-* schedules")
      ("skipped-layers-in-adam", po::value<std::string>()->default_value(d.skipped_layers_in_adam),
       "freeze: a skipped layer's weights and Adam state stay; step: Adam steps it with a zero gradient (the paper's code)")
      ("sch-beta", cli::real_value(d.sch_beta), "stochastic cross-head attention probability (0: off; phase 2 keeps phase 1's unless given)");
  cli.add("Compressive memory (Rae et al.; --cmem-len sizes it)")
      ("cmem-len", po::value<int64_t>()->default_value(d.cmem_len), "compressed memory slots per layer (needs a model with --cmem-rate; 0: none)")
      ("cmem-ar-weight", cli::real_value(d.cmem_ar_weight), "weight of the attention-reconstruction loss (trains the compression network alone)")
      ("cmem-ae-weight", cli::real_value(d.cmem_ae_weight), "weight of the auto-encoding loss (the compression network and its decoder)")
      ("cmem-lr", cli::real_value(d.cmem_lr), "the compression network's learning rate (0: --lr)");
  if (phase == Phase::kTwo) {
    cli.add("Phase 2")
        ("init", po::value<std::string>(), "phase-1 checkpoint, pruned or imported model to start from (required; - reads a pipe)")
        ("reset-optimizer", po::bool_switch(), "start with fresh Adam moments")
        ("schedule-from", po::value<std::string>()->default_value(d.schedule_from),
         "phase: a learning-rate schedule of its own over this phase's budget; run: phase 1's schedule continues");
  }
  cli.add("Budget and stopping")
      ("max-steps", po::value<int64_t>()->default_value(d.max_steps), "stop after this many steps (0: none)")
      ("max-tokens", po::value<std::string>()->default_value("0"), "stop after this many training tokens (K/M/G suffixes)")
      ("time-budget", po::value<std::string>()->default_value("0"), "stop after this much wall time (90s, 15m, 2h, 1h30m)")
      ("budget-from", po::value<std::string>()->default_value(d.budget_from),
       "phase: budgets count from this phase's start; run: from the run's start (phase 1's)")
      ("stop-window", po::value<int64_t>()->default_value(d.stop_window), "the paper's rule: stop when validation improves by")
      ("stop-min-delta", cli::real_value(d.stop_min_delta), "  less than this over stop-window steps");
  cli.add("Validation and logging")
      ("eval-interval", po::value<int64_t>()->default_value(d.eval_interval), "validate and checkpoint every N steps (0: at the end only)")
      ("eval-tgt-len", po::value<int64_t>()->default_value(d.eval_tgt_len), "validation segment length (0: tgt-len)")
      ("eval-mem-len", po::value<int64_t>()->default_value(d.eval_mem_len), "validation memory (-1: mem-len + tgt-len - eval-tgt-len)")
      ("eval-batch-size", po::value<int64_t>()->default_value(d.eval_batch_size), "validation streams")
      ("eval-max-tokens", po::value<std::string>()->default_value("0"), "score at most this many validation tokens (0: all)")
      ("save-every", po::value<int64_t>()->default_value(d.save_every), "also checkpoint every N steps")
      ("on-save-error", po::value<std::string>()->default_value(d.on_save_error),
       "a checkpoint that cannot be written (disk full): stop (exit 74, the last good one kept)\n"
       "or continue (train on, write again at the next save; the last save must succeed)")
      ("log-interval", po::value<int64_t>()->default_value(d.log_interval), "log every N steps")
      ("metrics", po::value<std::string>()->default_value(""), "write JSON Lines events to FILE")
      ("tensorboard", po::value<std::string>()->default_value(""),
       "also write the train and valid metrics as TensorBoard event files into DIR (a resumed run or phase 2 continues its curves)")
      ("progress", po::value<std::string>()->default_value("auto"), "auto (live line on a terminal), always or never")
      ("resume", po::bool_switch(), "continue the run whose latest checkpoint is -o")
      ("start-or-resume", po::bool_switch(),
       "continue the run if -o exists, else start it (for jobs a scheduler may requeue; metrics append)");
  cli.add("Data parallel (torchrun, Slurm and mpirun start ranks through the environment)")
      ("nproc-per-node", po::value<int>()->default_value(1), "start this many ranks of this training on this machine")
      ("dist-backend", po::value<std::string>()->default_value("auto"), "auto (NCCL on GPUs, Gloo on CPUs), gloo or nccl")
      ("dist-timeout", po::value<std::string>()->default_value("5m"), "how long a rank waits for the others before giving up");
  cli.positional("tokens", 1);
  cli.add_output("the checkpoint (the best one goes to NAME.best.h5)");
  cli.files({"tokens", "init"}, {"metrics"});
  cli.output_beside("the best checkpoint", train::best_path);
  ComputeFlags compute_flags;
  compute_flags.training = true;
  add_compute_options(cli, compute_flags);
}

train::TrainRequest training_request(const cli::Options& cli, Phase phase, int argc, char** argv) {
  train::TrainRequest r;
  r.tool = cli.info().name;
  r.command_line = cli::command_line(argc, argv);
  r.tokens = cli.get<std::string>("tokens");
  r.output = cli.output();
  r.force = cli.force();
  r.resume = cli.get<bool>("resume");
  r.start_or_resume = cli.get<bool>("start-or-resume");
  if (r.start_or_resume) {
    if (r.resume) cli.fail("start-or-resume", "resumes when -o exists already: drop --resume");
    if (r.force) cli.fail("start-or-resume", "continues what -f would overwrite: drop -f");
    if (io::is_stream(r.output)) cli.fail("start-or-resume", "needs -o FILE, the run's checkpoint");
    r.resume = io::is_file(r.output);
  }
  r.metrics = cli.get<std::string>("metrics");
  r.tensorboard = cli.get<std::string>("tensorboard");
  r.progress = cli.get<std::string>("progress");
  train::TrainConfig& t = r.train;
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
  t.lr_step_count = cli.get<std::string>("lr-step-count");
  t.clip = cli.get<double>("clip");
  t.adam_beta1 = cli.get<double>("adam-beta1");
  t.adam_beta2 = cli.get<double>("adam-beta2");
  t.adam_eps = cli.get<double>("adam-eps");
  t.sch_beta = cli.get<double>("sch-beta");
  t.cmem_len = cli.get<int64_t>("cmem-len");
  t.cmem_ar_weight = cli.get<double>("cmem-ar-weight");
  t.cmem_ae_weight = cli.get<double>("cmem-ae-weight");
  t.cmem_lr = cli.get<double>("cmem-lr");
  t.max_steps = cli.get<int64_t>("max-steps");
  t.max_tokens = static_cast<int64_t>(cli.count("max-tokens"));
  t.time_budget = cli.duration("time-budget");
  t.budget_from = cli.get<std::string>("budget-from");
  t.stop_window = cli.get<int64_t>("stop-window");
  t.stop_min_delta = cli.get<double>("stop-min-delta");
  t.eval_interval = cli.get<int64_t>("eval-interval");
  t.eval_tgt_len = cli.get<int64_t>("eval-tgt-len");
  t.eval_mem_len = cli.get<int64_t>("eval-mem-len");
  t.eval_batch_size = cli.get<int64_t>("eval-batch-size");
  t.eval_max_tokens = static_cast<int64_t>(cli.count("eval-max-tokens"));
  t.save_every = cli.get<int64_t>("save-every");
  t.on_save_error = cli.get<std::string>("on-save-error");
  t.log_interval = cli.get<int64_t>("log-interval");
  const Compute compute = compute_settings(cli);
  compute::set_threads(compute.threads);
  t.seed = compute.seed;
  t.precision = compute.precision;
  r.device = compute.device;
  r.attention_probs = compute.attention_probs;
  r.attention_probs_budget = compute.attention_probs_budget;
  r.nproc_per_node = cli.get<int>("nproc-per-node");
  if (r.nproc_per_node < 1) cli.fail("nproc-per-node", "must be at least 1");
  r.dist_backend = cli.get<std::string>("dist-backend");
  if (!train::is_dist_backend(r.dist_backend)) cli.fail("dist-backend", "must be auto, gloo or nccl, not '" + r.dist_backend + "'");
  r.dist_timeout = cli.duration("dist-timeout");
  if (!(r.dist_timeout > 0)) cli.fail("dist-timeout", "must be positive");
  const GivenModel model = given_model(cli);
  r.model = model.config;
  r.model_given = model.fields;
  t.skip_schedule = cli.get<std::string>("skip-schedule");
  t.skip_p = cli.get<double>("skip-p");
  t.skipped_layers_in_adam = cli.get<std::string>("skipped-layers-in-adam");
  const nlohmann::json fields = t.to_json();
  for (const auto& [name, value] : cli.vm())
    if (!value.defaulted() && fields.contains(parse::snake_case(name))) r.given.insert(parse::snake_case(name));
  r.origins = cli.origins();
  if (phase == Phase::kTwo) {
    XL_CHECK(cli.has("init") || r.resume, kExitUsage, "phase 2 needs --init PHASE1.h5 (or --resume)");
    if (cli.has("init")) r.init = cli.get<std::string>("init");
    r.reset_optimizer = cli.get<bool>("reset-optimizer");
    t.schedule_from = cli.get<std::string>("schedule-from");
  }
  return r;
}

Phase1Settings phase1_settings(const std::string& base_config,
                               const std::vector<std::pair<std::string, std::string>>& overrides,
                               const std::string& source) {
  cli::Options cli(cli::ToolInfo{"xl-train-phase1", "", "", "", ""});
  add_training_options(cli, Phase::kOne);
  cli.parse_settings(base_config.empty() ? std::vector<std::string>() : std::vector<std::string>{base_config}, overrides,
                     source);
  char name[] = "xl-train-phase1";
  char* argv[] = {name, nullptr};
  const train::TrainRequest request = training_request(cli, Phase::kOne, 1, argv);
  Phase1Settings out;
  out.settings = cli.settings();
  out.train = request.train;
  out.train.validate(request.origins);
  out.model = request.model;
  out.model.n_token = 256;  // any vocab the cutoffs fit
  for (int64_t c : out.model.cutoffs) out.model.n_token = std::max(out.model.n_token, c + 2);
  out.model.validate(request.origins);
  return out;
}

}  // namespace xl::options

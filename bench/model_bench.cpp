// Model throughput: forward+backward (a training step as the trainer takes it: loss, backward,
// global-norm clip, our one-pass Adam, gradients reset to undefined) and forward-only (evaluation:
// no grad, memory 2 x tgt_len) tokens/s, peak RSS and model FLOP utilisation against the GEMM peak
// measured in the same process. Prints one JSON object.
//   xl_bench_model CONFIG [MODE [STEPS [SKIP_SCHEDULE [BETA]]]]
//   CONFIG: tiny | small | base (../shared/docs/bench-configs.md), or the paper's per-GPU shapes
//   enwik8 (Table 1: 12 x 512, batch 30) and wt103 (Table 2: 15 x 624, adaptive softmax, batch 16),
//   or Transformer-XL's own txl-wt103 (16 x 410, one tied output layer sliced per cluster, batch 60);
//   MODE: train | eval | generate (xl-generate's loop: bench_generate); SKIP_SCHEDULE: none
//   (default) | linear | uniform | ... (Skip-Retain, phase 1); BETA: SCH rate.
// Environment: XL_BENCH_DEVICE (cpu, cuda, cuda:N; default cpu), XL_BENCH_PRECISION (fp32, bf16,
// fp16, auto; default auto), XL_BENCH_BATCH, XL_BENCH_TGT_LEN (override the config's batch and
// segment), XL_BENCH_MEM_LEN (eval's memory; default 2 x tgt_len), XL_BENCH_KV_CACHE (eval:
// on keeps each memory's key/value projections as xl-eval-longctx does within its default budget;
// off projects the memory again every segment; default on), XL_BENCH_PEAK (off: no GEMM peak, so
// no MFU, for A/B runs and profiles of the steps alone: the peak's products take about 5 s on a
// CPU, after the steps, and a whole-process profile counts them), XL_BENCH_ATTENTION_PROBS (train:
// keep or recompute, as --attention-probs; default keep). On a GPU the peak is
// the median of 5 products at 8192^3 in the step's precision (and in fp32), and the peak device
// memory is the caching allocator's.
#include <sys/resource.h>

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <iostream>

#include "xl/cli/tool_main.h"
#include "xl/compute/amx_products.h"
#include "xl/compute/blas.h"
#include "xl/compute/cuda_support.h"
#include "xl/compute/device.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"
#include "xl/compute/precision.h"
#include "xl/compute/torch_process.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/generate.h"
#include "xl/kernels/cpu/chunked_attention.h"
#include "xl/model/cross_head.h"
#include "xl/model/skip_retain.h"
#include "xl/model/transformer_xl.h"
#include "xl/train/adam.h"
#include "xl/util/json_io.h"

using namespace xl;
using namespace xl::model;
using Clock = std::chrono::steady_clock;

namespace {

struct BenchConfig {
  int64_t n_layer, d_model, n_head, d_head, d_inner, tgt_len, mem_len, batch;
  int64_t vocab = 256;
  std::vector<int64_t> cutoffs = {};
  int64_t div_val = 1;
};

BenchConfig lookup(const std::string& name) {
  if (name == "tiny") return {4, 128, 4, 32, 512, 128, 128, 16};
  if (name == "small") return {8, 256, 8, 32, 1024, 256, 256, 8};
  if (name == "base") return {12, 512, 8, 64, 2048, 512, 512, 2};
  // The paper's models at its per-GPU batch (two GPUs: 60 and 32 streams in all).
  if (name == "enwik8") return {12, 512, 8, 64, 2048, 512, 512, 30};
  if (name == "wt103") return {15, 624, 16, 39, 2496, 512, 512, 16, 267735, {20000, 40000, 200000}, 4};
  // Transformer-XL's own WikiText-103 recipe (run_wt103_base.sh): one output layer over the whole
  // vocabulary, sliced per cluster (div_val 1), tied to the input embedding.
  if (name == "txl-wt103") return {16, 410, 10, 41, 2100, 150, 150, 60, 267735, {20000, 40000, 200000}, 1};
  throw std::runtime_error("unknown config " + name);
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double cpu_seconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// The machine's GEMM peak as bench-configs.md defines it: the median of 5 timed products at each of
// 2048^3 and 4096^3 (after one warm-up each), through LibTorch's mm (the BLAS on a CPU).
// On a GPU: 5 products at 8192^3 in `dtype`, on random data (zeros run faster than real data).
// `product` replaces mm (a CPU's other fp32 GEMM).
using Product = std::function<void(const torch::Tensor&, const torch::Tensor&, torch::Tensor&)>;
double gemm_peak_gflops(const torch::Device& device, torch::ScalarType dtype, const Product& product = {}) {
  std::vector<double> rates;
  const std::vector<int64_t> sizes = device.is_cuda() ? std::vector<int64_t>{8192} : std::vector<int64_t>{2048, 4096};
  for (int64_t n : sizes) {
    const auto opts = torch::TensorOptions().device(device).dtype(dtype);
    auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts), c = torch::empty({n, n}, opts);
    auto run = [&] { product ? product(a, b, c) : (void)torch::mm_out(c, a, b); };
    run();
    synchronize(device);
    for (int r = 0; r < (device.is_cuda() ? 10 : 5); ++r) {
      auto t = Clock::now();
      run();
      synchronize(device);
      rates.push_back(2.0 * n * n * n / seconds_since(t) / 1e9);
    }
  }
  std::sort(rates.begin(), rates.end());
  return 0.5 * (rates[rates.size() / 2 - 1] + rates[rates.size() / 2]);
}

// The CPU's fp32 peak through oneDNN's sgemm, which runs some of xl's products (0 without it). On
// a Zen 4 (2026-11-25) it reached 214-224 GFLOP/s where the BLAS reached 196-210: MFU is measured
// against the faster, so that no choice of kernels can push it past what the machine does.
double onednn_peak_gflops() {
  if (!compute::blas().onednn_sgemm) return 0;
  return gemm_peak_gflops(torch::kCPU, torch::kFloat, [](const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& c) {
    const int64_t n = a.size(0);
    compute::blas().onednn_sgemm('N', 'N', n, n, n, 1.0f, a.data_ptr<float>(), n, b.data_ptr<float>(), n, 0.0f,
                        c.data_ptr<float>(), n);
  });
}

// The CPU's bf16 peak on AMX tiles (0 without them): xl's tile product on each thread's own
// operands, in cache (256 x 256 x 1024, B packed once), on every thread at once, median of 5. On
// AMX, oneDNN's bf16 GEMM at 2048^3 waits on memory: one core of an Intel Xeon (2026-12-03) ran it
// at 589-601 GFLOP/s and 128 x 512 x 512 in cache at 1,014, where the tiles ran 256 x 256 x 1024 at
// 1,277. A peak from the large products alone would let bf16 MFU read twice what the chip allows.
double amx_tiles_peak_gflops() {
  if (!compute::amx_bf16_usable()) return 0;
  constexpr int64_t m = 256, n = 256, k = 1024, reps = 100;
  const int64_t threads = at::get_num_threads();
  auto bits = [](const torch::Tensor& x) { return reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()); };
  struct Operands {
    torch::Tensor a, c;
    compute::AmxPackedB b;
  };
  std::vector<Operands> ops(static_cast<size_t>(threads));
  for (Operands& o : ops) {
    o.a = torch::randn({m, k}).to(torch::kBFloat16);
    o.c = torch::empty({m, n});
    o.b.pack(false, k, n, bits(torch::randn({k, n}).to(torch::kBFloat16)), n);
  }
  std::vector<double> rates;
  for (int r = 0; r < 6; ++r) {  // the first warms the caches up
    auto t = Clock::now();
    compute::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t task = t0; task < t1; ++task) {
        Operands& o = ops[static_cast<size_t>(task)];
        for (int64_t i = 0; i < reps; ++i)
          compute::amx_bf16_gemm_packed(false, m, n, k, bits(o.a), k, o.b, 0, 0, 0, o.c.data_ptr<float>(), n);
      }
    });
    if (r > 0) rates.push_back(2.0 * m * n * k * reps * threads / seconds_since(t) / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// The tokens the steps read: uniform over a byte vocab; over a word vocab (cutoffs), drawn by
// Zipf's law with the ids as frequency ranks (p proportional to 1 / (id + 1)), as text meets a
// sorted vocab, so that the adaptive softmax's clusters see their share of the targets: the wt103
// shape's 20,000-word head takes 80% of them (computed), where uniform draws gave it 7.5%.
torch::Tensor bench_tokens(const BenchConfig& bc, int64_t rows, int64_t cols) {
  if (bc.cutoffs.empty()) return torch::randint(0, bc.vocab, {rows, cols}, torch::kLong);
  const torch::Tensor p = 1.0 / torch::arange(1, bc.vocab + 1, torch::kDouble);
  return torch::multinomial(p, rows * cols, true).view({rows, cols});
}

double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

}  // namespace

// Generation as xl-generate runs it (one stream, default sampling from the whole distribution):
// a prompt of mem_len tokens fills the memory, then STEPS tokens are drawn, each one token's
// forward through the memory and a draw, timed from the first drawn token to the last. Drawing
// alone is timed too, on two distributions over the vocab: the model's own (untrained weights:
// nearly flat, so draws land anywhere) and a peaked one with a trained word model's perplexity
// (log-probabilities -1.5 log(rank): 24 over 267,735 words), where a draw usually lands early.
nlohmann::json bench_generate(const BenchConfig& bc, TransformerXL& model, const torch::Device& device,
                              compute::Precision precision, int steps) {
  xl::eval::GenerateSettings gs;
  gs.precision = precision;
  gs.length = steps + 1;
  gs.tgt_len = bc.tgt_len;
  gs.mem_len = bc.mem_len;
  const auto prompt_ids = torch::randint(0, bc.vocab, {bc.mem_len}, torch::kLong);
  std::vector<int32_t> prompt(prompt_ids.data_ptr<int64_t>(), prompt_ids.data_ptr<int64_t>() + bc.mem_len);
  xl::Rng rng(1);
  Clock::time_point first;
  int drawn = 0;
  xl::eval::generate(model, prompt, gs, rng, [&](int32_t) {
    if (drawn++ == 0) first = Clock::now();
  });
  synchronize(device);
  const double seconds = seconds_since(first);
  if (const char* f = std::getenv("XL_BENCH_PROFILE")) {  // a trace of 30 more tokens
    gs.length = 30;
    torch::autograd::profiler::RecordProfile prof(f);
    xl::eval::generate(model, prompt, gs, rng, nullptr);
  }
  torch::NoGradGuard no_grad;
  model->eval();
  const auto flat = model->log_probs(torch::randn({1, bc.d_model}, torch::TensorOptions().device(device)));
  const auto rank = torch::arange(1, bc.vocab + 1, torch::kDouble);
  const auto peaked = torch::log_softmax(-1.5 * rank.log(), 0).index({torch::randperm(bc.vocab)});
  auto draw_ms = [&](const torch::Tensor& log_probs) {
    constexpr int kDraws = 50;
    const auto t = Clock::now();
    for (int i = 0; i < kDraws; ++i) xl::eval::sample_token(log_probs, {}, rng);
    return seconds_since(t) * 1e3 / kDraws;
  };
  const double perplexity = std::exp(-(peaked.exp() * peaked).sum().item<double>());
  return {{"tokens_per_s", steps / seconds}, {"ms_per_token", seconds * 1e3 / steps}, {"steps", steps},
          {"vocab", bc.vocab}, {"mem_len", bc.mem_len}, {"draw_ms_flat", draw_ms(flat)},
          {"draw_ms_peaked", draw_ms(peaked)}, {"peaked_perplexity", perplexity}};
}

// The model of a benchmark shape, with the attention variant XL_BENCH_ATTENTION=mgk|smgk,
// XL_BENCH_PERSISTENT=N (its feed-forward sublayer off) and XL_BENCH_SPAN=on asks for.
ModelConfig bench_model_config(const BenchConfig& bc) {
  ModelConfig cfg;
  cfg.n_token = bc.vocab;
  cfg.cutoffs = bc.cutoffs;
  cfg.div_val = bc.div_val;
  cfg.n_layer = bc.n_layer;
  cfg.d_model = bc.d_model;
  cfg.n_head = bc.n_head;
  cfg.d_head = bc.d_head;
  cfg.d_inner = bc.d_inner;
  cfg.dropout = 0.1;
  cfg.attention = env_or("XL_BENCH_ATTENTION", "rel");
  cfg.persistent_mem = std::atoll(env_or("XL_BENCH_PERSISTENT", "0").c_str());
  cfg.ff = cfg.persistent_mem == 0;
  cfg.adaptive_span = env_or("XL_BENCH_SPAN", "off") == "on";
  cfg.span_max = bc.tgt_len + bc.mem_len;
  cfg.validate(xl::SettingOrigins("XL_BENCH_* settings"));
  return cfg;
}

// What a run times: training or evaluation steps at one shape.
struct StepRun {
  bool train = true;
  int64_t batch = 0, tgt = 0, mem_len = 0;
  int steps = 0;
  std::string skip_name;
  double beta = 0;
  bool kv_cache = false;
};

struct Timing {
  double elapsed = 0, cpu = 0;  // wall and CPU seconds of the timed steps
  int timed = 0;
};

// Warm-up steps until the memory is full (a steady state: every timed step the same shapes), then
// the timed ones.
Timing time_steps(const StepRun& r, const BenchConfig& bc, TransformerXL& model, const torch::Device& device,
                  compute::Precision precision) {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : model->named_parameters(true)) params.emplace_back(p.key(), p.value());
  // Adam's moments exist only when training (eval's peak RSS must not count them).
  std::unique_ptr<xl::train::Adam> opt;
  if (r.train) opt = std::make_unique<xl::train::Adam>(params, xl::train::AdamOptions{});
  auto p_skip = skip_probabilities(parse_skip_schedule(r.skip_name), bc.n_layer, 0.0);
  xl::Rng rng(1);
  Memory mem = model->new_memory();
  const int64_t tgt = r.tgt;
  const int warm = static_cast<int>(std::max<int64_t>(2, (r.mem_len + tgt - 1) / tgt + 1));
  auto data = bench_tokens(bc, r.batch, tgt * (r.steps + warm + 1) + 1).to(device);
  if (device.is_cuda()) compute::cuda_reset_peak_allocated_bytes(device.index());
  if (r.train) model->train();
  else model->eval();
  Timing timing;
  for (int s = 0; s < r.steps + warm; ++s) {
    auto in = data.slice(1, s * tgt, (s + 1) * tgt), tg = data.slice(1, s * tgt + 1, (s + 1) * tgt + 1);
    ForwardOptions fo;
    fo.mem_len = r.mem_len;
    fo.cache_kv = r.kv_cache;
    // XL_BENCH_PROFILE=FILE: a Chrome trace of the last step from LibTorch's autograd profiler.
    std::unique_ptr<torch::autograd::profiler::RecordProfile> prof;
    const char* prof_file = std::getenv("XL_BENCH_PROFILE");
    if (prof_file && s == r.steps + warm - 1) prof = std::make_unique<torch::autograd::profiler::RecordProfile>(prof_file);
    synchronize(device);
    auto t = Clock::now();
    double c0 = cpu_seconds();
    compute::AutocastScope autocast(precision, device);
    if (r.train) {
      if (r.skip_name != "none") fo.skip = draw_skips(rng, p_skip);
      fo.perms = draw_cross_head(rng, r.beta, model->heads_per_layer());
      auto loss = model->forward(in, tg, mem, fo).mean();
      loss.backward();
      loss.item<double>();
      opt->step(2.5e-4, xl::train::clip_factor(opt->grad_norm(), 0.25));
      opt->clear_grads();
    } else {
      torch::NoGradGuard ng;
      model->forward(in, tg, mem, fo).sum().item<double>();
    }
    synchronize(device);
    if (s >= warm) {
      timing.elapsed += seconds_since(t);
      timing.cpu += cpu_seconds() - c0;
      ++timing.timed;
    }
  }
  return timing;
}

// The machine's product peaks in the precision the products ran in (bf16 and fp16 run on other
// units than fp32): LibTorch's, oneDNN's (fp32, CPU) and xl's AMX tiles (bf16, CPU). Measured after
// the steps: their 4096^2 matrices must not count in the model's peak RSS. XL_BENCH_PEAK=off skips.
struct Peaks {
  bool measured = false;
  double blas = 0, onednn = 0, tiles = 0, best = 0, fp32 = 0;
};

Peaks gemm_peaks(const torch::Device& device, compute::Precision precision) {
  Peaks p;
  const torch::ScalarType dtype =
      precision == compute::Precision::kBf16 ? torch::kBFloat16 : precision == compute::Precision::kFp16 ? torch::kHalf : torch::kFloat;
  p.measured = env_or("XL_BENCH_PEAK", "on") != "off";
  p.blas = p.measured ? gemm_peak_gflops(device, dtype) : 0.0;
  p.onednn = p.measured && device.is_cpu() && dtype == torch::kFloat ? onednn_peak_gflops() : 0.0;
  p.tiles = p.measured && device.is_cpu() && dtype == torch::kBFloat16 ? amx_tiles_peak_gflops() : 0.0;
  p.best = std::max({p.blas, p.onednn, p.tiles});
  p.fp32 = dtype == torch::kFloat || !p.measured ? p.best : gemm_peak_gflops(device, torch::kFloat);
  return p;
}

// Where the figures came from: the CPU, its BLAS and kernels, the GPU.
void add_machine(nlohmann::json& j, const torch::Device& device, const Peaks& peaks, double device_mb) {
  j["cpu"] = compute::cpu_model_name();
  j["blas_core"] = compute::blas_core();
  j["blas"] = compute::blas_description();
  j["gemm_choice"] = compute::gemm_choice_description();
  if (peaks.onednn > 0) {  // the peak's two candidates
    j["gemm_peak_blas_gflops"] = peaks.blas;
    j["gemm_peak_onednn_gflops"] = peaks.onednn;
  }
  if (peaks.tiles > 0) {  // bf16's: LibTorch's product at 2048^3 and 4096^3, xl's tiles in cache
    j["gemm_peak_mm_gflops"] = peaks.blas;
    j["gemm_peak_amx_tiles_gflops"] = peaks.tiles;
  }
  j["vector_kernels"] = compute::kernel_vector_units_name();
  if (device.is_cuda()) {
    j["gpu"] = compute::cuda_device_name(device.index());
    j["peak_device_mb"] = device_mb;
    const compute::KernelSet set = compute::kernel_set();
    j["kernels"] = set == compute::KernelSet::kGeneric   ? "generic (XL_KERNELS=generic: the explicit attention)"
                   : set == compute::KernelSet::kLibrary ? "library (XL_KERNELS=library: LibTorch's fused attention)"
                   : set == compute::KernelSet::kOwn     ? "own (XL_KERNELS=own: xl's flash attention wherever it applies)"
                                                         : "default";
  }
}

// One JSON line for a generation run.
int report_generation(const BenchConfig& bc, const std::string& name, TransformerXL& model, const torch::Device& device,
                      compute::Precision precision, int steps) {
  nlohmann::json j = bench_generate(bc, model, device, precision, steps);
  j["config"] = name;
  j["mode"] = "generate";
  j["threads"] = 2;
  j["device"] = device.str();
  j["peak_rss_mb"] = peak_rss_mb();
  j["cpu"] = compute::cpu_model_name();
  j["blas_core"] = compute::blas_core();
  std::cout << xl::json_line(j) << std::endl;
  return 0;
}

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl_bench_model", argc, argv, [](int argc, char** argv) {
    std::string name = argc > 1 ? argv[1] : "tiny";
    std::string mode = argc > 2 ? argv[2] : "train";
    StepRun r;
    r.steps = argc > 3 ? std::atoi(argv[3]) : 5;
    r.skip_name = argc > 4 ? argv[4] : "none";
    r.beta = argc > 5 ? std::atof(argv[5]) : 0.0;
    compute::set_threads(2);
    BenchConfig bc = lookup(name);
    if (const char* b = std::getenv("XL_BENCH_BATCH"); b && *b) bc.batch = std::atoi(b);
    if (const char* t = std::getenv("XL_BENCH_TGT_LEN"); t && *t) bc.tgt_len = std::atoi(t);
    const char* eval_mem = std::getenv("XL_BENCH_MEM_LEN");
    const torch::Device device = compute::parse_device(env_or("XL_BENCH_DEVICE", "cpu"));
    const compute::Precision precision = compute::resolve_precision(env_or("XL_BENCH_PRECISION", "auto"), device);
    const ModelConfig cfg = bench_model_config(bc);
    TransformerXL model(cfg);
    model->to(device);
    if (mode == "generate") return report_generation(bc, name, model, device, precision, r.steps);
    r.train = mode == "train";
    if (r.train) compute::use_deterministic_kernels(device);  // as xl-train-phase1/2 run on a GPU
    const std::string attention_probs = r.train ? env_or("XL_BENCH_ATTENTION_PROBS", "keep") : "keep";
    if (attention_probs != "keep" && attention_probs != "recompute")
      throw std::runtime_error("XL_BENCH_ATTENTION_PROBS must be keep or recompute");
    compute::set_attention_probs(attention_probs == "recompute" ? compute::AttentionProbs::kRecompute
                                                                : compute::AttentionProbs::kKeep);
    r.tgt = bc.tgt_len, r.batch = bc.batch;
    r.mem_len = r.train ? bc.mem_len : eval_mem && *eval_mem ? std::atoll(eval_mem) : 2 * bc.tgt_len;
    // Evaluation as the evaluator runs it: the memory's projections kept when they fit its budget.
    r.kv_cache = !r.train && env_or("XL_BENCH_KV_CACHE", "on") == "on" &&
                 xl::eval::kv_cache_bytes(model, r.batch, r.mem_len, r.tgt, precision) <= xl::eval::EvalSettings{}.kv_cache_bytes;
    const Timing timing = time_steps(r, bc, model, device, precision);
    const double rss = peak_rss_mb();
    const double device_mb = device.is_cuda() ? compute::cuda_peak_allocated_bytes(device.index()) / 1048576.0 : 0.0;
    const Peaks peaks = gemm_peaks(device, precision);
    const double tok_s = timing.timed * r.batch * r.tgt / timing.elapsed;
    const double nonemb = static_cast<double>(model->parameter_count(true));
    double per_tok = 6 * nonemb + 6.0 * bc.n_layer * (r.tgt + r.mem_len) * bc.d_model;
    if (!r.train) per_tok /= 3;
    const double mfu = tok_s * per_tok / (peaks.best * 1e9);
    auto measured = [&](double v) { return peaks.measured ? nlohmann::json(v) : nlohmann::json(); };  // null when skipped
    nlohmann::json j = {{"config", name}, {"mode", mode}, {"tokens_per_s", tok_s}, {"step_s", timing.elapsed / timing.timed},
                        {"cpu_s_per_step", timing.cpu / timing.timed}, {"gemm_peak_gflops", measured(peaks.best)},
                        {"mfu", measured(mfu)}, {"peak_rss_mb", rss}, {"threads", 2}, {"steps", timing.timed},
                        {"skip", r.skip_name}, {"beta", r.beta}, {"batch", r.batch}, {"tgt_len", r.tgt},
                        {"mem_len", r.mem_len}, {"device", device.str()}, {"precision", compute::to_string(precision)},
                        {"gemm_peak_fp32_gflops", measured(peaks.fp32)}, {"attention", cfg.attention},
                        {"persistent_mem", cfg.persistent_mem}, {"adaptive_span", cfg.adaptive_span},
                        {"kv_cache", r.kv_cache}, {"attention_probs", attention_probs},
                        {"targets", bc.cutoffs.empty() ? "uniform" : "zipf"}};
    add_machine(j, device, peaks, device_mb);
    std::cout << xl::json_line(j) << std::endl;
    return 0;
  });
}

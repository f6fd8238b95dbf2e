// Model throughput: forward+backward (training step with Adam) and forward-only tokens/s, peak RSS
// and model FLOP utilisation against the GEMM peak measured in the same process. Prints JSON.
//   xl_bench_model CONFIG [steps]   CONFIG: tiny | small | base (../shared/docs/bench-configs.md)
#include <sys/resource.h>

#include <chrono>
#include <iostream>

#include "xl/cli/tool_main.h"
#include "xl/model/transformer_xl.h"

using namespace xl::model;
using Clock = std::chrono::steady_clock;

namespace {

struct BenchConfig {
  int64_t n_layer, d_model, n_head, d_head, d_inner, tgt_len, mem_len, batch;
};

BenchConfig lookup(const std::string& name) {
  if (name == "tiny") return {4, 128, 4, 32, 512, 128, 128, 16};
  if (name == "small") return {8, 256, 8, 32, 1024, 256, 256, 8};
  if (name == "base") return {12, 512, 8, 64, 2048, 512, 512, 2};
  throw std::runtime_error("unknown config " + name);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double gemm_peak_gflops() {
  double best = 0;
  for (int64_t n : {2048}) {
    auto a = torch::randn({n, n}), b = torch::randn({n, n});
    torch::mm(a, b);
    for (int r = 0; r < 3; ++r) {
      auto t = Clock::now();
      torch::mm(a, b);
      best = std::max(best, 2.0 * n * n * n / seconds_since(t) / 1e9);
    }
  }
  return best;
}

double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  return xl::cli::run_tool("xl_bench_model", argc, argv, xl::cli::Runtime::kTorch, [](int argc, char** argv) {
    std::string name = argc > 1 ? argv[1] : "tiny";
    std::string mode = argc > 2 ? argv[2] : "train";
    int steps = argc > 3 ? std::atoi(argv[3]) : 5;
    xl::cli::set_threads(2);
    BenchConfig bc = lookup(name);
    ModelConfig cfg;
    cfg.n_token = 256;
    cfg.n_layer = bc.n_layer;
    cfg.d_model = bc.d_model;
    cfg.n_head = bc.n_head;
    cfg.d_head = bc.d_head;
    cfg.d_inner = bc.d_inner;
    cfg.dropout = 0.1;
    TransformerXL model(cfg);
    double peak = gemm_peak_gflops();
    const bool train = mode == "train";
    const int64_t tgt = bc.tgt_len, mem_len = train ? bc.mem_len : 2 * bc.tgt_len, b = bc.batch;
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(2.5e-4));
    Memory mem = model->new_memory();
    ForwardOptions fo;
    fo.mem_len = mem_len;
    auto data = torch::randint(0, 256, {b, tgt * (steps + 3) + 1}, torch::kLong);
    if (train) model->train();
    else model->eval();
    double elapsed = 0;
    int timed = 0;
    for (int s = 0; s < steps + 2; ++s) {
      auto in = data.slice(1, s * tgt, (s + 1) * tgt), tg = data.slice(1, s * tgt + 1, (s + 1) * tgt + 1);
      auto t = Clock::now();
      if (train) {
        opt.zero_grad();
        auto loss = model->forward(in, tg, mem, fo).mean();
        loss.backward();
        torch::nn::utils::clip_grad_norm_(model->parameters(), 0.25);
        opt.step();
      } else {
        torch::NoGradGuard ng;
        model->forward(in, tg, mem, fo).sum().item<double>();
      }
      if (s >= 2) {  // memory full from step 1 on; step 0 and 1 warm up
        elapsed += seconds_since(t);
        ++timed;
      }
    }
    double tok_s = timed * b * tgt / elapsed;
    double nonemb = static_cast<double>(model->parameter_count(true));
    double per_tok = 6 * nonemb + 6.0 * bc.n_layer * (tgt + mem_len) * bc.d_model;
    if (!train) per_tok /= 3;
    double mfu = tok_s * per_tok / (peak * 1e9);
    nlohmann::json j = {{"config", name}, {"mode", mode}, {"tokens_per_s", tok_s}, {"step_s", elapsed / timed},
                        {"gemm_peak_gflops", peak}, {"mfu", mfu}, {"peak_rss_mb", peak_rss_mb()},
                        {"threads", 2}, {"steps", timed}};
    std::cout << j.dump() << std::endl;
    return 0;
  });
}

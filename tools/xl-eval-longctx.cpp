// xl-eval-longctx: loss and bpc/ppl of a checkpoint on a token split, for one or more memory lengths.
#include <chrono>
#include <iostream>

#include "xl/analysis/eval_cache.h"
#include "xl/checkpoint/checkpoint.h"
#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/compute/device.h"
#include "xl/compute/parallel.h"
#include "xl/compute/torch_process.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/report.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/model_io.h"
#include "xl/options/compute_options.h"
#include "xl/options/eval_options.h"
#include "xl/util/error.h"
#include "xl/util/failure.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/resources.h"
#include "xl/util/signals.h"

namespace po = xl::cli::po;

namespace {

// A progress line on stderr every 15 s, for long evaluations.
xl::eval::ProgressFn progress_lines(int64_t mem_len) {
  auto t0 = std::chrono::steady_clock::now();
  auto next = t0 + std::chrono::seconds(15);
  return [=](int64_t scored, int64_t consumed, int64_t total) mutable {
    auto now = std::chrono::steady_clock::now();
    if (now < next || consumed >= total) return;
    next = now + std::chrono::seconds(15);
    double s = std::chrono::duration<double>(now - t0).count();
    XL_INFO("mem_len " << mem_len << ": " << (100 * consumed / std::max<int64_t>(1, total)) << "% ("
            << consumed << "/" << total << " tokens, " << static_cast<int64_t>(consumed / s) << " tok/s, "
            << scored << " scored)");
  };
}

}  // namespace

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl-eval-longctx", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli(
        {"xl-eval-longctx", "Evaluate a checkpoint on a token split over memory lengths (loss, bpc/ppl, speed).",
         "[OPTIONS] CHECKPOINT TOKENS",
         "Cuts the split into --batch-size parallel streams that cover every token, feeds them in segments\n"
         "of --tgt-len with the memory carried across segments, and prints one row per --mem-len value\n"
         "(a comma list is a sweep): the token-weighted loss in nats, bpc (byte and char vocabs) or ppl\n"
         "(word vocabs), scored tokens, tokens/s of the scored segments and the peak memory.\n"
         "Memory starts empty and every token with a prediction is scored (N - B of N tokens in B\n"
         "streams), the last partial segment included; --warmup instead scores only segments whose\n"
         "memory is full (NVIDIA's convention). The checkpoint's vocab must be the tokens file's.\n"
         "TOKENS may be - (stdin). The checkpoint's head mask, when it has one, is applied.",
         "  xl-eval-longctx p2.h5 enwik8.h5\n"
         "  xl-eval-longctx --tgt-len 80 --mem-len 2100 --clamp-len 820 --same-length true p2.h5 enwik8.h5\n"
         "  xl-eval-longctx --mem-len 0,512,1600,3800 --format md p2.h5 enwik8.h5\n"
         "  xl-eval-longctx --split valid --max-tokens 100K --per-token nll.h5 p2.h5 enwik8.h5"});
    cli.add("Input")
        ("checkpoint", po::value<std::string>(), "checkpoint (HDF5) to evaluate")
        ("tokens", po::value<std::string>()->default_value("-"), "tokens file (HDF5; - is stdin)");
    xl::options::add_eval_options(cli, "test", xl::options::MemLens::kSweep);
    cli.add("Output")
        ("format", po::value<std::string>()->default_value("jsonl"), "jsonl, md (Markdown tables) or tsv")
        ("per-token", po::value<std::string>(), "write each scored token's loss to FILE (HDF5, one group per setting)");
    cli.positional("checkpoint", 1);
    cli.positional("tokens", 1);
    cli.add_output("the result rows");
    cli.files({"checkpoint", "tokens"}, {"per-token", "cache"});
    xl::options::add_compute_options(cli);
    if (!cli.parse(argc, argv)) return 0;

    XL_CHECK(cli.has("checkpoint"), xl::kExitUsage, "give a CHECKPOINT and a TOKENS file (see xl-eval-longctx --help)");
    const std::string ckpt_path = cli.get<std::string>("checkpoint");
    const std::string tokens_path = cli.get<std::string>("tokens");
    XL_CHECK(!(xl::io::is_stdio(ckpt_path) && xl::io::is_stdio(tokens_path)), xl::kExitUsage,
             "CHECKPOINT and TOKENS cannot both be stdin");
    const auto format = xl::eval::parse_row_format(cli.get<std::string>("format"));
    const auto request = xl::options::eval_request(cli, xl::options::MemLens::kSweep);
    xl::eval::EvalSettings base = request.settings;
    const std::string per_token_path = cli.has("per-token") ? cli.get<std::string>("per-token") : "";
    XL_CHECK(!(xl::io::is_stdio(per_token_path) && xl::io::is_stdio(cli.output())), xl::kExitUsage,
             "--per-token - and the rows cannot both go to stdout (use -o FILE for the rows)");
    const std::string& cache_path = request.cache;
    XL_CHECK(cache_path.empty() || per_token_path.empty(), xl::kExitUsage,
             "--cache keeps each setting's loss, not its per-token losses: drop --cache or --per-token");

    const auto compute = xl::options::compute_settings(cli);
    xl::compute::set_threads(compute.threads);
    torch::manual_seed(compute.seed);
    const torch::Device device = xl::compute::parse_device(compute.device);
    base.precision = xl::compute::resolve_precision(compute.precision, device);

    auto tokens = xl::h5::TokensFile::open(tokens_path);
    const std::string& split = request.split;
    std::vector<int32_t> ids = tokens.read_split(split, "--split picks another", xl::eval::kMinEvalTokens);
    auto [ckpt, model] = xl::model::load_model(ckpt_path, {tokens.vocab().sha256(), tokens.name()});  // 65 on another vocab
    if (!cli.get<bool>("ignore-head-mask")) base.head_mask = xl::model::head_mask_of(ckpt);
    model->to(device);

    xl::io::AtomicOutput out(cli.output(), cli.force(), false);
    xl::analysis::EvalCache cache(cache_path);
    size_t kept = 0;
    std::unique_ptr<xl::eval::PerTokenFile> per_token;
    if (!per_token_path.empty()) per_token = std::make_unique<xl::eval::PerTokenFile>(per_token_path, cli.force());
    xl::eval::RowWriter rows(out.stream(), format);
    // A stop (Ctrl-C, a batch system's limit) ends the setting under way and keeps the finished ones.
    xl::signals::catch_stop();
    if (xl::log::level() != xl::log::Level::kQuiet)
      xl::signals::set_stop_notice("stopping after this segment; the settings finished so far are kept");
    base.stop_on_signal = true;
    size_t finished = 0;
    for (int64_t mem_len : request.mem_lens) {
      xl::eval::EvalSettings s = base;
      s.mem_len = mem_len;
      auto sink = per_token ? per_token->sink() : xl::eval::PerTokenSink();
      using xl::analysis::EvalCache;
      const std::string key = cache.enabled() ? EvalCache::key(EvalCache::study_key(model, ids, s), model->config, s.head_mask) : "";
      const std::optional<xl::eval::EvalResult> kept_result = cache.enabled() ? cache.find(key) : std::nullopt;
      // A memory longer than the streams never fills: with --warmup the row is empty (null loss), not
      // an error, and known before a segment runs (a sweep's longest memories cost the most).
      const bool scores = xl::eval::scores_any(model, static_cast<int64_t>(ids.size()), s);
      xl::eval::EvalResult result;
      try {
        if (kept_result) result = *kept_result;
        else if (scores) result = xl::eval::evaluate(model, ids, s, sink, progress_lines(mem_len));
      } catch (...) {
        // Out of memory at a longer memory: the settings finished before it are kept, as on a stop.
        const xl::Failure f = xl::describe_failure(std::current_exception());
        if (f.line.empty()) throw;
        if (finished) {
          if (per_token) per_token->commit();
          out.commit();
        }
        XL_FAIL(f.code, (request.mem_lens.size() > 1 ? "--mem-len " + std::to_string(mem_len) + ": " : "")
                            << f.line
                            << (finished ? "; kept the " + std::to_string(finished) + " of " +
                                               std::to_string(request.mem_lens.size()) + " settings finished before it"
                                         : "")
                            << (f.out_of_memory ? "; a smaller --batch-size, --tgt-len or --mem-len needs less" : ""));
      }
      if (const int sig = result.stopped_by) {
        XL_INFO("stopped by signal " << sig << " during --mem-len " << mem_len << ": "
                << (finished ? "kept the " + std::to_string(finished) + " of " + std::to_string(request.mem_lens.size()) +
                                   " settings finished before it"
                             : std::string("nothing was finished")));
        if (finished) {
          if (per_token) per_token->commit();
          out.commit();
        }
        return 128 + sig;
      }
      if (kept_result) ++kept;
      else cache.add(key, result);
      xl::eval::EvalRow row;
      row.split = split;
      row.tgt_len = s.tgt_len;
      row.mem_len = mem_len;
      row.clamp_len = xl::eval::effective_clamp_len(model, s);
      row.same_length = xl::eval::effective_same_length(model, s);
      row.warmup = s.warmup;
      row.batch_size = xl::eval::stream_count(static_cast<int64_t>(ids.size()), s.batch_size);
      row.result = result;
      row.vocab_type = tokens.vocab().type();
      row.peak_rss_mb = xl::peak_rss_mb();
      row.kept = kept_result.has_value();
      if (!scores)
        XL_WARN("--warmup --mem-len " << mem_len << ": no segment had a full memory (" << row.batch_size
                                      << " streams of about " << static_cast<int64_t>(ids.size()) / row.batch_size
                                      << " tokens): nothing was scored");
      rows.write(row);
      if (per_token) per_token->write_group("mem_len_" + std::to_string(mem_len), row);
      ++finished;
    }
    if (per_token) per_token->commit();
    out.commit();
    if (kept) XL_INFO(kept << " of " << request.mem_lens.size() << " settings kept in " << cache.path());
    return 0;
  });
}

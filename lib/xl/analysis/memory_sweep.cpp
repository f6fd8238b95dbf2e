#include "xl/analysis/memory_sweep.h"

#include <chrono>
#include <memory>
#include <optional>

#include "xl/analysis/eval_cache.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/model_io.h"
#include "xl/util/error.h"
#include "xl/util/failure.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/resources.h"
#include "xl/util/signals.h"

namespace xl::analysis {
namespace {

// A progress line on stderr every 15 s, for long evaluations.
eval::ProgressFn progress_lines(int64_t mem_len) {
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

class Sweep {
 public:
  explicit Sweep(const MemorySweepRequest& r)
      : r_(r), tokens_(h5::TokensFile::open(r.tokens)),
        ids_(tokens_.read_split(r.split, "--split picks another", eval::kMinEvalTokens)),
        loaded_(model::load_model(r.checkpoint, {tokens_.vocab().sha256(), tokens_.name()})),  // 65 on another vocab
        model_(loaded_.model), out_(r.output, r.force, false), cache_(r.cache), rows_(out_.stream(), r.format) {
    base_ = r.settings;
    if (!r.ignore_head_mask) base_.head_mask = model::head_mask_of(loaded_.ckpt);
    model_->to(r.device);
    cmem_lens_ = r.cmem_lens.empty() ? std::vector<int64_t>{eval::trained_cmem_len(loaded_.ckpt)} : r.cmem_lens;
    if (!r.per_token.empty()) per_token_ = std::make_unique<eval::PerTokenFile>(r.per_token, r.force);
    // A stop (Ctrl-C, a batch system's limit) ends the setting under way and keeps the finished ones.
    signals::catch_stop();
    if (log::level() != log::Level::kQuiet)
      signals::set_stop_notice("stopping after this segment; the settings finished so far are kept");
    base_.stop_on_signal = true;
  }

  int run() {
    for (int64_t mem_len : r_.mem_lens)
      for (int64_t cmem_len : cmem_lens_)
        if (const int sig = row(mem_len, cmem_len)) return sig;
    commit();
    if (kept_) XL_INFO(kept_ << " of " << settings() << " settings kept in " << cache_.path());
    return 0;
  }

 private:
  int row(int64_t mem_len, int64_t cmem_len);
  size_t settings() const { return r_.mem_lens.size() * cmem_lens_.size(); }
  eval::EvalResult evaluate(int64_t mem_len, const eval::EvalSettings& s, bool scores,
                            const std::optional<eval::EvalResult>& kept);
  void commit() {
    if (per_token_) per_token_->commit();
    out_.commit();
  }
  std::string finished_before() const {
    return "kept the " + std::to_string(finished_) + " of " + std::to_string(settings()) +
           " settings finished before it";
  }

  const MemorySweepRequest& r_;
  h5::TokensFile tokens_;
  std::vector<int32_t> ids_;
  model::LoadedModel loaded_;
  model::TransformerXL& model_;
  io::AtomicOutput out_;
  EvalCache cache_;
  eval::RowWriter rows_;
  std::unique_ptr<eval::PerTokenFile> per_token_;
  eval::EvalSettings base_;
  std::vector<int64_t> cmem_lens_;
  size_t kept_ = 0, finished_ = 0;
};

eval::EvalResult Sweep::evaluate(int64_t mem_len, const eval::EvalSettings& s, bool scores,
                                 const std::optional<eval::EvalResult>& kept) {
  try {
    if (kept) return *kept;
    if (scores) return eval::evaluate(model_, ids_, s, per_token_ ? per_token_->sink() : eval::PerTokenSink(),
                                      progress_lines(mem_len));
    return {};
  } catch (...) {
    // Out of memory at a longer memory: the settings finished before it are kept, as on a stop.
    const Failure f = describe_failure(std::current_exception());
    if (f.line.empty()) throw;
    if (finished_) commit();
    XL_FAIL(f.code, (settings() > 1 ? "--mem-len " + std::to_string(mem_len) + ": " : "")
                        << f.line << (finished_ ? "; " + finished_before() : "")
                        << (f.out_of_memory ? "; a smaller --batch-size, --tgt-len or --mem-len needs less" : ""));
  }
}

int Sweep::row(int64_t mem_len, int64_t cmem_len) {
  eval::EvalSettings s = base_;
  s.mem_len = mem_len;
  s.cmem_len = cmem_len;
  const std::string key = cache_.enabled() ? EvalCache::key(EvalCache::study_key(model_, ids_, s), model_->config, s.head_mask) : "";
  const std::optional<eval::EvalResult> kept = cache_.enabled() ? cache_.find(key) : std::nullopt;
  // A memory longer than the streams never fills: with --warmup the row is empty (null loss), not
  // an error, and known before a segment runs (a sweep's longest memories cost the most).
  const bool scores = eval::scores_any(model_, static_cast<int64_t>(ids_.size()), s);
  const eval::EvalResult result = evaluate(mem_len, s, scores, kept);
  if (const int sig = result.stopped_by) {
    XL_INFO("stopped by signal " << sig << " during --mem-len " << mem_len << ": "
                                 << (finished_ ? finished_before() : std::string("nothing was finished")));
    if (finished_) commit();
    return 128 + sig;
  }
  if (kept) ++kept_;
  else cache_.add(key, result);
  eval::EvalRow row;
  row.split = r_.split;
  row.tgt_len = s.tgt_len;
  row.mem_len = mem_len;
  if (model_->config.compressive()) row.cmem_len = cmem_len;
  row.clamp_len = eval::effective_clamp_len(model_, s);
  row.same_length = eval::effective_same_length(model_, s);
  row.warmup = s.warmup;
  row.batch_size = eval::stream_count(static_cast<int64_t>(ids_.size()), s.batch_size);
  row.result = result;
  row.vocab_type = tokens_.vocab().type();
  row.peak_rss_mb = peak_rss_mb();
  row.kept = kept.has_value();
  if (!scores)
    XL_WARN("--warmup --mem-len " << mem_len << ": no segment had a full memory (" << row.batch_size
                                  << " streams of about " << static_cast<int64_t>(ids_.size()) / row.batch_size
                                  << " tokens): nothing was scored");
  rows_.write(row);
  if (per_token_)
    per_token_->write_group("mem_len_" + std::to_string(mem_len) +
                                (row.cmem_len ? "_cmem_len_" + std::to_string(cmem_len) : std::string()), row);
  ++finished_;
  return 0;
}

}  // namespace

int run_memory_sweep(const MemorySweepRequest& request) { return Sweep(request).run(); }

}  // namespace xl::analysis

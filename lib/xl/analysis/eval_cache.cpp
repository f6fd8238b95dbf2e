#include "xl/analysis/eval_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "xl/analysis/head_importance.h"
#include "xl/util/error.h"
#include "xl/util/json_io.h"
#include "xl/util/log.h"
#include "xl/util/sha256.h"

namespace xl::analysis {
namespace {

void hash_tensor(Sha256& h, const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
  h.update(std::string(c.toString()) + "[");
  for (int64_t d : c.sizes()) h.update(std::to_string(d) + ",");
  h.update("]");
  h.update(c.data_ptr(), c.numel() * c.element_size());
}

// The model's configuration, weights and buffers, and the tokens.
void hash_model_and_tokens(Sha256& h, const model::TransformerXL& model, const std::vector<int32_t>& ids) {
  h.update(json_line(model->config.to_json()));
  for (const auto& p : model->named_parameters()) {
    h.update(p.key());
    hash_tensor(h, p.value());
  }
  for (const auto& b : model->named_buffers()) {
    h.update(b.key());
    hash_tensor(h, b.value());
  }
  h.update(ids.data(), ids.size() * sizeof(int32_t));
}

// The file's exclusive lock while alive; none where the file system has no locks (ENOLCK, some
// NFS mounts): one process per file then. Another holds it for a line's write: a wait that is
// longer (a writer stopped with Ctrl-Z) is said, not silent.
class FileLock {
 public:
  FileLock(int fd, const std::string& path) : fd_(fd) {
    int rc = ::flock(fd_, LOCK_EX | LOCK_NB);
    if (rc != 0 && errno == EWOULDBLOCK) {
      XL_INFO(path << ": waiting for another process that writes it");
      while ((rc = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
      }
    }
    held_ = rc == 0;
  }
  ~FileLock() {
    if (held_) ::flock(fd_, LOCK_UN);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
  bool held_ = false;
};

}  // namespace

EvalCache::EvalCache(const std::string& path) : path_(path) {
  if (path_.empty()) return;
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  XL_CHECK(fd_ >= 0, kExitCantCreat, path_ << ": cannot write the kept evaluations: " << std::strerror(errno));
  std::string text;
  {
    FileLock lock(fd_, path_);
    char block[1 << 16];
    for (off_t at = 0;;) {
      const ssize_t got = ::pread(fd_, block, sizeof block, at);
      if (got < 0 && errno == EINTR) continue;
      XL_CHECK(got >= 0, kExitNoInput, path_ << ": cannot read the kept evaluations: " << std::strerror(errno));
      if (got == 0) break;
      text.append(block, static_cast<size_t>(got));
      at += got;
    }
    // A kill while a line was written leaves it without its newline, a stopped machine NUL bytes
    // (zero_filled): they are dropped, and the file cut back to its last whole line so that the
    // next line starts on a line of its own. Only a file whose lines are all kept evaluations is
    // cut: --cache naming a checkpoint by mistake leaves it as it was.
    const size_t whole = whole_lines_size(text);
    const size_t lines = load(text.substr(0, whole));
    if (whole < text.size()) {
      const std::string start = "{\"key\":";  // how every kept line begins (its keys are sorted)
      const size_t n = std::min(text.size() - whole, start.size());
      XL_CHECK(text.compare(whole, n, start, 0, n) == 0 || zero_filled(text, whole), kExitDataErr,
               path_ << ":" << lines + 1 << ": not an evaluation kept by --cache");
      XL_CHECK(::ftruncate(fd_, static_cast<off_t>(whole)) == 0, kExitCantCreat,
               path_ << ": cannot cut the line a killed run left unfinished: " << std::strerror(errno));
    }
  }
}

size_t EvalCache::load(const std::string& text) {
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("scores")) {
        const auto rows = j.at("scores").get<std::vector<std::vector<float>>>();
        if (rows.empty() || rows.front().empty()) throw std::invalid_argument("no scores");
        torch::Tensor t = torch::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.front().size())});
        for (size_t l = 0; l < rows.size(); ++l) {
          if (rows[l].size() != rows.front().size()) throw std::invalid_argument("ragged scores");
          for (size_t h = 0; h < rows[l].size(); ++h) t[static_cast<int64_t>(l)][static_cast<int64_t>(h)] = rows[l][h];
        }
        kept_scores_[j.at("key").get<std::string>()] = t;
        continue;
      }
      eval::EvalResult r;
      r.loss_sum = j.at("loss_sum").get<double>();
      r.tokens = j.at("tokens").get<int64_t>();
      r.seconds = j.at("seconds").get<double>();
      r.scoring_seconds = j.value("scoring_seconds", 0.0);  // kept by xl before 2026-11-29: none
      r.kv_cached = j.value("kv_cache", false);             // kept by xl before 2026-12-04: none
      kept_[j.at("key").get<std::string>()] = r;
    } catch (const std::exception&) {
      XL_FAIL(kExitDataErr, path_ << ":" << line_no << ": not an evaluation kept by --cache");
    }
  }
  return line_no;
}

EvalCache::~EvalCache() {
  if (fd_ >= 0) ::close(fd_);
}

std::string EvalCache::study_key(const model::TransformerXL& model, const std::vector<int32_t>& ids,
                                 const eval::EvalSettings& s) {
  Sha256 h;
  hash_model_and_tokens(h, model, ids);
  const nlohmann::json settings = {
      {"tgt_len", s.tgt_len},         {"mem_len", s.mem_len},
      {"batch_size", s.batch_size},   {"clamp_len", s.clamp_len ? nlohmann::json(*s.clamp_len) : nlohmann::json()},
      {"warmup", s.warmup},           {"same_length", s.same_length ? nlohmann::json(*s.same_length) : nlohmann::json()},
      {"max_tokens", s.max_tokens},   {"precision", compute::to_string(s.precision)},
      {"shard", s.shard},             {"shards", s.shards}};
  nlohmann::json all = settings;
  if (s.cmem_len > 0) all["cmem_len"] = s.cmem_len;  // a Transformer-XL's keys are as before
  h.update(json_line(all));
  return h.hex();
}

std::string EvalCache::importance_key(const model::TransformerXL& model, const std::vector<int32_t>& ids,
                                      const ImportanceSettings& s) {
  Sha256 h;
  hash_model_and_tokens(h, model, ids);
  const nlohmann::json settings = {{"importance", true},         {"tgt_len", s.tgt_len},
                                   {"mem_len", s.mem_len},       {"batch_size", s.batch_size},
                                   {"max_tokens", s.max_tokens}, {"precision", compute::to_string(s.precision)}};
  nlohmann::json all = settings;
  if (s.cmem_len > 0) all["cmem_len"] = s.cmem_len;
  h.update(json_line(all));
  return h.hex();
}

std::string EvalCache::key(const std::string& study, const model::ModelConfig& cfg, const torch::Tensor& head_mask) {
  Sha256 h;
  h.update(study);
  if (!head_mask.defined()) return h.hex();
  torch::Tensor mask = head_mask.detach().to(torch::kCPU, torch::kFloat32).clone();
  for (int64_t l = 0; l < cfg.n_layer && l < mask.size(0); ++l) mask[l].slice(0, cfg.heads_in_layer(l)).fill_(1);
  if (!mask.eq(1).all().item<bool>()) hash_tensor(h, mask);
  return h.hex();
}

std::optional<eval::EvalResult> EvalCache::find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = kept_.find(key);
  if (it == kept_.end()) return std::nullopt;
  return it->second;
}

void EvalCache::add(const std::string& key, const eval::EvalResult& r) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  kept_[key] = r;
  append({{"key", key}, {"loss_sum", r.loss_sum}, {"tokens", r.tokens}, {"seconds", r.seconds}, {"scoring_seconds", r.scoring_seconds},
          {"kv_cache", r.kv_cached}});
}

std::optional<torch::Tensor> EvalCache::find_scores(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = kept_scores_.find(key);
  if (it == kept_scores_.end()) return std::nullopt;
  return it->second.clone();
}

void EvalCache::add_scores(const std::string& key, const torch::Tensor& scores) {
  if (!enabled()) return;
  const torch::Tensor t = scores.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  std::vector<std::vector<float>> rows(static_cast<size_t>(t.size(0)));
  for (int64_t l = 0; l < t.size(0); ++l)
    rows[static_cast<size_t>(l)].assign(t[l].data_ptr<float>(), t[l].data_ptr<float>() + t.size(1));
  std::lock_guard<std::mutex> lock(mutex_);
  kept_scores_[key] = t.clone();
  append({{"key", key}, {"scores", rows}});
}

// A file that cannot be written (a full disk) costs the study nothing but what it would keep: the
// evaluations go on and their results are written where they go. A line written in part is cut
// off again, so that no one meets it between whole lines.
void EvalCache::append(const nlohmann::json& record) {
  if (failed_) return;
  const std::string line = json_line(record) + '\n';
  FileLock lock(fd_, path_);
  struct stat before {};
  const bool sized = ::fstat(fd_, &before) == 0;
  size_t done = 0;
  int err = EIO;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (done == line.size()) {
    // On disk before the lock goes, so that a node that loses power keeps the evaluations it
    // finished (best effort: the line is written either way).
    (void)::fdatasync(fd_);
    return;
  }
  if (sized && ::ftruncate(fd_, before.st_size) != 0) {
    // The next run drops the cut line as it drops a killed run's.
  }
  failed_ = true;
  XL_WARN(path_ << ": cannot keep evaluations (" << std::strerror(err)
                << "; disk full?): they go on without being kept for the next run");
}

}  // namespace xl::analysis

#include "xl/eval/report.h"

#include <cmath>
#include <cstdio>
#include <numeric>

#include "xl/eval/metric.h"
#include "xl/h5/formats.h"
#include "xl/h5/h5.h"
#include "xl/util/error.h"
#include "xl/util/json_io.h"

namespace xl::eval {

namespace {

double tokens_per_s(const EvalRow& row) {
  const double s = row.result.scoring_seconds > 0 ? row.result.scoring_seconds : row.result.seconds;
  return s > 0 ? static_cast<double>(row.result.tokens) / s : 0.0;
}

// A finite number, or null (JSON has no NaN).
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

struct Column {
  std::string name;
  int width;
  std::string value;
};

std::vector<Column> columns(const EvalRow& row) {
  const auto& r = row.result;
  const Metric metric(row.vocab_type);
  std::vector<Column> c = {{"split", 6, row.split},
                           {"tgt_len", 7, std::to_string(row.tgt_len)},
                           {"mem_len", 7, std::to_string(row.mem_len)}};
  if (row.cmem_len) c.push_back({"cmem_len", 8, std::to_string(*row.cmem_len)});
  std::vector<Column> rest = {
          {"clamp_len", 9, std::to_string(row.clamp_len)},
          {"same_length", 11, row.same_length ? "1" : "0"},
          {"warmup", 6, row.warmup ? "1" : "0"},
          {"tokens", 10, std::to_string(r.tokens)},
          {"loss", 8, fixed(r.loss(), 5)},
          {metric.name(), 9, fixed(metric.of(r.loss()), metric.name() == "ppl" ? 3 : 5)},
          {"tokens_per_s", 12, fixed(tokens_per_s(row), 1)},
          {"seconds", 9, fixed(r.seconds, 2)},
          {"peak_rss_mb", 11, fixed(row.peak_rss_mb, 1)},
          {"kept", 4, row.kept ? "1" : "0"}};
  c.insert(c.end(), rest.begin(), rest.end());
  return c;
}

}  // namespace

nlohmann::json EvalRow::to_json() const {
  nlohmann::json j;
  j["event"] = "eval";
  j["split"] = split;
  j["tgt_len"] = tgt_len;
  j["mem_len"] = mem_len;
  if (cmem_len) j["cmem_len"] = *cmem_len;
  j["clamp_len"] = clamp_len;
  j["same_length"] = same_length;
  j["warmup"] = warmup;
  j["batch_size"] = batch_size;
  j["tokens"] = result.tokens;
  j["loss"] = number(result.loss());
  const Metric metric(vocab_type);
  j[metric.name()] = number(metric.of(result.loss()));
  j["tokens_per_s"] = tokens_per_s(*this);
  j["seconds"] = result.seconds;
  j["peak_rss_mb"] = peak_rss_mb;
  j["kv_cache"] = result.kv_cached;
  if (kept) j["kept"] = true;
  return j;
}

void RowWriter::write(const EvalRow& row) {
  if (format_ == RowFormat::kJsonl) {
    out_ << json_line(row.to_json()) << "\n" << std::flush;
    return;
  }
  auto cols = columns(row);
  const bool md = format_ == RowFormat::kMarkdown;
  // Markdown cells are padded to fixed widths, so the table reads as text while rows stream in.
  auto line = [&](int kind) {  // 0: header, 1: Markdown's rule, 2: values
    std::string s = md ? "|" : "";
    for (size_t i = 0; i < cols.size(); ++i) {
      const std::string v = kind == 0 ? cols[i].name : kind == 1 ? std::string(cols[i].width - 1, '-') + ":" : cols[i].value;
      if (!md) {
        s += (i ? "\t" : "") + v;
        continue;
      }
      s += " " + std::string(std::max<int>(0, cols[i].width - static_cast<int>(v.size())), ' ') + v + " |";
    }
    return s + "\n";
  };
  if (!header_done_) {
    out_ << line(0);
    if (md) out_ << line(1);
    header_done_ = true;
  }
  out_ << line(2) << std::flush;
}

PerTokenFile::PerTokenFile(const std::string& path, bool force) : out_(std::make_unique<h5::OutputFile>(path, force)) {
  h5::write_attr(out_->file(), "xl_format", std::string(h5::kPerTokenFormat));
  h5::write_attr(out_->file(), "xl_format_version", h5::kPerTokenFormatVersion);
}

PerTokenFile::~PerTokenFile() = default;

PerTokenSink PerTokenFile::sink() {
  return [this](int64_t, int64_t index, float nll) {
    index_.push_back(index);
    nll_.push_back(nll);
  };
}

void PerTokenFile::write_group(const std::string& name, const EvalRow& row) {
  // Split order (the evaluator reports stream by stream within each segment).
  std::vector<size_t> order(index_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return index_[a] < index_[b]; });
  std::vector<int64_t> index(order.size());
  std::vector<float> nll(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    index[i] = index_[order[i]];
    nll[i] = nll_[order[i]];
  }
  index_.clear();
  nll_.clear();
  auto group = h5::create_group(out_->file(), name);
  const std::vector<hsize_t> dims{static_cast<hsize_t>(nll.size())};
  h5::DatasetOptions opts;
  opts.chunk = {hsize_t{1} << 18};
  h5::write_dataset(group, "nll", nll, dims, h5::Type::kF32, opts);
  h5::write_dataset(group, "index", index, dims, h5::Type::kI64, opts);
  h5::write_attr(group, "split", row.split);
  h5::write_attr(group, "tgt_len", row.tgt_len);
  h5::write_attr(group, "mem_len", row.mem_len);
  if (row.cmem_len) h5::write_attr(group, "cmem_len", *row.cmem_len);
  h5::write_attr(group, "clamp_len", row.clamp_len);
  h5::write_attr(group, "same_length", int64_t{row.same_length});
  h5::write_attr(group, "warmup", int64_t{row.warmup});
  h5::write_attr(group, "batch_size", row.batch_size);
  h5::write_attr(group, "tokens", row.result.tokens);
  h5::write_attr(group, "loss", row.result.loss());
}

void PerTokenFile::commit() { out_->commit(); }

}  // namespace xl::eval

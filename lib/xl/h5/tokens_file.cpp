#include "xl/h5/tokens_file.h"

#include <algorithm>
#include <ctime>
#include <utility>

#include "xl/h5/checksum.h"
#include "xl/util/clock.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/sha256.h"
#include "xl/util/torch_save_signature.h"

namespace xl::h5 {
namespace {

constexpr hsize_t kChunk = 1 << 18;  // 2^18 tokens: chunk I/O stays under HDF5's 1 MiB cache
constexpr const char* kVocabSources = "a vocab, tokens file or checkpoint";

// The vocab an HDF5 file embeds (65 naming the file when it has none).
text::Vocab embedded_vocab(const File& f) {
  if (!exists(f, "vocab")) fail(f.name(), kExitDataErr, "an HDF5 file without a vocab (expected " + std::string(kVocabSources) + ")");
  return read_vocab(f, "vocab", f.name());
}

}  // namespace

void write_vocab(hid_t loc, const std::string& group, const text::Vocab& vocab) {
  Handle g = create_group(loc, group);
  std::vector<uint8_t> bytes;
  std::vector<int64_t> offsets{0};
  for (const auto& p : vocab.pieces()) {
    bytes.insert(bytes.end(), p.begin(), p.end());
    offsets.push_back(static_cast<int64_t>(bytes.size()));
  }
  write_checked_dataset(g, "piece_bytes", bytes, Type::kU8);
  write_checked_dataset(g, "piece_offsets", offsets, Type::kI64);
  write_checked_dataset(g, "counts", vocab.counts(), Type::kI64);
  write_attr(g, "type", text::to_string(vocab.type()));
  write_attr(g, "size", static_cast<int64_t>(vocab.size()));
  write_attr(g, "specials", static_cast<int64_t>(vocab.specials()));
  write_attr(g, "sha256", vocab.sha256());
  if (vocab.pretokenizer() != text::Pretokenizer::kNone) write_attr(g, "pretokenize", text::to_string(vocab.pretokenizer()));
}

text::Vocab read_vocab(hid_t loc, const std::string& group, const std::string& file) {
  Handle g = open_group(loc, group, file);
  const std::string at = "/" + group + "/";
  auto bytes = read_checked_dataset<uint8_t>(g, "piece_bytes", at + "piece_bytes", file);
  auto offsets = read_checked_dataset<int64_t>(g, "piece_offsets", at + "piece_offsets", file);
  auto counts = read_checked_dataset<int64_t>(g, "counts", at + "counts", file);
  auto type = read_attr_string(g, "type");
  auto specials = read_attr_int(g, "specials");
  if (!type || !specials || offsets.empty() || counts.size() + 1 != offsets.size())
    fail(file, kExitDataErr, "malformed embedded vocab in " + group);
  std::vector<std::string> pieces;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    if (offsets[i] < 0 || offsets[i + 1] < offsets[i] || offsets[i + 1] > static_cast<int64_t>(bytes.size()))
      fail(file, kExitDataErr, "malformed embedded vocab in " + group);
    pieces.emplace_back(reinterpret_cast<const char*>(bytes.data()) + offsets[i],
                        static_cast<size_t>(offsets[i + 1] - offsets[i]));
  }
  const auto vocab_type = text::vocab_type_named(*type);
  if (!vocab_type) fail(file, kExitDataErr, "unknown vocab type '" + *type + "' in " + group);
  text::Vocab vocab(*vocab_type, std::move(pieces), std::move(counts),
                    static_cast<int>(*specials));
  auto sha = read_attr_string(g, "sha256");
  if (sha && *sha != vocab.sha256()) fail(file, kExitDataErr, "embedded vocab does not match its sha256");
  vocab.check(file);
  if (auto pretokenize = read_attr_string(g, "pretokenize"))
    vocab.set_pretokenizer(text::parse_recorded_pretokenizer(vocab.type(), *pretokenize, file));
  return vocab;
}

text::Vocab vocab_of_bytes(std::string bytes, const std::string& name) {
  // Transformer-XL's cache.pt or Hugging Face's vocab.bin or vocab.pkl given as the vocab: reading
  // it takes LibTorch.
  if (is_torch_zip(bytes) || is_torch_legacy(bytes) || is_plain_pickle(bytes))
    fail(name, kExitDataErr, std::string(is_plain_pickle(bytes) ? "a pickle" : "a torch.save file") +
                                 ", not a vocab (Transformer-XL's cache.pt or Hugging Face's vocab.bin: xl-import-torch takes it, "
                                 "--corpus cache.pt to a tokens file or --vocab with the model to a checkpoint; give that)");
  if (!has_hdf5_signature(bytes)) return text::Vocab::from_tsv(bytes, name);
  return embedded_vocab(File::open_image(std::move(bytes), name, kVocabSources));
}

text::Vocab load_vocab(const std::string& path) {
  // A tokens file or checkpoint on disk: its vocab alone is read, not the whole file (a wt103
  // tokens file is 420 MB, a base checkpoint with its optimizer 500 MB).
  if (is_hdf5_file(path)) return embedded_vocab(File::open(path, kVocabSources));
  return vocab_of_bytes(io::read_text(path, io::ZipArchives::kAsStored), io::display_name(path));
}

void write_tokens(File& file, const text::Vocab& vocab, const std::vector<TokenSplit>& splits,
                  const TokensMeta& meta) {
  hid_t root = file.id();
  write_attr(root, "xl_format", std::string(kTokensFormat));
  write_attr(root, "xl_format_version", kTokensFormatVersion);
  write_attr(root, "created_by", meta.created_by);
  write_attr(root, "command_line", meta.command_line);
  write_attr(root, "created_utc", utc_now());
  write_attr(root, "vocab_sha256", vocab.sha256());
  write_attr(root, "vocab_size", static_cast<int64_t>(vocab.size()));
  write_attr(root, "vocab_type", text::to_string(vocab.type()));
  if (!meta.source_sha256.empty()) {
    write_attr(root, "source_sha256", meta.source_sha256);
    write_attr(root, "source_bytes", meta.source_bytes);
  }
  write_vocab(root, "vocab", vocab);
  const Type stored = vocab.size() <= 65535 ? Type::kU16 : Type::kI32;
  Handle group = create_group(root, "splits");
  for (const auto& s : splits) {
    DatasetOptions opts;
    opts.chunk = {kChunk};
    opts.extendible = true;
    opts.compress = meta.compress;
    if (stored == Type::kU16) {
      // Narrowed here: HDF5's own int32 -> uint16 conversion checks every element for overflow
      // and is several times slower (all ids are below the vocab size, so none overflows).
      std::vector<uint16_t> narrow(s.ids.begin(), s.ids.end());
      write_checked_dataset(group, s.name, narrow, stored, opts);
    } else {
      write_checked_dataset(group, s.name, s.ids, stored, opts);
    }
    Handle ds(H5Dopen2(group, s.name.c_str(), H5P_DEFAULT));
    write_attr(ds, "source", s.source.name);
    write_attr(ds, "source_sha256", s.source.sha256);
    write_attr(ds, "source_bytes", s.source.bytes);
    write_attr(ds, "unknown", s.source.unknown);
  }
  file.flush();
}

TokensFile TokensFile::open(const std::string& path) {
  TokensFile t;
  t.file_ = File::open(path, "an xl tokens file");
  const std::string& name = t.file_.name();
  auto format = read_attr_string(t.file_, "xl_format");
  if (!format) fail(name, kExitDataErr, "not an xl tokens file (no xl_format attribute)");
  if (*format != kTokensFormat)
    fail(name, kExitDataErr, "is an '" + *format + "' file, not an xl tokens file" +
                                 (*format == kCheckpointFormat ? " (where a tool takes both, the checkpoint comes first)" : ""));
  auto version = read_attr_int(t.file_, "xl_format_version");
  if (!version || *version > kTokensFormatVersion)
    fail(name, kExitDataErr, "tokens format version " + std::to_string(version.value_or(-1)) +
                                 " is newer than this program reads (" + std::to_string(kTokensFormatVersion) + ")");
  t.vocab_ = read_vocab(t.file_, "vocab", name);
  return t;
}

std::vector<std::string> TokensFile::split_names() const {
  std::vector<std::string> names;
  for (const char* s : {"train", "valid", "test"})
    if (has_split(s)) names.push_back(s);
  for (const auto& s : list(file_, "splits"))
    if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
  return names;
}

bool TokensFile::has_split(const std::string& split) const { return exists(file_, "splits/" + split); }

int64_t TokensFile::split_length(const std::string& split) const {
  auto dims = dataset_dims(file_, "splits/" + split, file_.name());
  return dims.empty() ? 0 : static_cast<int64_t>(dims[0]);
}

std::vector<int32_t> TokensFile::read_split(const std::string& split, const std::string& remedy, int64_t min_tokens) const {
  const std::string then = remedy.empty() ? "" : "; " + remedy;
  if (!has_split(split)) {
    std::string avail;
    for (const auto& s : split_names()) avail += (avail.empty() ? "" : ", ") + s;
    fail(file_.name(), kExitDataErr, "no split '" + split + "' (it has: " + (avail.empty() ? "none" : avail) + ")" + then);
  }
  if (const int64_t n = split_length(split); n < min_tokens)
    fail(file_.name(), kExitDataErr,
         "split '" + split + "' holds " + std::to_string(n) + " token" + (n == 1 ? "" : "s") + ", fewer than the " +
             std::to_string(min_tokens) + " it needs here" + then);
  const std::string path = "splits/" + split, where = "/" + path, &name = file_.name();
  std::vector<int32_t> ids;
  Handle ds(H5Dopen2(file_, path.c_str(), H5P_DEFAULT));
  if (!ds.valid()) fail(name, kExitDataErr, "cannot open dataset " + where);
  if (dataset_type(file_, path, name) == Type::kU16 && has_attr(ds, kChecksumAttr)) {
    // Read chunk by chunk in the stored type, so that the bytes meet their checksum, and widened
    // here: the whole split in its stored type beside the ids would add half again to the peak.
    ids.resize(static_cast<size_t>(split_length(split)));
    std::vector<uint16_t> chunk(kChunk);
    Sha256 sha;
    for (size_t at = 0; at < ids.size(); at += kChunk) {
      const size_t n = std::min<size_t>(kChunk, ids.size() - at);
      read_slice_raw(file_, path, at, n, chunk.data(), Type::kU16, name);
      sha.update(chunk.data(), n * sizeof(uint16_t));
      std::copy_n(chunk.begin(), n, ids.begin() + static_cast<std::ptrdiff_t>(at));
    }
    check_digest(ds, sha.hex(), where, name);
  } else {
    ids = read_checked_dataset<int32_t>(file_, path, where, name);  // an int32 split as stored, or unchecked ids
  }
  const int32_t v = static_cast<int32_t>(vocab_.size());
  for (int32_t id : ids)
    if (id < 0 || id >= v)
      fail(file_.name(), kExitDataErr, "split '" + split + "' holds id " + std::to_string(id) +
                                           " outside its vocab of " + std::to_string(v));
  return ids;
}

std::string TokensFile::attr(const std::string& key) const { return read_attr_string(file_, key).value_or(""); }
int64_t TokensFile::attr_int(const std::string& key) const { return read_attr_int(file_, key).value_or(-1); }

SplitSource TokensFile::split_source(const std::string& split) const {
  SplitSource s;
  Handle ds(H5Dopen2(file_, ("splits/" + split).c_str(), H5P_DEFAULT));
  if (!ds.valid()) return s;
  s.name = read_attr_string(ds, "source").value_or("");
  s.sha256 = read_attr_string(ds, "source_sha256").value_or("");
  s.bytes = read_attr_int(ds, "source_bytes").value_or(0);
  s.unknown = read_attr_int(ds, "unknown").value_or(0);
  return s;
}

}  // namespace xl::h5

// The HDF5 layer: every element type and attribute type, groups, chunked/compressed datasets,
// in-memory files and their images, errors on missing/text/truncated files, atomic outputs, and
// the tokens file (uint16 or int32 storage, embedded vocab, missing splits).
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "xl/h5/checksum.h"
#include "xl/h5/h5.h"
#include "xl/h5/tokens_file.h"
#include "xl/text/vocab.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using namespace xl::h5;

namespace {

using xl::test::TempDir;
using xl::test::error_code;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Creation properties of a dataset: chunk size (0: contiguous), number of filters, max first dim.
struct Layout {
  hsize_t chunk = 0;
  int filters = 0;
  hsize_t maxdim = 0;
};
Layout layout_of(hid_t loc, const std::string& path) {
  Layout l;
  Handle ds(H5Dopen2(loc, path.c_str(), H5P_DEFAULT));
  Handle dcpl(H5Dget_create_plist(ds));
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) H5Pget_chunk(dcpl, 1, &l.chunk);
  l.filters = H5Pget_nfilters(dcpl);
  Handle space(H5Dget_space(ds));
  hsize_t dims[8], maxdims[8];
  H5Sget_simple_extent_dims(space, dims, maxdims);
  l.maxdim = maxdims[0];
  return l;
}

template <typename T>
void expect_roundtrip(hid_t loc, const std::string& path, const std::vector<T>& data, Type stored) {
  write_dataset(loc, path, data, {2, data.size() / 2}, stored);
  std::vector<hsize_t> dims;
  auto back = read_dataset<T>(loc, path, "t.h5", &dims);
  EXPECT_EQ(back, data) << path;
  EXPECT_EQ(dims, (std::vector<hsize_t>{2, data.size() / 2})) << path;
  EXPECT_EQ(dataset_type(loc, path, "t.h5"), stored) << path;
}

xl::text::Vocab byte_vocab() {
  xl::text::VocabOptions o;
  o.type = xl::text::VocabType::kByte;
  return xl::text::build_vocab({std::string_view("hello world")}, o, "t");
}

// A word vocab of `n` entries (<eos>, <unk>, then w2, w3, ...).
xl::text::Vocab word_vocab(size_t n) {
  std::vector<std::string> pieces{"<eos>", "<unk>"};
  for (size_t i = 2; i < n; ++i) pieces.push_back("w" + std::to_string(i));
  std::vector<int64_t> counts(n, 1);
  return xl::text::Vocab(xl::text::VocabType::kWord, std::move(pieces), std::move(counts), 2);
}

TokenSplit split(const std::string& name, std::vector<int32_t> ids) {
  TokenSplit s;
  s.name = name;
  s.source = {name + ".txt", std::string(64, 'a'), static_cast<int64_t>(ids.size()), 3};
  s.ids = std::move(ids);
  return s;
}

TokensMeta meta() {
  TokensMeta m;
  m.created_by = "h5_test";
  m.command_line = "h5_test --flag";
  m.source_sha256 = std::string(64, 'b');
  m.source_bytes = 42;
  return m;
}

}  // namespace

TEST(H5, EveryElementTypeRoundTrips) {
  TempDir dir;
  File f = File::create(dir.file("t.h5"), "t.h5");
  expect_roundtrip<uint8_t>(f, "u8", {0, 1, 127, 128, 254, 255}, Type::kU8);
  expect_roundtrip<uint16_t>(f, "u16", {0, 1, 256, 32768, 65534, 65535}, Type::kU16);
  expect_roundtrip<int32_t>(f, "i32", {std::numeric_limits<int32_t>::min(), -1, 0, 1, 65536,
                                       std::numeric_limits<int32_t>::max()},
                            Type::kI32);
  expect_roundtrip<int64_t>(f, "i64", {std::numeric_limits<int64_t>::min(), -1, 0, 1, int64_t{1} << 40,
                                       std::numeric_limits<int64_t>::max()},
                            Type::kI64);
  expect_roundtrip<float>(f, "f32", {-1.5f, 0.f, 1e-30f, 3.25f, 1e30f, -0.f}, Type::kF32);
  expect_roundtrip<double>(f, "f64", {-1.5, 0., 1e-300, 3.25, 1e300, 3.141592653589793}, Type::kF64);
  // Stored narrower than in memory: HDF5 converts both ways.
  write_dataset<int32_t>(f, "narrow", {0, 7, 65535}, {3}, Type::kU16);
  EXPECT_EQ(dataset_type(f, "narrow", "t.h5"), Type::kU16);
  EXPECT_EQ(read_dataset<int32_t>(f, "narrow", "t.h5"), (std::vector<int32_t>{0, 7, 65535}));
  EXPECT_EQ(read_dataset<int64_t>(f, "narrow", "t.h5"), (std::vector<int64_t>{0, 7, 65535}));
  // Stored types that Type lacks report the narrowest type that holds their values, and read so.
  auto raw = [&](const char* path, hid_t type, const void* values) {
    const hsize_t n = 3;
    Handle space(H5Screate_simple(1, &n, nullptr));
    Handle ds(H5Dcreate2(f, path, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_GE(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
  };
  const int8_t i8[] = {-128, -1, 127};
  const int16_t i16[] = {-32768, -1, 32767};
  const uint32_t u32[] = {0, 1, 4294967295u};
  raw("i8", H5T_NATIVE_INT8, i8);
  raw("i16", H5T_NATIVE_INT16, i16);
  raw("u32", H5T_NATIVE_UINT32, u32);
  EXPECT_EQ(dataset_type(f, "i8", "t.h5"), Type::kI32);
  EXPECT_EQ(dataset_type(f, "i16", "t.h5"), Type::kI32);
  EXPECT_EQ(dataset_type(f, "u32", "t.h5"), Type::kI64);
  EXPECT_EQ(read_dataset<int32_t>(f, "i8", "t.h5"), (std::vector<int32_t>{-128, -1, 127}));
  EXPECT_EQ(read_dataset<int32_t>(f, "i16", "t.h5"), (std::vector<int32_t>{-32768, -1, 32767}));
  EXPECT_EQ(read_dataset<int64_t>(f, "u32", "t.h5"), (std::vector<int64_t>{0, 1, 4294967295}));
  // Empty and rewritten datasets.
  write_dataset<int32_t>(f, "empty", {}, {0}, Type::kI32);
  EXPECT_TRUE(read_dataset<int32_t>(f, "empty", "t.h5").empty());
  write_dataset<int32_t>(f, "empty", {5}, {1}, Type::kI32);
  EXPECT_EQ(read_dataset<int32_t>(f, "empty", "t.h5"), std::vector<int32_t>{5});
  f.close();
  // Everything is still there after reopening the file.
  File g = File::open(dir.file("t.h5"), "a test file");
  EXPECT_EQ(read_dataset<uint16_t>(g, "u16", "t.h5"), (std::vector<uint16_t>{0, 1, 256, 32768, 65534, 65535}));
  EXPECT_EQ(read_dataset<double>(g, "f64", "t.h5")[5], 3.141592653589793);
}

TEST(H5, AttributesOfEveryType) {
  TempDir dir;
  File f = File::create(dir.file("a.h5"), "a.h5");
  Handle g = create_group(f, "grp");
  write_dataset<int32_t>(f, "grp/ds", {1, 2}, {2}, Type::kI32);
  Handle ds(H5Dopen2(f, "grp/ds", H5P_DEFAULT));
  for (hid_t obj : {f.id(), g.id(), ds.id()}) {
    write_attr(obj, "s", std::string("caf\xc3\xa9 {\"json\": [1, 2]}"));
    write_attr(obj, "empty", std::string());
    write_attr(obj, "i", int64_t{-1234567890123});
    write_attr(obj, "d", 0.125);
    EXPECT_TRUE(has_attr(obj, "s"));
    EXPECT_FALSE(has_attr(obj, "nope"));
    EXPECT_EQ(read_attr_string(obj, "s"), std::string("caf\xc3\xa9 {\"json\": [1, 2]}"));
    EXPECT_EQ(read_attr_string(obj, "empty"), std::string());
    EXPECT_EQ(read_attr_int(obj, "i"), int64_t{-1234567890123});
    EXPECT_EQ(read_attr_double(obj, "d"), 0.125);
    EXPECT_EQ(read_attr_string(obj, "nope"), std::nullopt);
    EXPECT_EQ(read_attr_int(obj, "nope"), std::nullopt);
    EXPECT_EQ(read_attr_double(obj, "nope"), std::nullopt);
    EXPECT_EQ(read_attr_string(obj, "i"), std::nullopt);  // not a string
    EXPECT_EQ(read_attr_double(obj, "i"), -1234567890123.0);  // integers convert to double
    // Rewriting replaces the value, also with another type.
    write_attr(obj, "i", int64_t{7});
    EXPECT_EQ(read_attr_int(obj, "i"), 7);
    write_attr(obj, "d", std::string("now a string"));
    EXPECT_EQ(read_attr_string(obj, "d"), std::string("now a string"));
  }
  // A long JSON attribute, and one beyond the 64 KiB of an object header (a long validation
  // history): fixed-length strings, which files on disk keep in dense attribute storage.
  std::string json(20000, 'x'), longer(300000, 'y');
  write_attr(f, "long", json);
  EXPECT_EQ(read_attr_string(f, "long"), json);
  write_attr(f, "longer", longer);
  EXPECT_EQ(read_attr_string(f, "longer"), longer);
  // Variable-length strings (xl 0.2, h5py) are refused unless trusted.
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, H5T_VARIABLE);
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr(H5Acreate2(f, "vl", type, space, H5P_DEFAULT, H5P_DEFAULT));
  const char* text = "old";
  ASSERT_GE(H5Awrite(attr, type, &text), 0);
  EXPECT_THROW(read_attr_string(f, "vl"), xl::Error);
  trust_variable_length_strings(true);
  EXPECT_EQ(read_attr_string(f, "vl"), std::string("old"));
  trust_variable_length_strings(false);
}

TEST(H5, GroupsExistAndList) {
  TempDir dir;
  File f = File::create(dir.file("g.h5"), "g.h5");
  create_group(f, "a/b/c");
  create_group(f, "a/b/c");  // again: opens it
  create_group(f, "a/x");
  EXPECT_TRUE(exists(f, "a"));
  EXPECT_TRUE(exists(f, "a/b/c"));
  EXPECT_TRUE(exists(f, "/a/b"));
  EXPECT_FALSE(exists(f, "a/y"));
  EXPECT_FALSE(exists(f, "a/y/z"));  // a missing parent is no error
  EXPECT_EQ(list(f, "a"), (std::vector<std::string>{"b", "x"}));
  EXPECT_TRUE(list(f, "nope").empty());
  std::string what;
  EXPECT_EQ(error_code([&] { open_group(f, "nope/deeper", "g.h5"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("g.h5"), std::string::npos);
  EXPECT_NE(what.find("nope/deeper"), std::string::npos);
  EXPECT_EQ(error_code([&] { dataset_dims(f, "a/none", "g.h5"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("a/none"), std::string::npos);
  EXPECT_EQ(error_code([&] { read_dataset<int32_t>(f, "a/none", "g.h5"); }), xl::kExitDataErr);
}

TEST(H5, ChunkedCompressedExtendibleAndSlices) {
  TempDir dir;
  File f = File::create(dir.file("c.h5"), "c.h5");
  std::vector<int32_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % 60000);
  DatasetOptions opts;
  opts.chunk = {256};
  opts.extendible = true;
  opts.compress = true;
  write_dataset(f, "ids", ids, {ids.size()}, Type::kU16, opts);
  Layout l = layout_of(f, "ids");
  EXPECT_EQ(l.chunk, 256u);
  EXPECT_EQ(l.filters, 2);  // shuffle + deflate
  EXPECT_EQ(l.maxdim, H5S_UNLIMITED);
  EXPECT_EQ(read_dataset<int32_t>(f, "ids", "c.h5"), ids);
  std::vector<int32_t> slice(50);
  read_slice_raw(f, "ids", 300, 50, slice.data(), Type::kI32, "c.h5");
  EXPECT_EQ(slice, std::vector<int32_t>(ids.begin() + 300, ids.begin() + 350));
  // A fixed-size chunked dataset smaller than its chunk gets a chunk of its own size.
  DatasetOptions small;
  small.chunk = {1 << 18};
  write_dataset<int32_t>(f, "small", {1, 2, 3}, {3}, Type::kI32, small);
  EXPECT_EQ(layout_of(f, "small").chunk, 3u);
  EXPECT_EQ(layout_of(f, "small").maxdim, 3u);
}

TEST(H5, MemoryFileImageRoundTrip) {
  File mem = File::create("", "<memory>");
  std::vector<int64_t> values{1, -2, 3, -4};
  write_dataset(mem, "grp/values", values, {4}, Type::kI64);
  write_attr(mem, "note", std::string("in memory"));
  DatasetOptions opts;
  opts.chunk = {2};
  opts.extendible = true;
  write_dataset<int32_t>(mem, "chunked", {5, 6, 7}, {3}, Type::kU16, opts);
  std::string image = mem.image();
  EXPECT_TRUE(has_hdf5_signature(image));
  // The File keeps the bytes it reads in place: the caller's copy is gone before the reads.
  File back = File::open_image(std::string(image), "<image>", "a test file");
  EXPECT_EQ(back.name(), "<image>");
  EXPECT_EQ(read_dataset<int64_t>(back, "grp/values", "<image>"), values);
  EXPECT_EQ(read_dataset<int32_t>(back, "chunked", "<image>"), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(read_attr_string(back, "note"), std::string("in memory"));
  // The image is a complete file: written to disk it opens like any other.
  TempDir dir;
  write_file(dir.file("img.h5"), image);
  File disk = File::open(dir.file("img.h5"), "a test file");
  EXPECT_EQ(read_dataset<int64_t>(disk, "grp/values", "img.h5"), values);
}

TEST(H5, OpenRefusesMissingTextEmptyAndTruncatedInput) {
  TempDir dir;
  std::string what;
  EXPECT_EQ(error_code([&] { File::open(dir.file("missing.h5"), "x"); }, &what), xl::kExitNoInput);
  EXPECT_NE(what.find("missing.h5"), std::string::npos);
  write_file(dir.file("text.txt"), "just some text\n");
  EXPECT_EQ(error_code([&] { File::open(dir.file("text.txt"), "an xl tokens file"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("text.txt"), std::string::npos);
  EXPECT_NE(what.find("not an HDF5 file"), std::string::npos);
  EXPECT_NE(what.find("an xl tokens file"), std::string::npos);
  EXPECT_EQ(error_code([&] { File::open_image("", "<stdin>", "x"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("<stdin>"), std::string::npos);
  EXPECT_EQ(error_code([&] { File::open_image("hello", "<stdin>", "x"); }), xl::kExitDataErr);
  EXPECT_FALSE(has_hdf5_signature("\x89HDF\r\n\x1a"));
  EXPECT_FALSE(has_hdf5_signature(""));

  File mem = File::create("", "<memory>");
  std::vector<int32_t> big(100000, 9);
  write_dataset(mem, "big", big, {big.size()}, Type::kI32);
  std::string image = mem.image();
  for (size_t cut : {size_t{8}, size_t{100}, image.size() / 2, image.size() - 1}) {
    std::string part = image.substr(0, cut);
    write_file(dir.file("trunc.h5"), part);
    EXPECT_EQ(error_code([&] { File::open(dir.file("trunc.h5"), "x"); }, &what), xl::kExitDataErr) << cut;
    EXPECT_NE(what.find("trunc.h5"), std::string::npos);
    EXPECT_EQ(error_code([&] {
                File f = File::open_image(part, "<stdin>", "x");
                read_dataset<int32_t>(f, "big", "<stdin>");
              }),
              xl::kExitDataErr)
        << cut;
  }
}

TEST(H5, OutputFileIsAtomic) {
  TempDir dir;
  const std::string path = dir.file("out.h5");
  {
    OutputFile out(path, false);
    write_attr(out.file(), "k", std::string("v"));
    EXPECT_FALSE(fs::exists(path));  // only the temp file exists until commit
    EXPECT_EQ(dir.entries().size(), 1u);
    out.commit();
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.h5"});
  EXPECT_EQ(read_attr_string(File::open(path, "x"), "k"), std::string("v"));
  // Existing output: refused without force, replaced with it.
  EXPECT_EQ(error_code([&] { OutputFile again(path, false); }), xl::kExitCantCreat);
  {
    OutputFile again(path, true);
    write_attr(again.file(), "k", std::string("w"));
    // Not committed (an error happened): the old file stays and the temp file goes.
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.h5"});
  EXPECT_EQ(read_attr_string(File::open(path, "x"), "k"), std::string("v"));
  EXPECT_EQ(error_code([&] { OutputFile bad(dir.file("no/such/dir.h5"), false); }), xl::kExitCantCreat);
}

TEST(TokensFile, ByteVocabIsStoredAsUint16WithEverything) {
  TempDir dir;
  const std::string path = dir.file("tok.h5");
  auto vocab = byte_vocab();
  std::vector<int32_t> train{104, 101, 108, 108, 111, 0, 255}, valid{32}, test{};
  {
    OutputFile out(path, false);
    write_tokens(out.file(), vocab, {split("train", train), split("valid", valid), split("test", test)}, meta());
    out.commit();
  }
  TokensFile t = TokensFile::open(path);
  EXPECT_EQ(t.name(), path);
  EXPECT_EQ(t.split_names(), (std::vector<std::string>{"train", "valid", "test"}));
  EXPECT_TRUE(t.has_split("valid"));
  EXPECT_FALSE(t.has_split("dev"));
  EXPECT_EQ(t.split_length("train"), 7);
  EXPECT_EQ(t.split_length("test"), 0);
  EXPECT_EQ(t.read_split("train"), train);
  EXPECT_EQ(t.read_split("valid"), valid);
  EXPECT_TRUE(t.read_split("test").empty());
  EXPECT_EQ(t.vocab().pieces(), vocab.pieces());
  EXPECT_EQ(t.vocab().counts(), vocab.counts());
  EXPECT_EQ(t.vocab().sha256(), vocab.sha256());
  EXPECT_EQ(t.attr("xl_format"), "xl-tokens");
  EXPECT_EQ(t.attr_int("xl_format_version"), 1);
  EXPECT_EQ(t.attr("vocab_sha256"), vocab.sha256());
  EXPECT_EQ(t.attr_int("vocab_size"), 256);
  EXPECT_EQ(t.attr("vocab_type"), "byte");
  EXPECT_EQ(t.attr("created_by"), "h5_test");
  EXPECT_EQ(t.attr("command_line"), "h5_test --flag");
  EXPECT_EQ(t.attr("source_sha256"), std::string(64, 'b'));
  EXPECT_EQ(t.attr_int("source_bytes"), 42);
  EXPECT_EQ(t.attr("created_utc").size(), 20u);  // 2024-01-02T03:04:05Z
  EXPECT_EQ(t.attr("no_such_attr"), "");
  EXPECT_EQ(t.attr_int("no_such_attr"), -1);
  SplitSource src = t.split_source("train");
  EXPECT_EQ(src.name, "train.txt");
  EXPECT_EQ(src.bytes, 7);
  EXPECT_EQ(src.unknown, 3);
  EXPECT_EQ(src.sha256, std::string(64, 'a'));

  // The documented layout (man 5 xl-tokens).
  File f = File::open(path, "x");
  EXPECT_EQ(dataset_type(f, "splits/train", path), Type::kU16);
  Layout l = layout_of(f, "splits/train");
  EXPECT_EQ(l.chunk, hsize_t{1} << 18);
  EXPECT_EQ(l.maxdim, H5S_UNLIMITED);
  EXPECT_EQ(l.filters, 0);
  EXPECT_EQ(dataset_type(f, "vocab/piece_bytes", path), Type::kU8);
  EXPECT_EQ(dataset_dims(f, "vocab/piece_offsets", path), std::vector<hsize_t>{257});
  EXPECT_EQ(dataset_dims(f, "vocab/counts", path), std::vector<hsize_t>{256});
  Handle v = open_group(f, "vocab", path);
  EXPECT_EQ(read_attr_string(v, "type"), std::string("byte"));
  EXPECT_EQ(read_attr_int(v, "size"), 256);
  EXPECT_EQ(read_attr_int(v, "specials"), 0);
  EXPECT_EQ(read_attr_string(v, "sha256"), vocab.sha256());
}

TEST(TokensFile, LargeVocabIsStoredAsInt32AndTheLimitIsInclusive) {
  TempDir dir;
  for (size_t v : {size_t{65535}, size_t{65536}, size_t{70000}}) {
    auto vocab = word_vocab(v);
    std::vector<int32_t> ids{0, 1, 2, static_cast<int32_t>(v - 2), static_cast<int32_t>(v - 1)};
    File mem = File::create("", "<memory>");
    write_tokens(mem, vocab, {split("train", ids)}, meta());
    const std::string path = dir.file("v" + std::to_string(v) + ".h5");
    write_file(path, mem.image());
    TokensFile t = TokensFile::open(path);
    EXPECT_EQ(t.read_split("train"), ids) << v;
    EXPECT_EQ(t.vocab().size(), v);
    EXPECT_EQ(t.vocab().find("w" + std::to_string(v - 1)), static_cast<int32_t>(v - 1));
    File f = File::open(path, "x");
    EXPECT_EQ(dataset_type(f, "splits/train", path), v <= 65535 ? Type::kU16 : Type::kI32) << v;
  }
}

// One flipped bit in a split's stored ids (found in the file's bytes by their pattern) is refused
// where the split is read and by verify_checksums, naming the dataset; uint16 and int32 splits.
TEST(TokensFile, AFlippedBitInASplitIsRefused) {
  TempDir dir;
  for (size_t v : {size_t{1000}, size_t{70000}}) {
    auto vocab = word_vocab(v);
    std::vector<int32_t> ids(500);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37) % v);
    File mem = File::create("", "<memory>");
    write_tokens(mem, vocab, {split("train", ids)}, meta());
    std::string image = mem.image();
    std::string stored;
    for (int32_t id : ids) {
      const uint32_t u = static_cast<uint32_t>(id);
      for (size_t b = 0; b < (v <= 65535 ? 2u : 4u); ++b) stored.push_back(static_cast<char>((u >> (8 * b)) & 0xff));
    }
    const size_t at = image.find(stored);
    ASSERT_NE(at, std::string::npos) << v;
    const std::string path = dir.file("t" + std::to_string(v) + ".h5");
    write_file(path, image);
    EXPECT_EQ(TokensFile::open(path).read_split("train"), ids) << v;
    EXPECT_EQ(verify_checksums(File::open(path, "x")).unchecked, 0) << v;
    image[at + stored.size() / 2] ^= 0x10;
    write_file(path, image);
    TokensFile t = TokensFile::open(path);
    std::string what;
    EXPECT_EQ(error_code([&] { t.read_split("train"); }, &what), xl::kExitDataErr) << v;
    EXPECT_NE(what.find(path + ": corrupt dataset /splits/train"), std::string::npos) << what;
    EXPECT_EQ(error_code([&] { verify_checksums(File::open(path, "x")); }, &what), xl::kExitDataErr) << v;
    EXPECT_NE(what.find("corrupt dataset /splits/train"), std::string::npos) << what;
  }
}

TEST(TokensFile, CompressedSplitsReadTheSame) {
  TempDir dir;
  auto vocab = word_vocab(1000);
  std::vector<int32_t> ids(300000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 997);
  TokensMeta m = meta();
  m.compress = true;
  File mem = File::create("", "<memory>");
  write_tokens(mem, vocab, {split("train", ids)}, m);
  write_file(dir.file("z.h5"), mem.image());
  EXPECT_EQ(TokensFile::open(dir.file("z.h5")).read_split("train"), ids);
  File f = File::open(dir.file("z.h5"), "x");
  EXPECT_EQ(layout_of(f, "splits/train").filters, 2);
}

TEST(TokensFile, MissingSplitNamesTheFileAndTheSplitsItHas) {
  TempDir dir;
  const std::string path = dir.file("two.h5");
  File mem = File::create("", "<memory>");
  write_tokens(mem, byte_vocab(), {split("valid", {1}), split("train", {2, 3})}, meta());
  write_file(path, mem.image());
  TokensFile t = TokensFile::open(path);
  EXPECT_EQ(t.split_names(), (std::vector<std::string>{"train", "valid"}));
  std::string what;
  EXPECT_EQ(error_code([&] { t.read_split("test"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find(path), std::string::npos) << what;
  EXPECT_NE(what.find("'test'"), std::string::npos) << what;
  EXPECT_NE(what.find("train, valid"), std::string::npos) << what;
}

TEST(TokensFile, LoadVocabTakesATsvOrTheVocabAnHdf5FileEmbeds) {
  TempDir dir;
  const auto vocab = word_vocab(6);
  write_file(dir.file("v.tsv"), vocab.to_tsv());
  {
    File f = File::create(dir.file("t.h5"), "t.h5");
    write_tokens(f, vocab, {split("train", {1, 5})}, meta());
    File plain = File::create(dir.file("plain.h5"), "plain.h5");
    write_attr(plain, "unrelated", int64_t{1});
  }
  EXPECT_EQ(load_vocab(dir.file("v.tsv")).sha256(), vocab.sha256());
  EXPECT_EQ(load_vocab(dir.file("t.h5")).sha256(), vocab.sha256());
  // The same file's bytes (what stdin or a pipe gives) are read as an image.
  EXPECT_EQ(vocab_of_bytes(xl::io::read_raw(dir.file("t.h5")), "<stdin>").sha256(), vocab.sha256());
  std::string what;
  EXPECT_EQ(error_code([&] { load_vocab(dir.file("plain.h5")); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("plain.h5: an HDF5 file without a vocab"), std::string::npos) << what;
  EXPECT_EQ(error_code([&] { vocab_of_bytes(xl::io::read_raw(dir.file("plain.h5")), "<stdin>"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("<stdin>: an HDF5 file without a vocab"), std::string::npos) << what;
}

// A word vocab's pretokenizer travels with it: in the TSV header and the HDF5 vocab group, absent
// for none (so older files read as before), outside the identity, refused (65) where unknown or
// on a type that is not words.
TEST(TokensFile, VocabsRecordTheirPretokenizer) {
  TempDir dir;
  auto moses = word_vocab(6);
  moses.set_pretokenizer(xl::text::Pretokenizer::kMoses);
  const auto plain = word_vocab(6);
  EXPECT_EQ(moses.sha256(), plain.sha256());
  EXPECT_NE(moses.to_tsv().find(" pretokenize=moses\n"), std::string::npos);
  EXPECT_EQ(plain.to_tsv().find("pretokenize"), std::string::npos);
  write_file(dir.file("v.tsv"), moses.to_tsv());
  {
    File f = File::create(dir.file("moses.h5"), "moses.h5");
    write_tokens(f, moses, {split("train", {1, 5})}, meta());
    File g = File::create(dir.file("plain.h5"), "plain.h5");
    write_tokens(g, plain, {split("train", {1, 5})}, meta());
  }
  EXPECT_EQ(load_vocab(dir.file("v.tsv")).pretokenizer(), xl::text::Pretokenizer::kMoses);
  EXPECT_EQ(TokensFile::open(dir.file("moses.h5")).vocab().pretokenizer(), xl::text::Pretokenizer::kMoses);
  EXPECT_EQ(TokensFile::open(dir.file("plain.h5")).vocab().pretokenizer(), xl::text::Pretokenizer::kNone);
  EXPECT_FALSE(has_attr(open_group(File::open(dir.file("plain.h5"), "t"), "vocab", "plain.h5"), "pretokenize"));
  std::string what;
  std::string tsv = moses.to_tsv();
  tsv.replace(tsv.find("moses"), 5, "bpe");
  EXPECT_EQ(error_code([&] { xl::text::Vocab::from_tsv(tsv, "bpe.tsv"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("bpe.tsv: unknown pretokenize 'bpe'"), std::string::npos) << what;
  EXPECT_EQ(error_code([&] { xl::text::Vocab::from_tsv("#xl-vocab 1 type=char pretokenize=moses\n0\ta\t1\n", "c.tsv"); }, &what),
            xl::kExitDataErr);
  EXPECT_NE(what.find("c.tsv: a char vocab says pretokenize=moses"), std::string::npos) << what;
  {
    File f = File::create(dir.file("bpe.h5"), "bpe.h5");
    write_tokens(f, plain, {split("train", {1})}, meta());
    write_attr(open_group(f, "vocab", "bpe.h5"), "pretokenize", std::string("bpe"));
  }
  EXPECT_EQ(error_code([&] { TokensFile::open(dir.file("bpe.h5")); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("bpe.h5: unknown pretokenize 'bpe'"), std::string::npos) << what;
}

TEST(TokensFile, RefusesOtherFilesAndBadContent) {
  TempDir dir;
  std::string what;
  // An HDF5 file that is not a tokens file.
  {
    File f = File::create(dir.file("plain.h5"), "plain.h5");
    write_attr(f, "unrelated", int64_t{1});
  }
  EXPECT_EQ(error_code([&] { TokensFile::open(dir.file("plain.h5")); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("not an xl tokens file"), std::string::npos) << what;
  {
    File f = File::create(dir.file("ckpt.h5"), "ckpt.h5");
    write_attr(f, "xl_format", std::string("xl-checkpoint"));
  }
  EXPECT_EQ(error_code([&] { TokensFile::open(dir.file("ckpt.h5")); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("xl-checkpoint"), std::string::npos) << what;
  // A newer format version.
  {
    File f = File::create(dir.file("new.h5"), "new.h5");
    write_tokens(f, byte_vocab(), {split("train", {1})}, meta());
    write_attr(f, "xl_format_version", int64_t{2});
  }
  EXPECT_EQ(error_code([&] { TokensFile::open(dir.file("new.h5")); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("newer"), std::string::npos) << what;
  // An embedded vocab that does not match its hash.
  {
    File f = File::create(dir.file("tampered.h5"), "tampered.h5");
    write_tokens(f, byte_vocab(), {split("train", {1})}, meta());
    Handle v = open_group(f, "vocab", "tampered.h5");
    write_attr(v, "sha256", std::string(64, '0'));
  }
  EXPECT_EQ(error_code([&] { TokensFile::open(dir.file("tampered.h5")); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("sha256"), std::string::npos) << what;
  // Ids outside the vocab.
  {
    File f = File::create(dir.file("range.h5"), "range.h5");
    write_tokens(f, word_vocab(10), {split("train", {1, 10})}, meta());
  }
  TokensFile t = TokensFile::open(dir.file("range.h5"));
  EXPECT_EQ(error_code([&] { t.read_split("train"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("outside its vocab"), std::string::npos) << what;
}

// Checkpoints: bit-exact round trips of every dtype and shape, configs and vocab, a module's
// parameters, atomic writing, and the refusals (exit 65 naming the file) for bad inputs.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "xl/checkpoint/checkpoint.h"
#include "xl/h5/inspect.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/model_io.h"
#include "xl/text/vocab.h"
#include "xl/util/error.h"

namespace fs = std::filesystem;
using namespace xl;
using xl::checkpoint::Checkpoint;
using xl::checkpoint::TensorList;

namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("xl-ckpt-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

text::Vocab small_vocab(const std::string& text = "hello world\n") {
  text::VocabOptions o;
  o.type = text::VocabType::kChar;
  return text::build_vocab({text}, o, "test");
}

Checkpoint minimal() {
  Checkpoint c;
  c.phase = "phase1";
  c.model_config = {{"n_layer", 2}, {"d_model", 8},  {"n_head", 2},
                    {"d_head", 4},  {"d_inner", 16}, {"vocab_size", 12}};
  c.train_config = nullptr;
  c.state.step = 1000;
  c.state.tokens_seen = 123456789012LL;
  c.vocab = small_vocab();
  c.model = {{"emb.weight", torch::arange(12 * 8, torch::kFloat).reshape({12, 8})},
             {"layers.0.attn.qkv.weight", torch::ones({24, 8})},
             {"layers.0.ln.bias", torch::zeros({8})}};
  c.optimizer = {{"step", torch::tensor(int64_t{7})}};
  c.analysis = {{"head_mask", torch::tensor({1.f, 0.f, 1.f, 1.f}).reshape({2, 2})}};
  return c;
}

// A model of width 16 (2 heads of 8, feed-forward 32) with `n_layer` layers.
xl::model::ModelConfig small_model_config(int64_t n_layer) {
  xl::model::ModelConfig cfg;
  cfg.n_layer = n_layer;
  cfg.d_model = 16;
  cfg.n_head = 2;
  cfg.d_head = 8;
  cfg.d_inner = 32;
  return cfg;
}

// Same dtype, shape and bytes (NaN payloads and -0 included).
bool bit_equal(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  if (!b.device().is_cpu()) return false;
  auto bits = [](const torch::Tensor& t) {
    torch::Tensor c = t.contiguous();
    switch (t.scalar_type()) {
      case torch::kFloat: return c.view(torch::kInt);
      case torch::kDouble: return c.view(torch::kLong);
      case torch::kHalf:
      case torch::kBFloat16: return c.view(torch::kShort);
      default: return c;
    }
  };
  return torch::equal(bits(a), bits(b));
}

void expect_list_equal(const TensorList& a, const TensorList& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first) << "at " << i;
    EXPECT_TRUE(bit_equal(a[i].second, b[i].second)) << a[i].first;
  }
}

// Runs f, expecting xl::Error with `code` and a message containing every piece of `parts`.
template <typename F>
void expect_error(F f, int code, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

// Rewrites a file's root attributes in place.
template <typename F>
void edit_root(const std::string& path, F f) {
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(id, 0);
  f(id);
  H5Fclose(id);
}

}  // namespace

TEST_F(CheckpointTest, EveryDtypeAndShapeRoundTripsBitExact) {
  Checkpoint c = minimal();
  auto f32 = torch::tensor({1.5f, -0.f, std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()});
  auto big = torch::randn({6, 5}, torch::kDouble);
  c.model = {
      // Deliberately not in name order: the stored order must come back.
      {"z.float32", f32},
      {"a.float64", big},
      {"m.int64", torch::tensor({std::numeric_limits<int64_t>::min(), int64_t{-1},
                                 std::numeric_limits<int64_t>::max()})},
      {"int32", torch::tensor({-7, 0, 2147483647}, torch::kInt)},
      {"int16", torch::tensor({-300, 5}, torch::kShort)},
      {"int8", torch::tensor({-128, 127}, torch::kChar)},
      {"uint8", torch::tensor({0, 255, 17}, torch::kByte)},
      {"bool", torch::tensor({true, false, true})},
      {"float16", torch::randn({3, 4}).to(torch::kHalf)},
      {"bfloat16", torch::randn({4, 3}).to(torch::kBFloat16)},
      {"scalar.f32", torch::tensor(3.25f)},
      {"scalar.bool", torch::tensor(true)},
      {"scalar.bf16", torch::tensor(2.5f).to(torch::kBFloat16)},
      {"empty", torch::zeros({0})},
      {"empty.3d", torch::zeros({3, 0, 2}, torch::kLong)},
      {"transposed", big.t()},  // non-contiguous
      {"sliced", big.index({torch::indexing::Slice(1, 4), 2})},  // storage offset and stride
      {"expanded", torch::arange(3, torch::kFloat).expand({4, 3})},
      {"rank4", torch::randn({2, 1, 3, 2})},
  };
  c.optimizer = {{"b.exp_avg", torch::randn({5})}, {"a.exp_avg", torch::randn({5})}};
  c.rng = {{"cpu", torch::randint(0, 256, {5056}, torch::kByte)}};
  c.memory = {{"mems.0", torch::randn({4, 2, 8})}, {"ages", torch::arange(4, torch::kLong)}};
  checkpoint::save(path("all.h5"), c, false);
  Checkpoint r = checkpoint::load(path("all.h5"));
  expect_list_equal(c.model, r.model);
  expect_list_equal(c.optimizer, r.optimizer);
  expect_list_equal(c.rng, r.rng);
  expect_list_equal(c.memory, r.memory);
  expect_list_equal(c.analysis, r.analysis);
  EXPECT_EQ(r.model[0].first, "z.float32");
  EXPECT_EQ(checkpoint::find_tensor(r.model, "scalar.f32").dim(), 0);
  EXPECT_EQ(checkpoint::find_tensor(r.model, "empty.3d").sizes(), torch::IntArrayRef({3, 0, 2}));
  EXPECT_TRUE(checkpoint::find_tensor(r.model, "transposed").is_contiguous());
  EXPECT_FALSE(checkpoint::find_tensor(r.model, "absent").defined());
}

TEST_F(CheckpointTest, ConfigsStateAndVocabRoundTrip) {
  Checkpoint c = minimal();
  c.phase = "pruned";
  c.model_config["note"] = "caf\xc3\xa9 \"quoted\"\n";
  c.model_config["pruned_heads"] = {{0, 1}, {1, 0}};
  c.train_config = {{"lr", 2.5e-4}, {"schedule", {{"type", "cosine"}, {"warmup", 100}}}};
  c.state.epoch = 2;
  c.state.offset = 77;
  c.state.best_loss = 1.0625;
  c.state.best_step = 900;
  c.state.history = {{500, 1.5}, {900, 1.0625}};
  c.state.phases = {{"phase1", 0, 0, 12.5, {{"kind", "cosine"}, {"steps", 4000}}}, {"phase2", 800, 9000, 3.25, nullptr}};
  c.state.train_data = checkpoint::TrainData{"2b49720ec4d78c3c", 90000000};
  c.vocab = small_vocab("abc\tdef\n\xc3\xa9\xc3\xa9");
  checkpoint::save(path("c.h5"), c, false);
  Checkpoint r = checkpoint::load(path("c.h5"), {c.vocab.sha256(), "t.h5"});
  EXPECT_EQ(r.phase, "pruned");
  EXPECT_EQ(r.model_config, c.model_config);
  EXPECT_EQ(r.train_config, c.train_config);
  EXPECT_EQ(r.state.to_json(), c.state.to_json());
  ASSERT_TRUE(r.state.train_data.has_value());
  EXPECT_EQ(*r.state.train_data, *c.state.train_data);
  EXPECT_EQ(r.vocab.sha256(), c.vocab.sha256());
  EXPECT_EQ(r.vocab.pieces(), c.vocab.pieces());
  EXPECT_EQ(r.vocab.counts(), c.vocab.counts());

  // A null train_config and empty groups come back as such.
  Checkpoint bare;
  bare.phase = "imported";
  bare.model_config = {{"n_layer", 1}};
  checkpoint::save(path("bare.h5"), bare, false);
  Checkpoint rb = checkpoint::load(path("bare.h5"));
  EXPECT_TRUE(rb.train_config.is_null());
  EXPECT_TRUE(rb.model.empty());
  EXPECT_EQ(rb.vocab.size(), 0u);
}

TEST_F(CheckpointTest, ModuleParametersLoadIntoAFreshModule) {
  torch::manual_seed(1);
  auto make = [] {
    return torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::ReLU(), torch::nn::Linear(16, 3));
  };
  auto a = make();
  Checkpoint c = minimal();
  c.model.clear();
  for (const auto& p : a->named_parameters()) c.model.emplace_back(p.key(), p.value());
  checkpoint::save(path("m.h5"), c, false);

  auto b = make();  // different random init
  Checkpoint r = checkpoint::load(path("m.h5"));
  ASSERT_EQ(r.model.size(), a->named_parameters().size());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : b->named_parameters()) {
      torch::Tensor t = checkpoint::find_tensor(r.model, p.key());
      ASSERT_TRUE(t.defined()) << p.key();
      p.value().copy_(t);
    }
  }
  auto x = torch::randn({5, 6});
  EXPECT_TRUE(torch::equal(a->forward(x), b->forward(x)));
}

// load_model reads a model's weights from the file straight into the model it builds: the same
// values as checkpoint::load's tensors (an adaptive model, so embeddings, projections, clusters and
// layers all come in), the other groups as load reads them, and the same refusals as
// model_from_checkpoint for a checkpoint that does not fit its config.
TEST_F(CheckpointTest, LoadModelReadsTheWeightsStraightIntoTheModel) {
  xl::model::ModelConfig cfg = small_model_config(2);
  cfg.n_token = 40;
  cfg.cutoffs = {10, 25};
  cfg.div_val = 2;
  xl::model::TransformerXL model(cfg, 7);
  Checkpoint c = minimal();
  c.model = xl::model::model_tensors(model);
  c.model_config = cfg.to_json();
  const std::string p = path("model.h5");
  checkpoint::save(p, c, false);

  const Checkpoint read = checkpoint::load(p);
  auto [loaded, built] = xl::model::load_model(p, {c.vocab.sha256(), "t.h5"});
  EXPECT_TRUE(loaded.model.empty());  // the weights live in the model alone
  EXPECT_TRUE(loaded.optimizer.empty());
  EXPECT_TRUE(bit_equal(xl::model::head_mask_of(loaded), xl::model::head_mask_of(read)));
  EXPECT_EQ(loaded.state.step, 1000);
  EXPECT_EQ(loaded.vocab.sha256(), c.vocab.sha256());
  EXPECT_FALSE(built->is_training());
  const TensorList weights = xl::model::model_tensors(built);
  ASSERT_EQ(weights.size(), read.model.size());
  for (const auto& [name, t] : weights) {
    const torch::Tensor want = checkpoint::find_tensor(read.model, name);
    ASSERT_TRUE(want.defined()) << name;
    EXPECT_TRUE(bit_equal(t, want)) << name;
  }
  EXPECT_EQ(xl::model::load_model(p, {}, true).ckpt.optimizer.size(), 1u);
  expect_error([&] { xl::model::load_model(p, {std::string(64, '0'), "t.h5"}); }, kExitDataErr, {p, "vocab mismatch"});

  // Stored in another dtype: converted, as copying into the model converts.
  Checkpoint wide = c;
  wide.model[0].second = wide.model[0].second.to(torch::kDouble) / 3;
  checkpoint::save(path("wide.h5"), wide, false);
  const TensorList widened = xl::model::model_tensors(xl::model::load_model(path("wide.h5")).model);
  EXPECT_TRUE(bit_equal(widened[0].second, wide.model[0].second.to(torch::kFloat)));

  // The refusals: a tensor missing, of another shape, or left over; a config the tensors cannot fill.
  const std::string first = c.model[0].first;
  Checkpoint lacking = c;
  lacking.model.erase(lacking.model.begin());
  checkpoint::save(path("lacking.h5"), lacking, false);
  expect_error([&] { xl::model::load_model(path("lacking.h5")); }, kExitDataErr,
               {path("lacking.h5"), "lacks tensor '" + first + "'"});
  Checkpoint reshaped = c;
  reshaped.model[0].second = reshaped.model[0].second.reshape({-1});
  checkpoint::save(path("reshaped.h5"), reshaped, false);
  expect_error([&] { xl::model::load_model(path("reshaped.h5")); }, kExitDataErr,
               {path("reshaped.h5"), "'" + first + "' has shape", "the model expects"});
  Checkpoint extra = c;
  extra.model.emplace_back("stray.weight", torch::zeros({2}));
  checkpoint::save(path("extra.h5"), extra, false);
  expect_error([&] { xl::model::load_model(path("extra.h5")); }, kExitDataErr,
               {path("extra.h5"), "'stray.weight' that the model does not"});
  Checkpoint huge = c;
  huge.model_config["n_layer"] = 100000;
  checkpoint::save(path("huge.h5"), huge, false);
  expect_error([&] { xl::model::load_model(path("huge.h5")); }, kExitDataErr,
               {path("huge.h5"), "its model config needs at least"});
}

TEST_F(CheckpointTest, WritesAtomicallyAndRefusesToOverwrite) {
  Checkpoint c = minimal();
  const std::string p = path("ckpt.h5");
  checkpoint::save(p, c, false);
  expect_error([&] { checkpoint::save(p, c, false); }, kExitCantCreat, {p, "already exists"});
  c.state.step = 2000;
  checkpoint::save(p, c, /*force=*/true);
  EXPECT_EQ(checkpoint::load(p).state.step, 2000);
  // A bad tensor list fails before anything is created.
  Checkpoint bad = minimal();
  bad.model.emplace_back("emb.weight", torch::ones({1}));
  expect_error([&] { checkpoint::save(path("bad.h5"), bad, false); }, kExitSoftware,
               {"duplicate tensor /model/emb.weight"});
  EXPECT_FALSE(fs::exists(path("bad.h5")));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST_F(CheckpointTest, StdoutGetsTheFileImage) {
  Checkpoint c = minimal();
  const std::string p = path("piped.h5");
  std::fflush(stdout);
  int saved = ::dup(1);
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ::dup2(fd, 1);
  ::close(fd);
  try {
    checkpoint::save("-", c, false);
  } catch (...) {
    ::dup2(saved, 1);
    ::close(saved);
    throw;
  }
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  Checkpoint r = checkpoint::load(p);
  expect_list_equal(c.model, r.model);
  EXPECT_EQ(r.state.to_json(), c.state.to_json());
}

TEST_F(CheckpointTest, RefusesBadInputsWithOneLineNamingTheFile) {
  Checkpoint c = minimal();
  const std::string good = path("good.h5");
  checkpoint::save(good, c, false);

  // Truncated to half its size.
  const std::string trunc = path("trunc.h5");
  fs::copy_file(good, trunc);
  fs::resize_file(trunc, fs::file_size(good) / 2);
  expect_error([&] { checkpoint::load(trunc); }, kExitDataErr, {trunc, "truncated or corrupt"});

  // The writer never got to `complete`.
  const std::string incomplete = path("incomplete.h5");
  fs::copy_file(good, incomplete);
  edit_root(incomplete, [](hid_t f) { ASSERT_GE(H5Adelete(f, "complete"), 0); });
  expect_error([&] { checkpoint::load(incomplete); }, kExitDataErr,
               {incomplete, "incomplete checkpoint (its writer was interrupted)"});

  // Written by a newer program.
  const std::string newer = path("newer.h5");
  fs::copy_file(good, newer);
  edit_root(newer, [](hid_t f) { h5::write_attr(f, "xl_format_version", int64_t{2}); });
  expect_error([&] { checkpoint::load(newer); }, kExitDataErr,
               {newer, "format version 2 is newer than this program reads (1)"});

  // A tokens file.
  const std::string tokens = path("tokens.h5");
  {
    h5::File f = h5::File::create(tokens, tokens);
    h5::write_tokens(f, c.vocab, {{"train", {1, 2, 3}, {}}}, {});
  }
  expect_error([&] { checkpoint::load(tokens); }, kExitDataErr,
               {tokens, "is an 'xl-tokens' file, not an xl checkpoint"});

  // Tokens made with another vocab.
  const std::string other = small_vocab("something else entirely").sha256();
  expect_error([&] { checkpoint::load(good, {other, "other.h5"}); }, kExitDataErr,
               {good, "vocab mismatch: trained on vocab " + c.vocab.sha256().substr(0, 12) + ", but other.h5 holds vocab " +
                          other.substr(0, 12) + " (tokenize the text with this model's: xl-tokenize --vocab " + good + ")"});
  EXPECT_NO_THROW(checkpoint::load(good, {c.vocab.sha256(), "t.h5"}));

  // Not HDF5 at all.
  const std::string txt = path("notes.txt");
  std::ofstream(txt) << "this is text\n";
  expect_error([&] { checkpoint::load(txt); }, kExitDataErr, {txt, "not an HDF5 file"});

  expect_error([&] { checkpoint::load(path("absent.h5")); }, kExitNoInput, {path("absent.h5")});
}

TEST_F(CheckpointTest, InspectSummarizesACheckpoint) {
  Checkpoint c = minimal();
  c.model.emplace_back("pos_emb.inv_freq", torch::ones({4}));  // stored, not a parameter
  const std::string p = path("i.h5");
  checkpoint::save(p, c, false);
  auto j = h5::describe(h5::File::open(p, "an xl HDF5 file"));
  ASSERT_TRUE(j.contains("checkpoint")) << j.dump();
  const auto& k = j["checkpoint"];
  EXPECT_EQ(k["phase"], "phase1");
  EXPECT_EQ(k["step"], 1000);
  EXPECT_EQ(k["tokens_seen"], 123456789012LL);
  EXPECT_EQ(k["complete"], true);
  EXPECT_EQ(k["parameters"], 12 * 8 + 24 * 8 + 8);  // 296
  EXPECT_EQ(k["model_config"]["d_model"], 8);
  EXPECT_EQ(k["groups"]["model"]["datasets"], 4);
  EXPECT_EQ(k["groups"]["optimizer"]["datasets"], 1);
  EXPECT_EQ(k["head_mask"], nlohmann::json::parse("[[1.0,0.0],[1.0,1.0]]"));
  std::string text = h5::describe_text(j);
  for (const char* s : {"phase1", "step 1000", "n_layer 2", "d_model 8", "parameters: 296", "/model: 4 datasets",
                        "/optimizer: 1 dataset,", "head mask [2 x 2]: 3 of 4 heads kept", "complete"})
    EXPECT_NE(text.find(s), std::string::npos) << s << "\n" << text;
}

// A crafted config may ask for a model of any size: refused (65) before anything is allocated,
// whenever it needs more parameters than the file holds.
TEST(CheckpointLimits, AConfigBiggerThanItsTensorsIsRefused) {
  const xl::model::ModelConfig cfg = small_model_config(1);
  xl::model::TransformerXL model(cfg);
  Checkpoint ckpt;
  ckpt.model = xl::model::model_tensors(model);
  ckpt.model_config = cfg.to_json();
  EXPECT_NO_THROW(xl::model::model_from_checkpoint(ckpt, "small.h5"));
  ckpt.model_config["n_layer"] = 100000;
  ckpt.model_config["d_inner"] = 1 << 20;
  try {
    xl::model::model_from_checkpoint(ckpt, "huge.h5");
    FAIL() << "a config a million times bigger than its tensors was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitDataErr);
    EXPECT_NE(std::string(e.what()).find("huge.h5"), std::string::npos) << e.what();
  }
  ckpt.model_config["d_model"] = int64_t{1} << 30;  // beyond any model's dimensions
  EXPECT_THROW(xl::model::model_from_checkpoint(ckpt, "huge.h5"), Error);
}

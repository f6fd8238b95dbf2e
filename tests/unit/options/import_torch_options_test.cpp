// xl-import-torch's options (options/import_torch_options.h): its three directions (a model in,
// a corpus in, a checkpoint out), the model flags given (the rest is read off the tensors), and
// each flag that does not apply to a direction refused with one line naming it.
#include <gtest/gtest.h>

#include "support/cli_support.h"
#include "xl/options/import_torch_options.h"

using namespace xl;
using interop::ImportDirection;
using test::Refusal;
using test::refusal;

namespace {

interop::TorchImportRequest import_request(std::vector<std::string> args) {
  cli::Options cli(cli::ToolInfo{"xl-import-torch", "", "", "", ""});
  options::add_import_torch_options(cli);
  args.insert(args.begin(), "xl-import-torch");
  test::Argv argv(args);
  EXPECT_TRUE(cli.parse(argv.argc(), argv.argv()));
  return options::torch_import_request(cli, argv.argc(), argv.argv());
}

Refusal refused(std::vector<std::string> args) {
  return refusal([&] { import_request(args); });
}

}  // namespace

TEST(ImportTorchOptions, AModelImportReadsWhatIsNotGivenOffTheTensors) {
  const interop::TorchImportRequest r = import_request({"model.pt", "--vocab", "vocab.tsv", "-o", "m.h5"});
  EXPECT_EQ(r.direction, ImportDirection::kModel);
  EXPECT_EQ(r.input, "model.pt");
  EXPECT_EQ(r.vocab, "vocab.tsv");
  EXPECT_EQ(r.output, "m.h5");
  EXPECT_FALSE(r.force);
  EXPECT_TRUE(r.verify_crc);
  EXPECT_EQ(r.key, "");
  EXPECT_EQ(r.prefix, "");
  EXPECT_EQ(r.command_line, "xl-import-torch model.pt --vocab vocab.tsv -o m.h5");
  const interop::TorchHyperParams& h = r.params;
  EXPECT_FALSE(h.n_token || h.n_layer || h.d_model || h.n_head || h.d_head || h.d_inner || h.d_embed || h.div_val ||
               h.clamp_len || h.cutoffs || h.tie_projs || h.tie_weight || h.untie_r || h.pre_lnorm || h.same_length ||
               h.dropout || h.dropatt);
  EXPECT_EQ(import_request({}).input, "-");
}

TEST(ImportTorchOptions, TheModelFlagsGivenAreCheckedAgainstTheTensors) {
  const interop::TorchImportRequest r =
      import_request({"wt103.pt", "--key", "model_state", "--prefix", "module.", "--no-verify-crc", "--n-token", "267735",
              "--n-layer", "16", "--d-model", "410", "--div-val", "4", "--cutoffs", "20000,40000,200000", "--tie-projs",
              "false,true,true,true", "--pre-lnorm", "false", "--same-length", "true", "--clamp-len", "1000", "--dropout",
              "0.1"});
  EXPECT_EQ(r.key, "model_state");
  EXPECT_EQ(r.prefix, "module.");
  EXPECT_FALSE(r.verify_crc);
  const interop::TorchHyperParams& h = r.params;
  EXPECT_EQ(h.n_token, std::optional<int64_t>(267735));
  EXPECT_EQ(h.n_layer, std::optional<int64_t>(16));
  EXPECT_EQ(h.d_model, std::optional<int64_t>(410));
  EXPECT_EQ(h.div_val, std::optional<int64_t>(4));
  EXPECT_EQ(h.cutoffs, (std::optional<std::vector<int64_t>>({20000, 40000, 200000})));
  EXPECT_EQ(h.tie_projs, (std::optional<std::vector<bool>>({false, true, true, true})));
  EXPECT_EQ(h.pre_lnorm, std::optional<bool>(false));
  EXPECT_EQ(h.same_length, std::optional<bool>(true));
  EXPECT_EQ(h.clamp_len, std::optional<int64_t>(1000));
  EXPECT_EQ(h.dropout, std::optional<double>(0.1));
  EXPECT_FALSE(h.d_head.has_value());
  EXPECT_FALSE(h.tie_weight.has_value());
  EXPECT_FALSE(h.untie_r.has_value());
  // An imported Transformer-XL has no compressed memory.
  EXPECT_EQ(refused({"m.pt", "--cmem-rate", "2"}).line.rfind("unrecognised option '--cmem-rate'", 0), 0u);
}

TEST(ImportTorchOptions, ExportTakesOnlyWhetherTheTargetHasPerLayerBiases) {
  const interop::TorchImportRequest r = import_request({"--export", "m.h5", "-o", "sd.pt", "--untie-r", "true"});
  EXPECT_EQ(r.direction, ImportDirection::kExport);
  EXPECT_EQ(r.input, "m.h5");
  EXPECT_TRUE(r.untie_r);
  EXPECT_FALSE(import_request({"--export", "m.h5", "-o", "sd.pt"}).untie_r);
  for (const char* flag : {"--vocab", "--key", "--prefix"})
    EXPECT_EQ(refused({"--export", "m.h5", flag, "x"}),
              (Refusal{64, std::string(flag) + " does not apply to --export (the checkpoint has its config)"}));
  EXPECT_EQ(refused({"--export", "m.h5", "--n-token", "5"}),
            (Refusal{64, "--n-token does not apply to --export (the checkpoint has its config)"}));
  EXPECT_EQ(refused({"--export", "m.h5", "--d-model", "8"}),
            (Refusal{64, "--d-model does not apply to --export (the checkpoint has its config)"}));
}

TEST(ImportTorchOptions, ACorpusHasNoModelSoNoModelFlags) {
  const interop::TorchImportRequest r = import_request({"--corpus", "cache.pt", "--vocab", "v.tsv", "-o", "t.h5"});
  EXPECT_EQ(r.direction, ImportDirection::kCorpus);
  EXPECT_EQ(r.input, "cache.pt");
  EXPECT_EQ(r.vocab, "v.tsv");
  EXPECT_EQ(refused({"--corpus", "cache.pt", "--key", "k"}), (Refusal{64, "--key does not apply to --corpus (a corpus has no model)"}));
  EXPECT_EQ(refused({"--corpus", "cache.pt", "--n-token", "9"}),
            (Refusal{64, "--n-token does not apply to --corpus (a corpus has no model)"}));
  EXPECT_EQ(refused({"--corpus", "cache.pt", "--d-model", "8"}),
            (Refusal{64, "model flags do not apply to --corpus (a corpus has no model)"}));
  EXPECT_EQ(refused({"--export", "--corpus", "x"}), (Refusal{64, "give --export or --corpus, not both"}));
}

TEST(ImportTorchOptions, AnOutputMayNotReplaceTheInputOrTheVocab) {
  test::TempDir dir;
  const std::string in = dir.write("model.pt", "pt"), vocab = dir.write("v.tsv", "v");
  EXPECT_EQ(refused({in, "-o", in, "-f"}),
            (Refusal{64, "--output is " + in + ", which is also INPUT: writing it would replace what is read (write to "
                         "another file)"}));
  EXPECT_EQ(refused({in, "--vocab", vocab, "-o", vocab}),
            (Refusal{64, "--output is " + vocab + ", which is also --vocab: writing it would replace what is read (write "
                         "to another file)"}));
  const std::string bad = dir.write("bad.ini", "tie-projs = false,perhaps\n");
  EXPECT_EQ(refused({in, "-c", bad}),
            (Refusal{78, bad + ": tie-projs: not a boolean: 'perhaps' (use true/false, 1/0, yes/no or on/off)"}));
}

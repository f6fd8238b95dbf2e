// The model group (options/model_options.h): a new model's defaults, the flags given recorded as
// the config's fields (they override a checkpoint's), and the one-line refusals of values and of
// combinations the model cannot make, named as the user wrote them.
#include <gtest/gtest.h>

#include <set>

#include "support/cli_support.h"
#include "xl/options/model_options.h"

using namespace xl;
using test::Refusal;
using test::refusal;

namespace {

options::GivenModel given(std::vector<std::string> args, options::ModelDefaults d = options::ModelDefaults::kShown) {
  cli::Options cli(cli::ToolInfo{"xl-train-phase1", "", "", "", ""});
  options::add_model_options(cli, d);
  args.insert(args.begin(), "xl-train-phase1");
  EXPECT_TRUE(test::parse(cli, args));
  return options::given_model(cli);
}

// The model the flags describe, checked as a training checks it.
Refusal checked(std::vector<std::string> args) {
  return refusal([&] {
    cli::Options cli(cli::ToolInfo{"xl-train-phase1", "", "", "", ""});
    options::add_model_options(cli, options::ModelDefaults::kShown);
    args.insert(args.begin(), "xl-train-phase1");
    test::parse(cli, args);
    options::given_model(cli).config.validate(cli.origins());
  });
}

}  // namespace

TEST(ModelOptions, ANewModelTakesTheDefaultsHelpShows) {
  cli::Options cli(cli::ToolInfo{"xl-train-phase1", "", "[OPTIONS] TOKENS", "", ""});
  options::add_model_options(cli, options::ModelDefaults::kShown);
  const std::string help = cli.help_text();
  for (const char* shown : {"--n-layer arg (=4)", "--d-model arg (=128)", "--n-head arg (=4)", "--d-head arg (=32)",
                            "--d-inner arg (=512)", "--dropout arg (=0.1)", "--attention arg (=rel)",
                            "--tie-weight arg (=true)", "--span-ramp arg (=32)", "--cmem-fn arg (=conv)"})
    EXPECT_NE(help.find(shown), std::string::npos) << shown << " in\n" << help;

  const options::GivenModel m = given({});
  EXPECT_TRUE(m.fields.empty());
  EXPECT_EQ(m.config.n_layer, 4);
  EXPECT_EQ(m.config.d_model, 128);
  EXPECT_EQ(m.config.n_head, 4);
  EXPECT_EQ(m.config.d_head, 32);
  EXPECT_EQ(m.config.d_inner, 512);
  EXPECT_EQ(m.config.d_embed, 0);
  EXPECT_DOUBLE_EQ(m.config.dropout, 0.1);
  EXPECT_DOUBLE_EQ(m.config.dropatt, 0);
  EXPECT_FALSE(m.config.pre_lnorm);
  EXPECT_FALSE(m.config.untie_r);
  EXPECT_TRUE(m.config.tie_weight);
  EXPECT_TRUE(m.config.cutoffs.empty());
  EXPECT_TRUE(m.config.tie_projs.empty());
  EXPECT_EQ(m.config.attention, "rel");
  EXPECT_TRUE(m.config.ff);
  EXPECT_FALSE(m.config.adaptive_span);
  EXPECT_EQ(m.config.cmem_rate, 0);
  EXPECT_EQ(m.config.cmem_fn, "conv");
}

TEST(ModelOptions, FlagsAndSettingsFilesGivenAreRecordedAsTheConfigsFields) {
  test::TempDir dir;
  const options::GivenModel m =
      given({"--n-layer", "2", "--pre-lnorm", "true", "--cutoffs", "10,20", "--tie-projs", "false,true,on", "--ff", "off",
             "--persistent-mem", "4", "--adaptive-span", "on", "-c", dir.write("m.ini", "d-model = 64\ndiv-val = 2\n")});
  EXPECT_EQ(m.fields, (std::set<std::string>{"n_layer", "pre_lnorm", "cutoffs", "tie_projs", "ff", "persistent_mem",
                                             "adaptive_span", "d_model", "div_val"}));
  EXPECT_TRUE(m.has("d_model"));
  EXPECT_FALSE(m.has("n_head"));
  EXPECT_EQ(m.config.n_layer, 2);
  EXPECT_EQ(m.config.d_model, 64);
  EXPECT_EQ(m.config.div_val, 2);
  EXPECT_TRUE(m.config.pre_lnorm);
  EXPECT_EQ(m.config.cutoffs, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(m.config.tie_projs, (std::vector<bool>{false, true, true}));
  EXPECT_FALSE(m.config.ff);
  EXPECT_EQ(m.config.persistent_mem, 4);
  EXPECT_TRUE(m.config.adaptive_span);
  EXPECT_EQ(m.config.n_head, 4);  // the default, not given
}

TEST(ModelOptions, AModelReadFromAFileTakesOnlyWhatIsGivenAndHasNoCompressedMemoryFlags) {
  const options::GivenModel none = given({}, options::ModelDefaults::kUnset);
  EXPECT_TRUE(none.fields.empty());
  const options::GivenModel some = given({"--d-head", "16", "--untie-r", "1"}, options::ModelDefaults::kUnset);
  EXPECT_EQ(some.fields, (std::set<std::string>{"d_head", "untie_r"}));
  EXPECT_EQ(some.config.d_head, 16);
  EXPECT_TRUE(some.config.untie_r);

  const Refusal cmem = refusal([] { given({"--cmem-rate", "2"}, options::ModelDefaults::kUnset); });
  EXPECT_EQ(cmem.code, 64);
  EXPECT_EQ(cmem.line.rfind("unrecognised option '--cmem-rate'", 0), 0u) << cmem.line;

  cli::Options cli(cli::ToolInfo{"xl-import-torch", "", "", "", ""});
  options::add_model_options(cli, options::ModelDefaults::kUnset);
  EXPECT_EQ(cli.help_text().find("(=4)"), std::string::npos) << "no default shown for a model read from a file";
}

TEST(ModelOptions, BadValuesAreRefusedNamingTheFlagOrTheSettingsFile) {
  EXPECT_EQ(refusal([] { given({"--cutoffs", "10,x"}); }), (Refusal{64, "--cutoffs: not a list of integers: '10,x'"}));
  EXPECT_EQ(refusal([] { given({"--tie-projs", "false,maybe"}); }),
            (Refusal{64, "--tie-projs: not a boolean: 'maybe' (use true/false, 1/0, yes/no or on/off)"}));
  EXPECT_EQ(refusal([] { given({"--n-layer", "four"}); }),
            (Refusal{64, "the argument ('four') for option '--n-layer' is invalid (see xl-train-phase1 --help)"}));
  test::TempDir dir;
  const std::string ini = dir.write("m.ini", "cutoffs = 10,,20\n");
  EXPECT_EQ(refusal([&] { given({"-c", ini}); }), (Refusal{78, ini + ": cutoffs: empty item in '10,,20'"}));
}

TEST(ModelOptions, CombinationsTheModelCannotMakeAreRefusedInTheUsersSpelling) {
  EXPECT_EQ(checked({"--n-layer", "2", "--attention", "smgk", "--adaptive-span", "on"}).code, 0);
  EXPECT_EQ(checked({"--ff", "off"}),
            (Refusal{64, "--ff can be off only with persistent-mem > 0 (the persistent vectors replace it)"}));
  EXPECT_EQ(checked({"--attention", "mgk", "--persistent-mem", "4"}),
            (Refusal{64, "--persistent-mem is not supported with MGK attention (its keys are not Gaussian mixtures)"}));
  EXPECT_EQ(checked({"--attention", "gauss"}), (Refusal{64, "--attention must be rel, mgk or smgk"}));
  EXPECT_EQ(checked({"--cmem-rate", "4", "--adaptive-span", "on"}),
            (Refusal{64, "--cmem-rate cannot go with adaptive-span, which sizes each layer's memory as it learns "
                         "(nothing would leave it in order)"}));
  EXPECT_EQ(checked({"--d-model", "33"}), (Refusal{64, "--d-model must be a positive even number (sinusoid halves)"}));
  EXPECT_EQ(checked({"--dropout", "1"}), (Refusal{64, "--dropout must be in [0, 1)"}));
  test::TempDir dir;
  const std::string ini = dir.write("m.ini", "ff = off\n");
  EXPECT_EQ(checked({"-c", ini}),
            (Refusal{78, ini + ": ff can be off only with persistent-mem > 0 (the persistent vectors replace it)"}));
}

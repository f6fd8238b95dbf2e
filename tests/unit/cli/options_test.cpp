// The command-line layer every tool shares (cli/options.h): --help and --version, settings files
// and their precedence, the one-line refusals with their exit codes (64 for the command line, 78
// for a settings file), and outputs that would replace an input.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>

#include "support/cli_support.h"
#include "xl/cli/options.h"

using namespace xl;
using test::Refusal;
using test::refusal;

namespace {

namespace po = cli::po;

// A small tool: a positional INPUT, a count, a rate, a name, a size, a duration, a list and an
// option without a default.
struct Tool {
  cli::Options cli{cli::ToolInfo{"xl-x", "does x to a file", "[OPTIONS] INPUT", "Reads INPUT.", "  xl-x in.txt"}};
  Tool() {
    cli.add("Input")("input", po::value<std::string>()->default_value("-"), "the file (- is stdin)");
    cli.add("Work")
        ("n-layer", po::value<int64_t>()->default_value(4), "layers")
        ("rate", cli::real_value(0.1), "a rate")
        ("name", po::value<std::string>()->default_value("plain"), "a name")
        ("size", po::value<std::string>()->default_value("0"), "a size (K, M, G)")
        ("time", po::value<std::string>()->default_value("0"), "a duration")
        ("list", po::value<std::string>()->default_value(""), "a list of integers")
        ("extra", po::value<int64_t>(), "no default");
    cli.positional("input", 1);
  }
  bool parse(std::vector<std::string> args) {
    args.insert(args.begin(), "xl-x");
    return test::parse(cli, args);
  }
};

Refusal parse_refusal(std::vector<std::string> args) {
  return refusal([&] { Tool().parse(args); });
}

}  // namespace

TEST(CliOptions, HelpAndVersionAnswerOnStdoutAndStopTheTool) {
  Tool help;
  testing::internal::CaptureStdout();
  EXPECT_FALSE(help.parse({"--help"}));
  const std::string text = testing::internal::GetCapturedStdout();
  EXPECT_EQ(text.rfind("Usage: xl-x [OPTIONS] INPUT\ndoes x to a file\n\nReads INPUT.\n", 0), 0u) << text;
  EXPECT_NE(text.find("\nWork:\n"), std::string::npos) << text;
  EXPECT_NE(text.find("--rate arg (=0.1)"), std::string::npos) << "a real default as written: " << text;
  EXPECT_NE(text.find("\nExamples:\n  xl-x in.txt\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Exit status: 0 success, 64 usage error"), std::string::npos) << text;
  // help2man tells an option from its description by two spaces: every described option has them.
  EXPECT_NE(text.find("--n-layer arg (=4)  "), std::string::npos) << text;

  Tool version;
  testing::internal::CaptureStdout();
  EXPECT_FALSE(version.parse({"-V"}));
  const std::string v = testing::internal::GetCapturedStdout();
  EXPECT_EQ(v.rfind("xl-x (xl-toolkit) ", 0), 0u) << v;
  EXPECT_NE(v.find("Built with LibTorch "), std::string::npos) << v;

  Tool run;
  EXPECT_TRUE(run.parse({"in.txt"}));
  EXPECT_EQ(run.cli.get<std::string>("input"), "in.txt");
}

TEST(CliOptions, LaterSettingsFilesWinAndTheCommandLineWinsOverAll) {
  test::TempDir dir;
  const std::string a = dir.write("a.ini", "n-layer = 1\nname = from-a\nrate = 0.5\n");
  const std::string b = dir.write("b.ini", "# a comment\nn-layer = 2\n");

  Tool files;
  ASSERT_TRUE(files.parse({"-c", a, "-c", b}));
  EXPECT_EQ(files.cli.get<int64_t>("n-layer"), 2);
  EXPECT_EQ(files.cli.get<std::string>("name"), "from-a");
  EXPECT_DOUBLE_EQ(files.cli.get<double>("rate"), 0.5);
  EXPECT_TRUE(files.cli.given("n-layer"));
  EXPECT_FALSE(files.cli.given("size"));
  EXPECT_EQ(files.cli.origins().name("n-layer"), b + ": n-layer");
  EXPECT_EQ(files.cli.origins().name("name"), a + ": name");

  Tool both;
  ASSERT_TRUE(both.parse({"-c", a, "--n-layer", "3", "-c", b}));
  EXPECT_EQ(both.cli.get<int64_t>("n-layer"), 3);
  EXPECT_EQ(both.cli.origins().name("n-layer"), "--n-layer");
  EXPECT_EQ(both.cli.origins().exit_code("n-layer"), 64);
  EXPECT_EQ(both.cli.origins().exit_code("name"), 78);
}

TEST(CliOptions, AnUnknownFlagIsRefusedWithTheNameMeant) {
  EXPECT_EQ(parse_refusal({"--n-layers", "2"}),
            (Refusal{64, "unrecognised option '--n-layers'; did you mean '--n-layer'? (see xl-x --help)"}));
  // A flag is taken by its whole name only, never by a prefix.
  EXPECT_EQ(parse_refusal({"--n-lay", "2"}).code, 64);
  EXPECT_EQ(parse_refusal({"--rat", "2"}).line.rfind("unrecognised option '--rat'", 0), 0u);

  test::TempDir dir;
  EXPECT_EQ(parse_refusal({"-c", dir.write("typo.ini", "n-layers = 2\n")}),
            (Refusal{78, dir.file("typo.ini") + ": unrecognised option 'n-layers'; did you mean 'n-layer'?"}));
  EXPECT_EQ(parse_refusal({"-c", dir.write("sections.ini", "[model]\nn-layer = 2\n")}),
            (Refusal{78, dir.file("sections.ini") +
                             ": 'n-layer' is under a section [model]: settings files have no sections; put it above "
                             "the first [section] line"}));
}

TEST(CliOptions, ArgumentsBeyondThePositionalOnesNameWhatTheToolTakes) {
  EXPECT_EQ(parse_refusal({"in.txt", "out.txt"}),
            (Refusal{64, "unexpected argument 'out.txt': xl-x takes one argument, INPUT; the rest are options (see xl-x "
                         "--help)"}));

  cli::Options none(cli::ToolInfo{"xl-none", "", "", "", ""});
  none.add("Work")("n", po::value<int>()->default_value(1), "n");
  EXPECT_EQ(refusal([&] { test::parse(none, {"xl-none", "stray"}); }),
            (Refusal{64, "unexpected argument 'stray': xl-none takes no arguments, only options (see xl-none --help)"}));

  cli::Options two(cli::ToolInfo{"xl-two", "", "", "", ""});
  two.add("Input")("checkpoint", po::value<std::string>(), "c")("tokens", po::value<std::string>(), "t");
  two.positional("checkpoint", 1);
  two.positional("tokens", 1);
  EXPECT_EQ(refusal([&] { test::parse(two, {"xl-two", "c.h5", "t.h5", "u.h5"}); }),
            (Refusal{64, "unexpected argument 'u.h5': xl-two takes 2 arguments, CHECKPOINT and TOKENS; the rest are "
                         "options (see xl-two --help)"}));
}

TEST(CliOptions, BadValuesAndSettingsFilesAreRefusedWithOneLine) {
  EXPECT_EQ(parse_refusal({"--n-layer", "four"}),
            (Refusal{64, "the argument ('four') for option '--n-layer' is invalid (see xl-x --help)"}));
  // Boost reads nan and inf as numbers; no setting means either.
  EXPECT_EQ(parse_refusal({"--rate", "nan"}), (Refusal{64, "--rate must be a finite number, not nan"}));
  EXPECT_EQ(parse_refusal({"--rate=-inf"}), (Refusal{64, "--rate must be a finite number, not -inf"}));

  test::TempDir dir;
  const std::string missing = dir.file("missing.ini");
  EXPECT_EQ(parse_refusal({"-c", missing}), (Refusal{66, missing + ": cannot open config file"}));
  const std::string percent = dir.write("percent.ini", "name = 50%done%\n");
  EXPECT_EQ(parse_refusal({"-c", percent}), (Refusal{78, percent + ":1: '%done%': % pairs are not allowed in settings"}));
  const std::string nan = dir.write("nan.ini", "rate = nan\n");
  EXPECT_EQ(parse_refusal({"-c", nan}), (Refusal{78, nan + ": rate must be a finite number, not nan"}));
  // What a comment says is not a setting.
  Tool commented;
  EXPECT_TRUE(commented.parse({"-c", dir.write("comment.ini", "name = x # 100% sure, 5% less\n")}));
  EXPECT_EQ(commented.cli.get<std::string>("name"), "x");
}

TEST(CliOptions, AFailureNamesWhereTheValueCameFrom) {
  test::TempDir dir;
  const std::string ini = dir.write("t.ini", "name = odd\n");
  Tool tool;
  ASSERT_TRUE(tool.parse({"-c", ini, "--n-layer", "3"}));
  EXPECT_EQ(refusal([&] { tool.cli.fail("n-layer", "must be even"); }), (Refusal{64, "--n-layer must be even"}));
  EXPECT_EQ(refusal([&] { tool.cli.fail("name", "must be even"); }), (Refusal{78, ini + ": name must be even"}));
  EXPECT_EQ(refusal([&] { tool.cli.fail("rate", "must be even"); }), (Refusal{78, "settings: rate must be even"}));
}

TEST(CliOptions, SizesDurationsAndListsAreReadWithTheirUnits) {
  Tool tool;
  ASSERT_TRUE(tool.parse({"--size", "90M", "--time", "1h30m", "--list", "20000, 40000,200000"}));
  EXPECT_EQ(tool.cli.count("size"), 90000000u);
  EXPECT_DOUBLE_EQ(tool.cli.duration("time"), 5400);
  EXPECT_EQ(tool.cli.int_list("list"), (std::vector<int64_t>{20000, 40000, 200000}));
  EXPECT_FALSE(tool.cli.has("extra"));
  EXPECT_EQ(tool.cli.get_or<int64_t>("extra", 7), 7);
  EXPECT_EQ(tool.cli.get_optional<int64_t>("extra"), std::nullopt);

  Tool bad;
  ASSERT_TRUE(bad.parse({"--size", "5X", "--time", "1h30", "--list", "1,,2", "--extra", "9"}));
  EXPECT_EQ(bad.cli.get_optional<int64_t>("extra"), std::optional<int64_t>(9));
  EXPECT_EQ(refusal([&] { bad.cli.count("size"); }), (Refusal{64, "--size: bad size suffix in '5X' (use K, M or G)"}));
  EXPECT_EQ(refusal([&] { bad.cli.duration("time"); }),
            (Refusal{64, "--time: not a duration: '1h30' (use e.g. 90s, 15m, 2h, 1h30m)"}));
  EXPECT_EQ(refusal([&] { bad.cli.int_list("list"); }), (Refusal{64, "--list: empty item in '1,,2'"}));

  test::TempDir dir;
  const std::string ini = dir.write("size.ini", "size = lots\n");
  Tool from_file;
  ASSERT_TRUE(from_file.parse({"-c", ini}));
  EXPECT_EQ(refusal([&] { from_file.cli.count("size"); }), (Refusal{78, ini + ": size: not a number: 'lots'"}));
}

TEST(CliOptions, DumpConfigPrintsTheEffectiveSettingsAsIni) {
  test::TempDir dir;
  Tool tool;
  testing::internal::CaptureStdout();
  EXPECT_FALSE(tool.parse({"--dump-config", "-c", dir.write("a.ini", "name = filed\n"), "--n-layer", "6", "in.txt"}));
  EXPECT_EQ(testing::internal::GetCapturedStdout(),
            "# xl-x effective settings (defaults, config files, command line)\n"
            "n-layer = 6\nrate = 0.1\nname = filed\nsize = 0\ntime = 0\nlist = \n");
}

TEST(CliOptions, AnOutputThatWouldReplaceAnInputOrAnotherOutputIsRefusedEvenWithForce) {
  test::TempDir dir;
  const std::string in = dir.write("in.txt", "text\n");
  auto tool = [] {
    auto t = std::make_unique<Tool>();
    t->cli.add("Output")("log", po::value<std::string>(), "a log");
    t->cli.add_output("the result");
    t->cli.files({"input"}, {"log"});
    t->cli.output_beside("the best one", [](const std::string& o) { return o == "-" ? "" : o + ".best"; });
    return t;
  };
  auto refused = [&](std::vector<std::string> args) { return refusal([&] { tool()->parse(args); }); };

  EXPECT_EQ(refused({in, "-o", in, "-f"}),
            (Refusal{64, "--output is " + in + ", which is also INPUT: writing it would replace what is read (write to "
                         "another file)"}));
  // The same file however spelt.
  const std::string spelt = dir.path() + "/./in.txt";
  EXPECT_EQ(refused({in, "-o", spelt}).code, 64);
  const std::string out = dir.file("out");
  EXPECT_EQ(refused({in, "-o", out, "--log", out}),
            (Refusal{64, "--log is " + out + ", which --output writes too (give each its own file)"}));
  EXPECT_EQ(refused({in, "-o", out, "--log", out + ".best"}),
            (Refusal{64, "--log is " + out + ".best, which --output (the best one) writes too (give each its own file)"}));
  EXPECT_EQ(refused({in, "-o", in + ".x", "--log", in}).line,
            "--log is " + in + ", which is also INPUT: writing it would replace what is read (write to another file)");
  // Streams are written through, never replaced: any two may be one.
  EXPECT_EQ(refused({in, "-o", "/dev/null", "--log", "/dev/null"}).code, 0);
  EXPECT_EQ(refused({in, "-o", out, "--log", dir.file("log")}).code, 0);
}

TEST(CliOptions, SettingsWithoutACommandLineFailAsTheToolWouldNamingTheirSource) {
  test::TempDir dir;
  Tool tool;
  tool.cli.parse_settings({dir.write("base.ini", "n-layer = 2\nname = base\n")}, {{"name", "grid"}}, "g.ini: [axes]");
  EXPECT_EQ(tool.cli.get<int64_t>("n-layer"), 2);
  EXPECT_EQ(tool.cli.get<std::string>("name"), "grid");
  EXPECT_EQ(refusal([&] { tool.cli.fail("name", "is taken"); }), (Refusal{78, "g.ini: [axes]: name is taken"}));

  EXPECT_EQ(refusal([] { Tool().cli.parse_settings({}, {{"n-layer", "two"}}, "g.ini:3"); }),
            (Refusal{78, "g.ini:3: the argument ('two') for option 'n-layer' is invalid"}));
  // Without a source the key values stand for a command line: 64, and the tool's --help.
  EXPECT_EQ(refusal([] { Tool().cli.parse_settings({}, {{"n-layer", "two"}}); }),
            (Refusal{64, "the argument ('two') for option 'n-layer' is invalid (see xl-x --help)"}));
}

TEST(CliOptions, TheCommandLineIsRecordedAsAShellWouldReadIt) {
  test::Argv argv({"xl-x", "in put.txt", "--name", "plain", ""});
  EXPECT_EQ(cli::command_line(argv.argc(), argv.argv()), "xl-x 'in put.txt' --name plain ''");
}

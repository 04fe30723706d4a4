// The built `flashjit` binary, run as a subprocess: exact messages and exit
// codes for bad flags, and the subcommands that need no GPU.
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "cli_runner.h"
#include "runtime/cuda_driver.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

namespace flashjit {
namespace {

using namespace testing_cli;

TEST(Cli, BadProblemFlagsAreOneLineUsageErrors) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"gen", "--hdim", "100"}, "--hdim: expected a multiple of 8 in [8, 576], got 100"},
      {{"compile", "--arch", "sm_80", "--batch", "0"},
       "--batch: expected a positive integer, got 0"},
      {{"gen", "--heads", "16", "--heads-kv", "5"},
       "--heads-kv: expected a divisor of --heads (16), got 5"},
      {{"run", "--mask", "diagonal"},
       "--mask: expected none, causal or window:LEFT,RIGHT (-1: unbounded), got diagonal"},
      {{"gen", "--dtype", "fp32"}, "--dtype: expected bf16, fp16 or e4m3, got fp32"},
      {{"run", "--repeats", "0"}, "--repeats: expected an integer >= 1, got 0"},
      {{"gen", "--splits", "257"},
       "--splits: expected 0 (heuristic), 1 (off) or a number of splits up to 256, got 257"},
      {{"run", "--splits", "-1"},
       "--splits: expected 0 (heuristic), 1 (off) or a number of splits up to 256, got -1"},
      {{"compile", "--arch", "sm_90a", "--pack-gqa", "yes"},
       "--pack-gqa: expected auto, on or off, got yes"},
      {{"gen", "--pass", "bwd", "--splits", "2"},
       "--splits: expected 0 with --pass bwd (it only changes the forward), got 2"},
      {{"gen", "--pass", "bwd", "--pack-gqa", "on"},
       "--pack-gqa: expected auto with --pass bwd (it only changes the forward), got on"},
      {{"gen", "--page-size", "-16"},
       "--page-size: expected 0 (contiguous) or 1 to 512 rows, got -16"},
      {{"run", "--page-size", "1024"},
       "--page-size: expected 0 (contiguous) or 1 to 512 rows, got 1024"},
      {{"gen", "--pass", "bwd", "--page-size", "64"},
       "--page-size: expected 0 with --pass bwd (a KV cache is a forward input), got 64"},
      {{"gen", "--pass", "bwd", "--cache-seqlens"},
       "--cache-seqlens: expected --pass fwd (a KV cache is a forward input), got --pass bwd"},
      {{"gen", "--seqlen-k", "1000", "--page-size", "64"},
       "seqlen_k=1000 is not a multiple of page_size=64: with a paged cache seqlen_k is the "
       "page table's width (pages per sequence) times page_size"},
  };
  for (const auto &[args, message] : cases) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args[1];
    EXPECT_EQ(r.err, "flashjit: error: " + message + "\n");
    EXPECT_EQ(r.out, "");
  }
}

TEST(Cli, UnknownFlagsAndMissingSubcommandAreUsageErrors) {
  CliResult r = run_cli({"gen", "--no-such-flag"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("flashjit: error: Unknown command line argument '--no-such-flag'", 0), 0u)
      << r.err;
  r = run_cli({});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "flashjit: error: expected a subcommand: info, gen, compile, run, tune, precompile, "
            "query or db (see flashjit --help)\n");
}

TEST(Cli, ConfigTheGeneratorRejectsIsAUsageError) {
  const CliResult r = run_cli({"gen", "--arch", "sm_80", "--block-m", "7"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("flashjit: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("block_m=7"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// The flags reach the generator, which names the field it refuses: the
// sm80 family splits the keys but does not pack GQA.
TEST(Cli, PackingTheFamilyLacksIsAUsageErrorSplitsAreNot) {
  const CliResult r = run_cli(
      {"gen", "--arch", "sm_80", "--heads", "32", "--heads-kv", "8", "--pack-gqa", "on"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("flashjit: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("pack_gqa=on"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sm90 family only"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  const CliResult split = run_cli(
      {"gen", "--arch", "sm_80", "--heads", "32", "--heads-kv", "8", "--splits", "4"});
  EXPECT_EQ(split.code, 0) << split.err;
  EXPECT_NE(split.out.find("constexpr bool kSplitKv = true;"), std::string::npos);
  EXPECT_NE(split.out.find("#include \"fwd_combine.cuh\""), std::string::npos);
}

TEST(Cli, GenPrintsThePrelude) {
  const CliResult r = run_cli({"gen", "--arch", "sm_80", "--hdim", "64", "--mask", "causal"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char *text : {"constexpr int kHeadDimQK = 64;", "constexpr int kHeadDimV = 64;",
                           "constexpr int kBlockM = ", "using Element = bf16;",
                           "using Mask = CausalMask;", "#include \"fwd_sm80.cuh\""})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;

  const CliResult expanded = run_cli({"gen", "--arch", "sm_80", "--expanded"});
  ASSERT_EQ(expanded.code, 0) << expanded.err;
  EXPECT_EQ(expanded.out.find("#include \"fwd_sm80.cuh\""), std::string::npos);
  EXPECT_GT(expanded.out.size(), r.out.size() * 5);
}

TEST(Cli, CompileReportsRegistersWithoutAGpu) {
  for (const char *arch : {"sm_80", "sm_90a"}) {
    const CliResult r = run_cli({"compile", "--arch", arch, "--hdim", "64"});
    ASSERT_EQ(r.code, 0) << arch << ": " << r.err;
    EXPECT_NE(r.out.find(std::string("arch       ") + arch), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("registers  "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("registers  0\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("spills     "), std::string::npos) << r.out;
  }
}

// The sm90 kernels' warp roles: the setmaxnreg budgets each runs with.
TEST(Cli, CompileReportsRegistersPerWarpRole) {
  struct Case {
    std::vector<std::string> flags;
    std::string roles;  // empty: no line
  };
  const Case cases[] = {
      {{"--hdim", "128"},
       "roles      producer warpgroup 24 registers, 2 consumer warpgroups 240 each (setmaxnreg)\n"},
      {{"--hdim", "256"},
       "roles      producer warpgroup 40 registers, 2 consumer warpgroups 232 each (setmaxnreg)\n"},
      {{"--pass", "bwd", "--hdim", "64"},
       "roles      producer warpgroup 24 registers, 2 consumer warpgroups 240 each (setmaxnreg)\n"},
      // d=64 beyond 1024 queries, or beyond 256 without a mask: three
      // consumer warpgroups (block_m 192).
      {{"--hdim", "64", "--seqlen", "1025", "--causal"},
       "roles      producer warpgroup 32 registers, 3 consumer warpgroups 160 each (setmaxnreg)\n"},
      {{"--hdim", "64", "--seqlen", "1024", "--causal"},
       "roles      producer warpgroup 24 registers, 2 consumer warpgroups 240 each (setmaxnreg)\n"},
      {{"--hdim", "64", "--seqlen", "1024"},
       "roles      producer warpgroup 32 registers, 3 consumer warpgroups 160 each (setmaxnreg)\n"},
      {{"--hdim", "64", "--seqlen", "512"},
       "roles      producer warpgroup 32 registers, 3 consumer warpgroups 160 each (setmaxnreg)\n"},
      {{"--hdim", "64", "--seqlen", "256"},
       "roles      producer warpgroup 24 registers, 2 consumer warpgroups 240 each (setmaxnreg)\n"},
      {{"--hdim", "128", "--path", "sm80"}, ""},
  };
  for (const Case &c : cases) {
    std::vector<std::string> args = {"compile", "--arch", "sm_90a"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const CliResult r = run_cli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    if (c.roles.empty()) {
      EXPECT_EQ(r.out.find("roles "), std::string::npos) << r.out;
    } else {
      EXPECT_NE(r.out.find(c.roles), std::string::npos) << r.out;
    }
  }
  const CliResult json =
      run_cli({"compile", "--arch", "sm_90a", "--hdim", "64", "--seqlen", "4096", "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_NE(json.out.find("\"producer_registers\": 32"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"consumer_registers\": 160"), std::string::npos) << json.out;
}

TEST(Cli, CompileWritesTheCubinAndJson) {
  llvm::SmallString<128> cubin;
  llvm::sys::fs::createTemporaryFile("flashjit-cli", "cubin", cubin);
  const CliResult r =
      run_cli({"compile", "--arch", "sm_80", "--hdim", "32", "--json", "-o", cubin.str().str()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"registers\":"), std::string::npos) << r.out;
  EXPECT_EQ(slurp(cubin).substr(0, 4), "\x7f" "ELF");
  llvm::sys::fs::remove(cubin);
}

TEST(Cli, InfoExitsZeroWithOrWithoutAGpu) {
  const CliResult r = run_cli({"info"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Templates: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Database: "), std::string::npos) << r.out;
  auto driver = cuda_driver();
  if (!driver) {
    llvm::consumeError(driver.takeError());
    EXPECT_NE(r.out.find("GPU: none ("), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find("GPU 0: "), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace flashjit

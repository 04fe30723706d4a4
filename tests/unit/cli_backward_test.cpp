// `--pass bwd` and `--deterministic` through the flashjit binary, no GPU
// needed: the backward program's prelude and its compile to a cubin.
#include <gtest/gtest.h>

#include "cli_runner.h"

namespace flashjit {
namespace {

using namespace testing_cli;

TEST(CliBackward, GenPrintsTheBackwardPrelude) {
  // sm_80: the deterministic mode's own dQ kernel (sm_90a takes sm90's).
  const CliResult r = run_cli(
      {"gen", "--pass", "bwd", "--arch", "sm_80", "--hdim", "72", "--causal", "--deterministic"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("// flashjit backward kernels "
                       "bwd_sm80_bf16_hdqk72_hdv72_causal_nocap_bm64_bn128_w8_s2_det_sm_80"),
            std::string::npos)
      << r.out;
  for (const char *line : {"constexpr int kHeadDimQK = 72;", "constexpr bool kDeterministic = true;",
                           "using Mask = CausalMask;", "#include \"bwd_sm80.cuh\"",
                           "#include \"bwd_dq_sm80.cuh\""})
    EXPECT_NE(r.out.find(line), std::string::npos) << line;
}

TEST(CliBackward, CompileReportsTheMainKernel) {
  const CliResult r = run_cli({"compile", "--pass", "bwd", "--arch", "sm_80", "--hdim", "64"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("kernel     bwd_sm80_bf16_hdqk64_hdv64_none_nocap_bm128_bn128_w8_s2_sm_80"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("registers  "), std::string::npos) << r.out;
}

TEST(CliBackward, BadPassAndMisplacedDeterministicAreUsageErrors) {
  CliResult r = run_cli({"gen", "--pass", "back", "--arch", "sm_90a"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "flashjit: error: --pass: expected fwd or bwd, got back\n");
  r = run_cli({"gen", "--deterministic", "--arch", "sm_90a"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "flashjit: error: --deterministic: expected --pass bwd (it only changes the "
            "backward), got --pass fwd\n");
  r = run_cli({"gen", "--pass", "bwd", "--arch", "sm_90a", "--stages", "3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("stages=3 is not 1 or 2 (Q/dO buffers)"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flashjit

// The pass/fail criterion (reference/accuracy.h) and the ptxas report parser.
#include <cmath>
#include <limits>

#include "cli/ptxas_report.h"
#include "gtest/gtest.h"
#include "reference/accuracy.h"
#include "reference/cpu_attention.h"

namespace flashjit {
namespace {

TEST(Accuracy, PassesWithinTwiceTheBaseline) {
  const std::vector<float> ref = {1.0f, 2.0f, 3.0f};
  const std::vector<float> low = {1.0f, 2.01f, 3.0f};  // baseline 0.01
  const AccuracyReport ok = check_forward_accuracy({1.0f, 2.0f, 2.98f}, ref, low);
  EXPECT_TRUE(ok.passed) << ok.describe();
  EXPECT_NEAR(ok.max_err, 0.02, 1e-6);
  EXPECT_NEAR(ok.baseline_err, 0.01, 1e-6);
  EXPECT_NEAR(ok.tolerance, 0.02 + 1e-5, 1e-6);
  EXPECT_EQ(ok.describe().rfind("PASS", 0), 0u) << ok.describe();

  const AccuracyReport bad = check_forward_accuracy({1.0f, 2.0f, 2.97f}, ref, low);
  EXPECT_FALSE(bad.passed);
  EXPECT_EQ(bad.describe().rfind("FAIL", 0), 0u) << bad.describe();
}

TEST(Accuracy, AnExactBaselineStillAllowsAtol) {
  const std::vector<float> ref = {1.0f};
  EXPECT_TRUE(check_forward_accuracy({1.000005f}, ref, ref).passed);
  EXPECT_FALSE(check_forward_accuracy({1.0001f}, ref, ref).passed);
}

TEST(Accuracy, NanMeansUnwrittenAndFails) {
  const std::vector<float> ref = {1.0f, 2.0f};
  const AccuracyReport r = check_forward_accuracy({1.0f, NAN}, ref, {1.5f, 2.5f});
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.unwritten, 1u);
  EXPECT_NE(r.describe().find("1 of 2 outputs unwritten"), std::string::npos) << r.describe();
}

TEST(Accuracy, LseMatchesInfinityForMaskedRows) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ref = {1.0f};
  AccuracyReport r = check_forward_accuracy(ref, ref, ref, {inf, 0.5f}, {inf, 0.5004f});
  EXPECT_TRUE(r.passed) << r.describe();
  EXPECT_TRUE(r.lse_checked);
  r = check_forward_accuracy(ref, ref, ref, {3.0f, 0.5f}, {inf, 0.5f});
  EXPECT_FALSE(r.passed) << r.describe();
  r = check_forward_accuracy(ref, ref, ref, {NAN, 0.5f}, {inf, 0.5f});
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.lse_unwritten, 1u);
}

TEST(Accuracy, TheElementBaselineOfARealProblemIsSmallButNonzero) {
  Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 2;
  p.seqlen_q = 17;
  p.seqlen_k = 33;
  p.head_dim_qk = p.head_dim_v = 16;
  std::vector<float> q(q_elements(p)), k(k_elements(p)), v(v_elements(p));
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return float(int(state >> 8) % 2001 - 1000) / 500.0f;
  };
  for (auto *t : {&q, &k, &v})
    for (float &x : *t) x = round_to(p.dtype, next());
  const AttentionOutputs exact = cpu_attention(p, q, k, v);
  const AttentionOutputs low = cpu_attention(p, q, k, v, ReferencePrecision::element);
  const double baseline = max_abs_error(low.out, exact.out);
  EXPECT_GT(baseline, 1e-4);  // bf16 has 8 bits of mantissa
  EXPECT_LT(baseline, 3e-2);
  // The exact reference passes against itself, the element one against exact.
  EXPECT_TRUE(check_forward_accuracy(exact.out, exact.out, low.out, exact.lse, exact.lse).passed);
  EXPECT_TRUE(check_forward_accuracy(low.out, exact.out, low.out).passed);
}

TEST(PtxasReport, ParsesRegistersSpillsAndSmem) {
  const char *log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'other' for 'sm_80'\n"
      "ptxas info    : Function properties for other\n"
      "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 0 barriers, 512 bytes smem\n"
      "ptxas info    : Compiling entry function 'flashjit_fwd_sm80' for 'sm_90a'\n"
      "ptxas info    : Function properties for flashjit_fwd_sm80\n"
      "ptxas         .     72 bytes stack frame, 88 bytes spill stores, 100 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 464 bytes cmem[0]\n"
      "ptxas info    : Compile time = 300.5 ms\n";
  auto r = cli::parse_ptxas_report(log, "flashjit_fwd_sm80");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->registers, 255);
  EXPECT_EQ(r->static_smem_bytes, 1024);
  EXPECT_EQ(r->stack_frame_bytes, 72);
  EXPECT_EQ(r->spill_store_bytes, 88);
  EXPECT_EQ(r->spill_load_bytes, 100);
  auto first = cli::parse_ptxas_report(log);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->registers, 40);
  EXPECT_FALSE(cli::parse_ptxas_report("no report here").has_value());
  EXPECT_FALSE(cli::parse_ptxas_report(log, "missing").has_value());
}

}  // namespace
}  // namespace flashjit

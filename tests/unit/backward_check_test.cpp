// The small problem a backward class is checked on (the float64 CPU
// reference is O(b·h·sq·sk·d)): sizes scaled down together, the class kept.
#include <gtest/gtest.h>

#include "reference/backward_check.h"

namespace flashjit {
namespace {

Problem make(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk) {
  Problem p;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.head_dim_qk = p.head_dim_v = 128;
  p.mask = MaskKind::causal;
  return p;
}

TEST(BackwardAccuracyProblem, SmallProblemsAreCheckedAsGiven) {
  const Problem p = make(2, 4, 2, 300, 77);
  const Problem c = backward_accuracy_problem(p);
  EXPECT_EQ(describe(c), describe(p));
}

TEST(BackwardAccuracyProblem, LargeOnesKeepTheClass) {
  struct Case {
    Problem in;
    const char *expected;
  };
  const Case cases[] = {
      {make(2, 16, 16, 8192, 8192), "bf16 b=1 hq=2 hkv=2 sq=300 sk=300 d=128 dv=128 causal"},
      {make(4, 32, 8, 4096, 4096), "bf16 b=1 hq=4 hkv=1 sq=300 sk=300 d=128 dv=128 causal"},
      {make(16, 32, 8, 1, 8192), "bf16 b=1 hq=4 hkv=1 sq=1 sk=300 d=128 dv=128 causal"},
      {make(1, 8, 2, 2000, 1000), "bf16 b=1 hq=8 hkv=2 sq=300 sk=150 d=128 dv=128 causal"},
      {make(1, 16, 2, 512, 512), "bf16 b=1 hq=8 hkv=1 sq=300 sk=300 d=128 dv=128 causal"},
  };
  for (const Case &c : cases) {
    const Problem out = backward_accuracy_problem(c.in);
    EXPECT_EQ(describe(out), c.expected) << describe(c.in);
    EXPECT_EQ(out.heads_q / out.heads_kv, c.in.heads_q / c.in.heads_kv) << describe(c.in);
  }
}

}  // namespace
}  // namespace flashjit

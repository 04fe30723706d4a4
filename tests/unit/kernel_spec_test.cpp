// Spec validation: what is accepted, what is rejected and what the message
// says, and the normalisations that make equal kernels share one ID.
#include <gtest/gtest.h>

#include "generator/fwd_sm80_traits.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};
const TargetArch kSm80{8, 0, false};

Problem base_problem() {
  Problem p;
  p.batch = 2;
  p.heads_q = 16;
  p.heads_kv = 16;
  p.seqlen_q = 1000;
  p.seqlen_k = 1000;
  return p;
}

std::string error_of(llvm::Error e) { return llvm::toString(std::move(e)); }

std::string spec_error(const Problem &p, const KernelConfig &c, TargetArch arch = kSm90a) {
  auto spec = make_forward_spec(p, c, arch);
  if (spec) return "";
  return error_of(spec.takeError());
}

KernelConfig config(int m, int n, int w, int s) { return {KernelPath::sm80, m, n, w, s}; }

TEST(KernelSpec, AcceptsTheHeuristicForEveryHeadDimAndArch) {
  for (TargetArch arch : {kSm80, TargetArch{8, 6, false}, kSm90a})
    for (int d = 8; d <= 256; d += 8) {
      Problem p = base_problem();
      p.head_dim_qk = p.head_dim_v = d;
      KernelConfig c = default_forward_config(p, arch);
      auto spec = make_forward_spec(p, c, arch);
      ASSERT_TRUE(bool(spec)) << "d=" << d << " " << arch.name() << ": "
                              << error_of(spec.takeError());
      EXPECT_EQ(spec->config, c);
    }
}

TEST(KernelSpec, RejectsHeadDimsNotMultipleOf8) {
  Problem p = base_problem();
  p.head_dim_qk = 100;
  EXPECT_EQ(error_of(validate_problem(p)),
            "head_dim_qk=100 is not supported: expected a multiple of 8 in [8, 576] (pad other "
            "sizes; the Python binding does this for you)");
  p.head_dim_qk = 584;
  EXPECT_NE(error_of(validate_problem(p)).find("head_dim_qk=584"), std::string::npos);
  p.head_dim_qk = 128;
  p.head_dim_v = 0;
  EXPECT_NE(error_of(validate_problem(p)).find("head_dim_v=0"), std::string::npos);
}

TEST(KernelSpec, RejectsBadShapes) {
  Problem p = base_problem();
  p.seqlen_q = 0;
  EXPECT_EQ(error_of(validate_problem(p)), "seqlen_q=0 is out of range: expected 1 to 2147483647");
  p = base_problem();
  p.batch = -3;
  EXPECT_EQ(error_of(validate_problem(p)), "batch=-3 is out of range: expected 1 to 2147483647");
  p = base_problem();
  p.heads_kv = 5;
  EXPECT_EQ(error_of(validate_problem(p)),
            "heads_q=16 is not a multiple of heads_kv=5 (GQA/MQA need whole groups)");
  p = base_problem();
  p.seqlen_k = int64_t(1) << 40;
  EXPECT_NE(error_of(validate_problem(p)).find("seqlen_k=1099511627776"), std::string::npos);
}

TEST(KernelSpec, RejectsBadWindowsAndScales) {
  Problem p = base_problem();
  p.mask = MaskKind::window;
  p.window_left = -2;
  EXPECT_EQ(error_of(validate_problem(p)),
            "window=(-2,-1) is invalid: each bound is -1 (unbounded) or >= 0");
  p = base_problem();
  p.softcap = -1;
  EXPECT_NE(error_of(validate_problem(p)).find("softcap=-1"), std::string::npos);
  p = base_problem();
  p.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(error_of(validate_problem(p)).find("softmax_scale=nan"), std::string::npos);
}

TEST(KernelSpec, NormalisesEquivalentMasks) {
  Problem p = base_problem();
  p.mask = MaskKind::window;
  EXPECT_EQ(normalized_mask(p), MaskKind::none);
  p.window_right = 0;
  EXPECT_EQ(normalized_mask(p), MaskKind::causal);
  p.window_left = 128;
  EXPECT_EQ(normalized_mask(p), MaskKind::window);
  p.mask = MaskKind::causal;
  EXPECT_EQ(normalized_mask(p), MaskKind::causal);
}

TEST(KernelSpec, IdNamesEveryParameter) {
  Problem p = base_problem();
  p.mask = MaskKind::causal;
  p.softcap = 30;
  auto spec = make_forward_spec(p, config(128, 64, 4, 2), kSm90a);
  ASSERT_TRUE(bool(spec));
  EXPECT_EQ(spec->id(), "fwd_sm80_bf16_hdqk128_hdv128_causal_softcap_bm128_bn64_w4_s2_sm_90a");
  // Sequence lengths, heads and scale are run-time: same kernel.
  Problem q = p;
  q.seqlen_q = 17;
  q.heads_q = q.heads_kv = 3;
  q.softmax_scale = 0.5f;
  auto other = make_forward_spec(q, config(128, 64, 4, 2), kSm90a);
  ASSERT_TRUE(bool(other));
  EXPECT_EQ(other->id(), spec->id());
}

TEST(KernelSpec, RejectsImpossibleConfigsWithEveryReason) {
  Problem p = base_problem();
  EXPECT_EQ(spec_error(p, config(96, 64, 4, 2)),
            "sm80 forward config (block_m=96 block_n=64 warps=4 stages=2, d=128 dv=128) is "
            "invalid: block_m=96 must be 16 or 32 rows per warp (16*warps or 32*warps = 64 or 128)");
  EXPECT_EQ(spec_error(p, config(128, 40, 3, 1)),
            "sm80 forward config (block_m=128 block_n=40 warps=3 stages=1, d=128 dv=128) is "
            "invalid: warps=3 is not 1, 2, 4 or 8; block_n=40 is not a multiple of 16 in [16, "
            "256]; stages=1 is not in [2, 4]");
  // d=256 with 32 rows per warp needs 256 O accumulators per thread.
  p.head_dim_qk = p.head_dim_v = 256;
  EXPECT_NE(spec_error(p, config(128, 64, 4, 2)).find("fp32 accumulators per thread exceed 192"),
            std::string::npos);
  // 128x128 tiles at d=256, 3 stages: 64 KB + 3 * 128 KB.
  EXPECT_NE(spec_error(p, config(128, 128, 8, 3)).find("the device allows 232448"),
            std::string::npos);
  EXPECT_NE(spec_error(base_problem(), KernelConfig{}).find("incomplete"), std::string::npos);
  KernelConfig sm90 = config(128, 64, 4, 2);
  sm90.path = KernelPath::sm90;
  EXPECT_EQ(spec_error(base_problem(), sm90, kSm80),
            "kernel path sm90 needs an sm_90a target (wgmma, setmaxnreg, TMA), not sm_80: use "
            "sm80");
  EXPECT_EQ(spec_error(base_problem(), sm90),
            "sm90 forward config (block_m=128 block_n=64 warps=4 stages=2, d=128 dv=128) is "
            "invalid: warps=4 is not 12 (one producer and 2 consumer warpgroups at block_m=128)");
  Problem d24 = base_problem();
  d24.head_dim_qk = d24.head_dim_v = 24;
  sm90.warps = 12;
  EXPECT_NE(spec_error(d24, sm90).find("the sm90 kernel serves head dims that are multiples of 8 "
                                       "from 32 to 576"),
            std::string::npos);
  Problem d96 = base_problem();
  d96.head_dim_qk = d96.head_dim_v = 96;
  EXPECT_EQ(spec_error(d96, sm90), "");
  EXPECT_EQ(spec_error(base_problem(), sm90), "");
}

TEST(Heuristic, FitsSmallerSharedMemory) {
  Problem p = base_problem();
  p.head_dim_qk = p.head_dim_v = 256;
  const TargetArch sm86{8, 6, false};
  KernelConfig c = default_forward_config(p, sm86);
  auto t = FwdSm80Traits::make(256, 256, c.block_m, c.block_n, c.warps, c.stages, 0);
  ASSERT_TRUE(bool(t));
  EXPECT_LE(t->smem_bytes(), max_smem_per_block(sm86));
  // Fields the caller set survive.
  KernelConfig partial;
  partial.block_n = 32;
  EXPECT_EQ(default_forward_config(base_problem(), kSm90a, 0, partial).block_n, 32);
}

TEST(TargetArch, ParsesAndRejects) {
  auto a = TargetArch::parse("sm_90a");
  ASSERT_TRUE(bool(a));
  EXPECT_EQ(*a, kSm90a);
  EXPECT_EQ(a->name(), "sm_90a");
  auto b = TargetArch::parse("sm_86");
  ASSERT_TRUE(bool(b));
  EXPECT_EQ(b->sm(), 86);
  EXPECT_EQ(TargetArch::for_device(9, 0), kSm90a);
  EXPECT_EQ(TargetArch::for_device(8, 0), kSm80);
  for (const char *bad : {"sm_75", "90", "sm_80a", "compute_90", "sm_x"}) {
    auto r = TargetArch::parse(bad);
    ASSERT_FALSE(bool(r)) << bad;
    EXPECT_NE(error_of(r.takeError()).find(bad), std::string::npos);
  }
}

}  // namespace
}  // namespace flashjit
